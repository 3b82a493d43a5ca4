/**
 * `costAfter` through Express 5, Express 4, the Fastify plugin and a Fastify route's
 * `config.rateLimit`, on MemoryStore and RedisStore: a request checked on arrival with its
 * `cost` (a reservation) is settled to what its response says it cost, in both directions;
 * a response already sent never becomes a denial, and the next request waits exactly for the
 * debt. A client that went away is settled to what `costAfter` says with `finished` false.
 * Settlements happen after the response: tests wait for them (bounded), never sleep.
 */
import http from 'node:http';
import { uniquePrefix } from '../helpers/redis';
import { storesOfTestFile } from '../helpers/stores';
import { counted, eventually, FRAMEWORK_ROWS, type Route, START, type TestOptions, type TestRequest } from './frameworks';

const STORES = storesOfTestFile();
const IP = 'ip:127.0.0.1';
const MINUTE = 60_000;

/** What each request of the route "used": the `x-used` header it was sent with, recorded by the route; it answers `x-status` (200). */
function meteredRoute(): { route: Route; used: WeakMap<object, number> } {
  const used = new WeakMap<object, number>();
  return {
    used,
    route: {
      handle: (request: TestRequest) => {
        used.set(request, Number(request.headers['x-used'] ?? 0));
        return { status: Number(request.headers['x-status'] ?? 200), body: 'ok' };
      },
    },
  };
}

describe.each(STORES)('on %s', (_storeName, makeStore) => {
  describe.each(FRAMEWORK_ROWS)('%s', (_frameworkName, framework) => {
    /** A token budget of 1000 a minute: each request reserves its `x-reserve` header, and is settled to `x-used`. */
    async function start(more: TestOptions = {}) {
      const { route, used } = meteredRoute();
      const finishedFlags: boolean[] = [];
      const options: TestOptions = {
        limit: 1_000,
        window: '1m',
        algorithm: 'fixed-window',
        cost: (request) => Number(request.headers['x-reserve'] ?? 0),
        costAfter: (request, _response, finished) => {
          finishedFlags.push(finished);
          return used.get(request) ?? 0;
        },
        ...more,
      };
      const app = await framework.start(options, { store: makeStore(), clock: () => START, prefix: uniquePrefix('after'), route });
      return { app, finishedFlags };
    }

    test('a reservation settled down: the difference is given back', async () => {
      const { app, finishedFlags } = await start();
      const response = await app.send({ 'x-reserve': '100', 'x-used': '30' });
      expect(response.status).toBe(200);
      // Headers go out before the response is known: they show the reservation.
      expect(response.headers['x-ratelimit-remaining']).toBe('900');
      await eventually(() => counted(app, IP), 30);
      expect(finishedFlags).toEqual([true]);
    });

    test('settled up past the limit: the response stands, the next request waits exactly for the debt', async () => {
      const { app } = await start();
      expect((await app.send({ 'x-reserve': '100', 'x-used': '1250' })).status).toBe(200);
      await eventually(() => counted(app, IP), 1_250);
      const next = await app.send({ 'x-reserve': '1' });
      expect(next.status).toBe(429);
      // Fixed window, at START (a boundary): the debt is gone with the window, 60 s on.
      expect(next.headers['retry-after']).toBe(String(MINUTE / 1_000));
      expect(app.hits()).toBe(1);
    });

    test('a reservation of 0: every request passes the check and is charged what it used', async () => {
      const { app } = await start();
      for (const used of [400, 400, 300]) expect((await app.send({ 'x-used': String(used) })).status).toBe(200);
      await eventually(() => counted(app, IP), 1_100);
      expect((await app.send({ 'x-used': '1' })).status).toBe(429);
    });

    test('a client that went away: costAfter is told so, and its answer is what the request costs', async () => {
      const started: (() => void)[] = [];
      const { route, used } = meteredRoute();
      const waitForClose: Route = {
        handle: async (request, raw) => {
          route.handle?.(request, raw);
          started.shift()?.();
          await new Promise((resolve) => raw.once('close', resolve));
          return undefined;
        },
      };
      const finishedFlags: boolean[] = [];
      const app = await framework.start(
        {
          limit: 1_000,
          window: '1m',
          cost: (request) => Number(request.headers['x-reserve'] ?? 0),
          // The work was done for a client that left: this app charges half of it.
          costAfter: (request, _response, finished) => {
            finishedFlags.push(finished);
            const cost = used.get(request) ?? 0;
            return finished ? cost : Math.ceil(cost / 2);
          },
        },
        { store: makeStore(), clock: () => START, prefix: uniquePrefix('gone'), route: waitForClose },
      );
      const handlerStarted = new Promise<void>((resolve) => started.push(resolve));
      const req = http.get({
        host: '127.0.0.1',
        port: app.port,
        path: '/',
        agent: false,
        headers: { 'x-reserve': '100', 'x-used': '300' },
      });
      req.on('error', () => undefined);
      await handlerStarted;
      req.destroy();
      await eventually(() => counted(app, IP), 150);
      expect(finishedFlags).toEqual([false]);
    });

    test('a costAfter that answers a bad cost reaches onError, and the request keeps its reservation', async () => {
      const errors: unknown[] = [];
      const { app } = await start({ costAfter: () => -5, onError: (error) => errors.push(error) });
      await app.send({ 'x-reserve': '100' });
      await eventually(() => errors.length, 1);
      expect(errors[0]).toMatchObject({ code: 'SWL_INVALID_COST', message: expect.stringMatching(/^costAfter: /) });
      expect(await counted(app, IP)).toBe(100);
    });

    test('in shadow mode a would-be denial is charged nothing, as enforcing would have counted', async () => {
      const { app } = await start({ shadow: true });
      expect((await app.send({ 'x-reserve': '600', 'x-used': '600' })).status).toBe(200);
      await eventually(() => counted(app, IP), 600);
      // Over the limit: served (shadow), counted nothing, and so settled to nothing.
      expect((await app.send({ 'x-reserve': '600', 'x-used': '600' })).status).toBe(200);
      expect((await app.send({ 'x-reserve': '300', 'x-used': '300' })).status).toBe(200);
      await eventually(() => counted(app, IP), 900);
      expect(app.hits()).toBe(3);
    });

    test('skipFailedRequests gives a failed request back whatever costAfter says', async () => {
      const { app } = await start({ skipFailedRequests: true });
      expect((await app.send({ 'x-reserve': '100', 'x-used': '70', 'x-status': '500' })).status).toBe(500);
      await eventually(() => counted(app, IP), 0);
      await app.send({ 'x-reserve': '100', 'x-used': '70' });
      await eventually(() => counted(app, IP), 70);
    });
  });
});
