/**
 * `skipSuccessfulRequests`, `skipFailedRequests` and `requestWasSuccessful` through
 * Express 5, Express 4, the Fastify plugin's options and a Fastify route's
 * `config.rateLimit`, on RedisStore and MemoryStore. A request is counted when it arrives
 * (so a burst cannot slip past the limit while responses are pending) and refunded after
 * its response when it should not count; a client that goes away counts as failed.
 * Refunds happen after the response: tests wait for them by polling the limiter (a
 * bounded wait), and count the store's completed refunds to tell "not refunded" from
 * "not refunded yet". Real apps on real sockets, real Redis, manual clock.
 */
import http from 'node:http';
import type { Store } from '../../src';
import type { AlgorithmName } from '../../src/algorithms/types';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { onRedis, storesOfTestFile } from '../helpers/stores';
import {
  type App,
  counted,
  eventually,
  FRAMEWORK_ROWS,
  type Route,
  START,
  type TestOptions,
  type TestResponse,
  unhandledRejectionsDuring,
} from './frameworks';

const IP = 'ip:127.0.0.1';

const STORES = storesOfTestFile();
const redisStore = STORES.find(([name]) => name === 'RedisStore')?.[1] as () => Store;

/** `store`, with a count of the refunds (settlements) it has completed. */
function watchRefunds(store: Store): { store: Store; refunds: () => number } {
  let refunds = 0;
  const settle = store.settle.bind(store);
  store.settle = (scripts, key, call) =>
    settle(scripts, key, call).then((reply) => {
      refunds++;
      return reply;
    });
  return { store, refunds: () => refunds };
}

/** The login route of the README example: 200 for the right password, 401 for a wrong one. */
const LOGIN: Route = {
  method: 'POST',
  path: '/login',
  handle: (req) => ({ status: req.headers['x-password'] === 'right' ? 200 : 401 }),
};
const RIGHT = { 'x-password': 'right' };
const WRONG = { 'x-password': 'wrong' };

/** A route answering the status in `x-status` (200 without it). */
const STATUS: Route = { handle: (req) => ({ status: Number(req.headers['x-status'] ?? 200) }) };

const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.each(STORES)('on %s', (_storeName, makeStore) => {
  describe.each(FRAMEWORK_ROWS)('%s', (_frameworkName, framework) => {
    let clock: ReturnType<typeof manualClock>;
    let refunds: () => number;
    beforeEach(() => {
      clock = manualClock(START);
    });
    const start = (options: TestOptions, route: Route) => {
      const watched = watchRefunds(makeStore());
      refunds = watched.refunds;
      return framework.start(options, { store: watched.store, clock: clock.now, prefix: uniquePrefix('skip'), route });
    };

    describe('skipSuccessfulRequests: the login example (limit 5 per 15 min)', () => {
      const options: TestOptions = { limit: 5, window: '15m', skipSuccessfulRequests: true };

      test('5 failed logins, then 429, even with the right password', async () => {
        const app = await start(options, LOGIN);
        for (let i = 0; i < 5; i++) expect((await app.send(WRONG)).status).toBe(401);
        expect((await app.send(WRONG)).status).toBe(429);
        expect((await app.send(RIGHT)).status).toBe(429);
        expect(app.hits()).toBe(5);
        expect(await counted(app, IP, { limit: 5, window: '15m' })).toBe(5);
        expect(refunds()).toBe(0);
      });

      test('successful logins are free: interleaved with successes, exactly 5 failures are allowed', async () => {
        const app = await start(options, LOGIN);
        const seen: number[] = [];
        for (let i = 0; i < 5; i++) {
          seen.push((await app.send(RIGHT)).status);
          // The success is refunded once its response is over: only the failures so far remain.
          await eventually(() => counted(app, IP, { limit: 5, window: '15m' }), i);
          seen.push((await app.send(WRONG)).status);
        }
        expect(seen).toEqual([200, 401, 200, 401, 200, 401, 200, 401, 200, 401]);
        // Five failures: the quota is used up, for a sixth failure and for a right password alike.
        expect((await app.send(WRONG)).status).toBe(429);
        expect((await app.send(RIGHT)).status).toBe(429);
        expect(app.hits()).toBe(10);
        expect(refunds()).toBe(5);
        expect(await counted(app, IP, { limit: 5, window: '15m' })).toBe(5);
      });
    });

    test('skipFailedRequests: a status of 400 or more is refunded, below 400 it counts', async () => {
      const app = await start({ limit: 2, window: '1m', identify: () => 'client', skipFailedRequests: true }, STATUS);
      for (const status of [400, 401, 404, 500, 503]) {
        expect((await app.send({ 'x-status': String(status) })).status).toBe(status);
      }
      await eventually(refunds, 5);
      expect(await counted(app, 'client')).toBe(0);
      expect((await app.send({ 'x-status': '399' })).status).toBe(399);
      // A refunded request after it: once its refund is done, the 399 is still counted.
      expect((await app.send({ 'x-status': '500' })).status).toBe(500);
      await eventually(refunds, 6);
      expect(await counted(app, 'client')).toBe(1);
      expect((await app.send({ 'x-status': '201' })).status).toBe(201);
      expect((await app.send()).status).toBe(429);
      expect(app.hits()).toBe(8);
      expect(refunds()).toBe(6);
    });

    describe('requestWasSuccessful decides what succeeded', () => {
      const notConflict = (_req: unknown, res: TestResponse) => res.statusCode !== 409;
      test.each([
        ['sync', notConflict],
        ['async', async (req: unknown, res: TestResponse) => notConflict(req, res)],
      ])('%s (res) => res.statusCode !== 409, with skipSuccessfulRequests: only 409s count', async (_kind, judge) => {
        const judged: number[] = [];
        const app = await start(
          {
            limit: 2,
            window: '1m',
            identify: () => 'client',
            skipSuccessfulRequests: true,
            requestWasSuccessful: (req, res) => {
              judged.push(res.statusCode);
              return judge(req, res);
            },
          },
          STATUS,
        );
        for (const status of [500, 200, 404]) expect((await app.send({ 'x-status': String(status) })).status).toBe(status);
        await eventually(refunds, 3);
        expect(await counted(app, 'client')).toBe(0);
        expect((await app.send({ 'x-status': '409' })).status).toBe(409);
        expect((await app.send({ 'x-status': '409' })).status).toBe(409);
        expect((await app.send()).status).toBe(429);
        await eventually(async () => judged.length, 5);
        expect(judged).toEqual([500, 200, 404, 409, 409]);
        expect(refunds()).toBe(3);
        expect(await counted(app, 'client')).toBe(2);
      });

      test('async, with skipFailedRequests: 409s are refunded, a 500 counts', async () => {
        const app = await start(
          {
            limit: 2,
            window: '1m',
            identify: () => 'client',
            skipFailedRequests: true,
            requestWasSuccessful: async (_req, res) => res.statusCode !== 409,
          },
          STATUS,
        );
        for (let i = 0; i < 3; i++) expect((await app.send({ 'x-status': '409' })).status).toBe(409);
        await eventually(refunds, 3);
        expect((await app.send({ 'x-status': '500' })).status).toBe(500);
        expect((await app.send({ 'x-status': '500' })).status).toBe(500);
        expect((await app.send({ 'x-status': '409' })).status).toBe(429);
        expect(await counted(app, 'client')).toBe(2);
      });

      test.each([
        ['throws', 'sync'],
        ['rejects', 'async'],
      ])('one that %s: onError gets the error, the request stays counted, no unhandled rejection', async (_what, kind) => {
        const failure = new Error(`judge failed (${kind})`);
        const onError = jest.fn();
        const app = await start(
          {
            limit: 2,
            window: '1m',
            identify: () => 'client',
            skipSuccessfulRequests: true,
            onError,
            requestWasSuccessful:
              kind === 'sync'
                ? () => {
                    throw failure;
                  }
                : async () => Promise.reject(failure),
          },
          STATUS,
        );
        const unhandled = await unhandledRejectionsDuring(async () => {
          expect((await app.send()).status).toBe(200);
          await eventually(async () => onError.mock.calls.length, 1);
        });
        expect(unhandled).toEqual([]);
        expect(onError.mock.calls[0][0]).toBe(failure);
        expect(refunds()).toBe(0);
        expect(await counted(app, 'client')).toBe(1);
        expect(app.errors).toEqual([]);
      });
    });

    describe('count first: a burst cannot slip past the limit while responses are pending', () => {
      test.each([
        ['skipSuccessfulRequests', 401, { skipSuccessfulRequests: true }],
        ['skipFailedRequests', 200, { skipFailedRequests: true }],
      ] as const)(
        '%s: 100 concurrent requests whose handler answers %i after 50 ms, limit 5: exactly 5 get past',
        async (_name, status, skipOption) => {
          const app = await start(
            { limit: 5, window: '1m', identify: () => 'client', ...skipOption },
            {
              handle: async () => {
                await delay(50);
                return { status };
              },
            },
          );
          const responses = await Promise.all(Array.from({ length: 100 }, () => app.send()));
          const byStatus = new Map<number, number>();
          for (const response of responses) byStatus.set(response.status, (byStatus.get(response.status) ?? 0) + 1);
          expect(Object.fromEntries(byStatus)).toEqual({ [status]: 5, 429: 95 });
          expect(app.hits()).toBe(5);
          expect(await counted(app, 'client')).toBe(5);
          expect(refunds()).toBe(0);
        },
      );
    });

    describe('a client that goes away before the response counts as failed', () => {
      /** Sends a request the route holds until its client has gone, aborts it, and waits until the server saw the close. */
      async function abandon(app: App, gone: Promise<void>, entered: Promise<void>): Promise<void> {
        const req = http.request({ host: '127.0.0.1', port: app.port, path: '/', method: 'GET', headers: { 'x-hang': '1' }, agent: false });
        req.on('error', () => undefined); // ECONNRESET on our own abort
        req.end();
        await entered;
        req.destroy();
        await gone;
      }

      function hangingRoute() {
        let signalEntered!: () => void;
        let signalGone!: () => void;
        const entered = new Promise<void>((resolve) => {
          signalEntered = resolve;
        });
        const gone = new Promise<void>((resolve) => {
          signalGone = resolve;
        });
        const route: Route = {
          handle: (req, raw) => {
            if (req.headers['x-hang'] === undefined) return { status: Number(req.headers['x-status'] ?? 200) };
            return new Promise((resolve) => {
              raw.once('close', () => {
                signalGone();
                resolve({ status: 200 });
              });
              signalEntered();
            });
          },
        };
        return { route, entered, gone };
      }

      test('with skipFailedRequests: refunded', async () => {
        const { route, entered, gone } = hangingRoute();
        const app = await start({ limit: 2, window: '1m', identify: () => 'client', skipFailedRequests: true }, route);
        await abandon(app, gone, entered);
        await eventually(refunds, 1);
        expect(await counted(app, 'client')).toBe(0);
        expect(app.hits()).toBe(1);
        expect(await Promise.all([app.send(), app.send(), app.send()]).then((rs) => rs.map((r) => r.status).sort())).toEqual([
          200, 200, 429,
        ]);
      });

      test('with skipSuccessfulRequests: not refunded (it did not succeed)', async () => {
        const { route, entered, gone } = hangingRoute();
        const judge = jest.fn((_req: unknown, res: TestResponse) => res.statusCode < 400);
        const app = await start(
          { limit: 2, window: '1m', identify: () => 'client', skipSuccessfulRequests: true, requestWasSuccessful: judge },
          route,
        );
        await abandon(app, gone, entered);
        // A successful request after it, refunded: once that refund is done, the abandoned one is still counted.
        expect((await app.send()).status).toBe(200);
        await eventually(refunds, 1);
        expect(await counted(app, 'client')).toBe(1);
        // The abandoned request was judged failed without asking requestWasSuccessful (its status is not a real answer).
        expect(judge).toHaveBeenCalledTimes(1);
        expect((await app.send({ 'x-status': '401' })).status).toBe(401);
        expect((await app.send()).status).toBe(429);
      });
    });
  });
});

onRedis.describe.each(FRAMEWORK_ROWS)('on RedisStore, every algorithm, %s', (_frameworkName, framework) => {
  let redisRefunds: () => number;
  test.each(['sliding-window', 'fixed-window', 'sliding-log'] as AlgorithmName[])(
    '%s: skipSuccessfulRequests refunds the success, failures count to the limit',
    async (algorithm) => {
      const watched = watchRefunds(redisStore());
      redisRefunds = watched.refunds;
      const clock = manualClock(START);
      const app = await framework.start(
        { algorithm, limit: 2, window: '1m', skipSuccessfulRequests: true },
        { store: watched.store, clock: clock.now, prefix: uniquePrefix(`skip-${algorithm}`), route: LOGIN },
      );
      expect((await app.send(RIGHT)).status).toBe(200);
      await eventually(redisRefunds, 1);
      expect(await counted(app, IP)).toBe(0);
      expect((await app.send(RIGHT)).status).toBe(200);
      await eventually(redisRefunds, 2);
      expect((await app.send(WRONG)).status).toBe(401);
      expect((await app.send(WRONG)).status).toBe(401);
      expect((await app.send(RIGHT)).status).toBe(429);
      expect(await counted(app, IP)).toBe(2);
      expect(app.hits()).toBe(4);
    },
  );
});
