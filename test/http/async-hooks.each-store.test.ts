/**
 * Async `skip`, `identify` (alone and in a list), `cost` and `message` through Express 5,
 * Express 4, the Fastify plugin's options and a Fastify route's `config.rateLimit`, on
 * RedisStore and MemoryStore: their answers are awaited (a promise is never taken for
 * `true`), and a throw or a rejection goes to the framework's error handling and to
 * `onError`, never to an unhandled rejection, never running the route, counting nothing.
 * Real apps on real sockets, real Redis, manual clock.
 */
import { byIp, byUser, OptionError } from '../../src';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { storesOfTestFile } from '../helpers/stores';
import { type App, counted, FRAMEWORK_ROWS, START, type TestOptions, type TestRequest, unhandledRejectionsDuring } from './frameworks';

const STORES = storesOfTestFile();

async function statuses(app: App, n: number, headers: Record<string, string> = {}): Promise<number[]> {
  const seen: number[] = [];
  for (let i = 0; i < n; i++) seen.push((await app.send(headers)).status);
  return seen;
}

const isBad = (req: TestRequest) => req.headers['x-bad'] !== undefined;
const userOf = (req: TestRequest) => req.headers['x-user'] as string | undefined;

/**
 * Each case: the options (limit 2 per minute, identifier 'client') with one function that
 * fails for a request with `x-bad`; the error that must reach the framework and the one
 * `onError` must get; and whether the bad request comes after the quota is used (`message`
 * runs only for a denied request).
 */
interface Failure {
  what: string;
  options: () => TestOptions;
  toFramework: RegExp | Error;
  toOnError?: unknown;
  whenDenied?: boolean;
}

function failures(): Failure[] {
  const list: Failure[] = [];
  const sync = new Error('identify failed (sync)');
  list.push({
    what: 'identify throws',
    options: () => ({
      identify: (req) => {
        if (isBad(req)) throw sync;
        return 'client';
      },
    }),
    toFramework: sync,
  });
  const rejected = new Error('identify failed (async)');
  list.push({
    what: 'identify rejects',
    options: () => ({ identify: async (req) => (isBad(req) ? Promise.reject(rejected) : 'client') }),
    toFramework: rejected,
  });
  const second = new Error('second identifier failed');
  list.push({
    what: 'identify list: an async identifier answers nothing, the next one throws',
    options: () => ({
      identify: [
        async (req) => (isBad(req) ? undefined : 'client'),
        () => {
          throw second;
        },
      ],
    }),
    toFramework: second,
  });
  list.push({
    what: 'identify resolves to an object',
    options: () => ({ identify: async (req) => (isBad(req) ? ({ id: 1 } as unknown as string) : 'client') }),
    toFramework: /^identify: /,
  });
  const skipSync = new Error('skip failed (sync)');
  list.push({
    what: 'skip throws',
    options: () => ({
      identify: () => 'client',
      skip: (req) => {
        if (isBad(req)) throw skipSync;
        return false;
      },
    }),
    toFramework: skipSync,
  });
  const skipAsync = new Error('skip failed (async)');
  list.push({
    what: 'skip rejects',
    options: () => ({ identify: () => 'client', skip: async (req) => (isBad(req) ? Promise.reject(skipAsync) : false) }),
    toFramework: skipAsync,
  });
  list.push({
    what: 'skip rejects with a string, not an Error',
    options: () => ({ identify: () => 'client', skip: async (req) => (isBad(req) ? Promise.reject('skip said no') : false) }),
    toFramework: /^skip said no$/,
    toOnError: 'skip said no',
  });
  const costSync = new Error('cost failed (sync)');
  list.push({
    what: 'cost throws',
    options: () => ({
      identify: () => 'client',
      cost: (req) => {
        if (isBad(req)) throw costSync;
        return 1;
      },
    }),
    toFramework: costSync,
  });
  const costAsync = new Error('cost failed (async)');
  list.push({
    what: 'cost rejects',
    options: () => ({ identify: () => 'client', cost: async (req) => (isBad(req) ? Promise.reject(costAsync) : 1) }),
    toFramework: costAsync,
  });
  for (const [answer, name] of [
    [1.5, '1.5'],
    [-1, '-1'],
    ['1', "'1'"],
  ] as const) {
    list.push({
      what: `cost resolves to ${name}`,
      options: () => ({ identify: () => 'client', cost: async (req) => (isBad(req) ? (answer as number) : 1) }),
      toFramework: /^cost: /,
    });
  }
  const messageSync = new Error('message failed (sync)');
  list.push({
    what: 'message throws',
    options: () => ({
      identify: () => 'client',
      message: (req) => {
        if (isBad(req)) throw messageSync;
        return 'slow down';
      },
    }),
    toFramework: messageSync,
    whenDenied: true,
  });
  const messageAsync = new Error('message failed (async)');
  list.push({
    what: 'message rejects',
    options: () => ({ identify: () => 'client', message: async (req) => (isBad(req) ? Promise.reject(messageAsync) : 'slow down') }),
    toFramework: messageAsync,
    whenDenied: true,
  });
  return list;
}

describe.each(STORES)('on %s', (_storeName, makeStore) => {
  describe.each(FRAMEWORK_ROWS)('%s', (_frameworkName, framework) => {
    let clock: ReturnType<typeof manualClock>;
    beforeEach(() => {
      clock = manualClock(START);
    });
    const start = (options: TestOptions) =>
      framework.start({ limit: 2, window: '1m', ...options }, { store: makeStore(), clock: clock.now, prefix: uniquePrefix('async') });

    describe('async skip', () => {
      test('resolving to false: counted (200, 200, 429), not let through because a promise is truthy', async () => {
        const app = await start({ identify: () => 'client', skip: async () => false });
        expect(await statuses(app, 3)).toEqual([200, 200, 429]);
        expect(app.hits()).toBe(2);
        expect(await counted(app, 'client')).toBe(2);
      });

      test('resolving to true: every request through, uncounted, without rate-limit headers', async () => {
        const app = await start({ identify: () => 'client', skip: async () => true });
        const responses = [];
        for (let i = 0; i < 5; i++) responses.push(await app.send());
        expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
        expect(responses.every((r) => r.headers['x-ratelimit-limit'] === undefined)).toBe(true);
        expect(app.hits()).toBe(5);
        expect(await counted(app, 'client')).toBe(0);
      });

      test('per request: skipped requests pass uncounted while the others use the quota', async () => {
        const app = await start({ identify: () => 'client', skip: async (req) => req.headers['x-health'] !== undefined });
        expect(await statuses(app, 2)).toEqual([200, 200]);
        expect(await statuses(app, 3, { 'x-health': '1' })).toEqual([200, 200, 200]);
        expect(await statuses(app, 1)).toEqual([429]);
        expect(await counted(app, 'client')).toBe(2);
      });
    });

    describe('async identify', () => {
      test('two async identities are counted separately', async () => {
        const app = await start({ identify: async (req) => userOf(req) });
        const ann = { 'x-user': 'ann' };
        const bob = { 'x-user': 'bob' };
        expect(await statuses(app, 3, ann)).toEqual([200, 200, 429]);
        expect(await statuses(app, 1, bob)).toEqual([200]);
        expect(await counted(app, 'ann')).toBe(2);
        expect(await counted(app, 'bob')).toBe(1);
      });

      test('in a list [async byUser, byIp()]: the async answer when there is one, else the IP', async () => {
        const app = await start({ identify: [byUser(async (req: TestRequest) => userOf(req)), byIp()] });
        expect(await statuses(app, 2, { 'x-user': 'ann' })).toEqual([200, 200]);
        expect(await statuses(app, 1, {})).toEqual([200]);
        expect(await statuses(app, 1, { 'x-user': 'ann' })).toEqual([429]);
        expect(await counted(app, 'user:ann')).toBe(2);
        expect(await counted(app, 'ip:127.0.0.1')).toBe(1);
      });

      test('in a list [plain async function, byIp()]', async () => {
        const app = await start({ identify: [async (req) => userOf(req), byIp()] });
        expect(await statuses(app, 1, { 'x-user': 'bob' })).toEqual([200]);
        expect(await statuses(app, 3, {})).toEqual([200, 200, 429]);
        expect(await counted(app, 'bob')).toBe(1);
        expect(await counted(app, 'ip:127.0.0.1')).toBe(2);
      });
    });

    test('async cost: each request costs what its promise resolves to', async () => {
      const app = await start({ limit: 5, identify: () => 'client', cost: async (req) => Number(req.headers['x-cost'] ?? 1) });
      const first = await app.send({ 'x-cost': '3' });
      expect(first.status).toBe(200);
      expect(first.headers['x-ratelimit-remaining']).toBe('2');
      expect((await app.send({ 'x-cost': '3' })).status).toBe(429);
      const third = await app.send({ 'x-cost': '2' });
      expect(third.status).toBe(200);
      expect(third.headers['x-ratelimit-remaining']).toBe('0');
      expect(await counted(app, 'client')).toBe(5);
    });

    test('async message: the body of a denial is what its promise resolves to (object as JSON, string as text)', async () => {
      const app = await start({
        limit: 1,
        identify: async (req) => userOf(req),
        message: async (req, decision) =>
          req.headers['x-text']
            ? `wait ${decision.retryAfterMs} ms`
            : { error: 'slow down', user: userOf(req), retryInMs: decision.retryAfterMs },
      });
      expect((await app.send({ 'x-user': 'ann' })).status).toBe(200);
      const json = await app.send({ 'x-user': 'ann' });
      expect(json.status).toBe(429);
      expect(json.headers['content-type']).toMatch(/^application\/json/);
      // One unit counted at a window's start (sliding window): it weighs until the next window has passed.
      expect(JSON.parse(json.text)).toEqual({ error: 'slow down', user: 'ann', retryInMs: 120_000 });
      expect(json.headers['retry-after']).toBe('120');
      const text = await app.send({ 'x-user': 'ann', 'x-text': '1' });
      expect(text.status).toBe(429);
      expect(text.headers['content-type']).toMatch(/^text\/plain/);
      expect(text.text).toBe('wait 120000 ms');
      expect(app.hits()).toBe(1);
    });

    describe('a throw or a rejection: error handling, onError, no unhandled rejection, the route not run, nothing counted', () => {
      test.each(failures().map((failure) => [failure.what, failure] as const))('%s', async (_what, failure) => {
        const onError = jest.fn();
        const app = await start({ ...failure.options(), onError });
        const used = failure.whenDenied ? 2 : 0;
        const unhandled = await unhandledRejectionsDuring(async () => {
          if (used > 0) expect(await statuses(app, used)).toEqual([200, 200]);
          const failed = await app.send({ 'x-bad': '1' });
          expect(failed.status).toBe(500);
        });
        expect(unhandled).toEqual([]);
        expect(app.hits()).toBe(used);
        expect(app.errors).toHaveLength(1);
        const [error] = app.errors;
        if (failure.toFramework instanceof RegExp) {
          expect(error).toBeInstanceOf(Error);
          expect((error as Error).message).toMatch(failure.toFramework);
          if (failure.toOnError === undefined) expect(error).toBeInstanceOf(OptionError);
        } else {
          expect(error).toBe(failure.toFramework);
        }
        expect(onError).toHaveBeenCalledTimes(1);
        expect(onError.mock.calls[0][0]).toBe(failure.toOnError ?? error);
        expect(await counted(app, 'client')).toBe(used);
        if (!failure.whenDenied) {
          // Nothing was counted: the full quota is still there.
          expect(await statuses(app, 3)).toEqual([200, 200, 429]);
          expect(app.hits()).toBe(2);
        }
      });

      test('an onError that throws itself does not change the outcome', async () => {
        const failure = new Error('identify failed');
        const app = await start({
          identify: async () => Promise.reject(failure),
          onError: () => {
            throw new Error('the logger is down');
          },
        });
        const unhandled = await unhandledRejectionsDuring(async () => {
          expect((await app.send()).status).toBe(500);
        });
        expect(unhandled).toEqual([]);
        expect(app.errors).toEqual([failure]);
        expect(app.hits()).toBe(0);
      });
    });
  });
});
