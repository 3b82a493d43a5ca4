/**
 * `limit`, `window` and `limits` as functions of the request, sync and async, through
 * Express 5, Express 4, the Fastify plugin's options and a Fastify route's
 * `config.rateLimit`, on RedisStore and MemoryStore: each request is checked against its
 * own limits (and its headers show them), counts belong to the identifier (a plan upgrade
 * keeps what was used), and an invalid answer, a throw or a rejection goes to the
 * framework's error handling and `onError`, counting nothing and never running the route.
 * Real apps on real sockets, real Redis, manual clock.
 */
import express from 'express';
import Fastify from 'fastify';
import request from 'supertest';
import { OptionError, type TierOptions } from '../../src';
import { rateLimit } from '../../src/express';
import { rateLimitPlugin } from '../../src/fastify';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { storesOfTestFile, withoutRedis } from '../helpers/stores';
import { expectOptionError, rejectionOf, thrownBy } from '../helpers/thrown';
import { type App, counted, FRAMEWORK_ROWS, START, type TestOptions, type TestRequest } from './frameworks';

const STORES = storesOfTestFile();

/** The statuses of `n` requests sent one after another. */
async function statuses(app: App, n: number, headers: Record<string, string>): Promise<number[]> {
  const seen: number[] = [];
  for (let i = 0; i < n; i++) seen.push((await app.send(headers)).status);
  return seen;
}

const byUserHeader = (req: TestRequest) => req.headers['x-user'] as string | undefined;
const isPro = (req: TestRequest) => req.headers['x-plan'] === 'pro';
const isBad = (req: TestRequest) => req.headers['x-bad'] !== undefined;

/** Each case: options whose function answers badly for a request with `x-bad`, and 2 per minute otherwise; then what must reach the error handler. */
type Invalid = [what: string, options: () => TestOptions, expected: RegExp | Error];

function invalidCases(): Invalid[] {
  const cases: Invalid[] = [];
  const good: TierOptions[] = [{ limit: 2, window: '1m' }];
  for (const [answer, name] of [
    [1.5, '1.5'],
    ['x', "'x'"],
    [-2, '-2'],
    [Number.NaN, 'NaN'],
  ] as const) {
    cases.push([`limit returns ${name}`, () => ({ limit: (req) => (isBad(req) ? (answer as number) : 2), window: '1m' }), /^limit: /]);
    cases.push([
      `limit resolves to ${name}`,
      () => ({ limit: async (req) => (isBad(req) ? (answer as number) : 2), window: '1m' }),
      /^limit: /,
    ]);
  }
  for (const [answer, name] of [
    ['soon', "'soon'"],
    [0, '0'],
    [-1000, '-1000'],
    [{}, 'an object'],
  ] as const) {
    cases.push([`window returns ${name}`, () => ({ limit: 2, window: (req) => (isBad(req) ? (answer as string) : '1m') }), /^window: /]);
    cases.push([
      `window resolves to ${name}`,
      () => ({ limit: 2, window: async (req) => (isBad(req) ? (answer as string) : '1m') }),
      /^window: /,
    ]);
  }
  for (const [answer, name, pattern] of [
    [[], '[]', /^limits: /],
    ['x', "'x'", /^limits: /],
    [[{ limit: -1, window: '1m' }], 'a tier with limit -1', /^limits\[0\]\.limit: /],
    [[{ limit: 2, window: 'soon' }], 'a tier with a bad window', /^limits\[0\]\.window: /],
    [[{ limit: 2, windo: '1m' }], 'a tier with a misspelt key', /^windo: unknown option for limits\[0\]/],
  ] as const) {
    cases.push([
      `limits returns ${name}`,
      () => ({ limits: (req) => (isBad(req) ? (answer as unknown as TierOptions[]) : good) }),
      pattern as RegExp,
    ]);
    cases.push([
      `limits resolves to ${name}`,
      () => ({ limits: async (req) => (isBad(req) ? (answer as unknown as TierOptions[]) : good) }),
      pattern as RegExp,
    ]);
  }
  const failures: [string, Error, (error: Error) => TestOptions][] = [
    [
      'limit throws',
      new Error('plan lookup failed (sync)'),
      (error) => ({
        limit: (req) => {
          if (isBad(req)) throw error;
          return 2;
        },
        window: '1m',
      }),
    ],
    [
      'limit rejects',
      new Error('plan lookup failed (async)'),
      (error) => ({ limit: async (req) => (isBad(req) ? Promise.reject(error) : 2), window: '1m' }),
    ],
    [
      'window throws',
      new Error('window lookup failed (sync)'),
      (error) => ({
        limit: 2,
        window: (req) => {
          if (isBad(req)) throw error;
          return '1m';
        },
      }),
    ],
    [
      'window rejects',
      new Error('window lookup failed (async)'),
      (error) => ({ limit: 2, window: async (req) => (isBad(req) ? Promise.reject(error) : '1m') }),
    ],
    [
      'limits throws',
      new Error('tier lookup failed (sync)'),
      (error) => ({
        limits: (req) => {
          if (isBad(req)) throw error;
          return good;
        },
      }),
    ],
    [
      'limits rejects',
      new Error('tier lookup failed (async)'),
      (error) => ({ limits: async (req) => (isBad(req) ? Promise.reject(error) : good) }),
    ],
  ];
  for (const [what, error, options] of failures) cases.push([what, () => options(error), error]);
  return cases;
}

/** Expects a request allowed, its legacy and IETF headers showing `limit` a minute with `remaining` left. */
function expectAllowedWithHeaders(response: { status: number; headers: Record<string, unknown> }, limit: number, remaining: number): void {
  expect(response).toMatchObject({
    status: 200,
    headers: {
      'x-ratelimit-limit': String(limit),
      'x-ratelimit-remaining': String(remaining),
      'ratelimit-policy': `"default";q=${limit};w=60`,
      ratelimit: expect.stringMatching(new RegExp(`^"default";r=${remaining};t=\\d+$`)),
    },
  });
}

describe.each(STORES)('on %s', (_storeName, makeStore) => {
  describe.each(FRAMEWORK_ROWS)('%s', (_frameworkName, framework) => {
    let clock: ReturnType<typeof manualClock>;
    beforeEach(() => {
      clock = manualClock(START);
    });
    const start = (options: TestOptions) => framework.start(options, { store: makeStore(), clock: clock.now, prefix: uniquePrefix('dyn') });

    const plan = (req: TestRequest) => (isPro(req) ? 5 : 2);
    test.each([
      ['sync', plan],
      ['async', async (req: TestRequest) => plan(req)],
    ])(
      '%s limit function: free gets 2, pro 5, and an upgrade keeps what was used; headers show each request its own limit',
      async (_kind, limit) => {
        const app = await start({ limit, window: '1m', identify: byUserHeader, headers: ['legacy', 'ietf'] });
        const ann = { 'x-user': 'ann', 'x-plan': 'free' };
        const first = await app.send(ann);
        expectAllowedWithHeaders(first, 2, 1);
        expect(await statuses(app, 2, ann)).toEqual([200, 429]);

        const bob = { 'x-user': 'bob', 'x-plan': 'pro' };
        const pro = await app.send(bob);
        expectAllowedWithHeaders(pro, 5, 4);
        expect(await statuses(app, 5, bob)).toEqual([200, 200, 200, 200, 429]);

        // Ann upgrades: her 2 requests still count, under a limit of 5 (her denial as a free user does not stick).
        const upgraded = { 'x-user': 'ann', 'x-plan': 'pro' };
        const third = await app.send(upgraded);
        expect(third.status).toBe(200);
        expect(third.headers['x-ratelimit-limit']).toBe('5');
        expect(third.headers['x-ratelimit-remaining']).toBe('2');
        expect(await statuses(app, 3, upgraded)).toEqual([200, 200, 429]);
        // And back on the free plan she is over its limit.
        expect((await app.send(ann)).status).toBe(429);
        expect(app.hits()).toBe(2 + 5 + 3);
        expect(await counted(app, 'ann', { limit: 5, window: '1m' })).toBe(5);
      },
    );

    test('a limit function answering 0 refuses that request: 429 without Retry-After, the route never runs, nothing counted', async () => {
      const banned = new Set(['eve']);
      const app = await start({
        limit: (req) => (banned.has(String(req.headers['x-user'])) ? 0 : 2),
        window: '1m',
        identify: byUserHeader,
        headers: ['legacy', 'ietf'],
      });
      const eve = { 'x-user': 'eve' };
      const refused = await app.send(eve);
      expect(refused.status).toBe(429);
      expect(refused.headers['retry-after']).toBeUndefined();
      expect(refused.headers['x-ratelimit-limit']).toBe('0');
      expect(refused.headers['x-ratelimit-remaining']).toBe('0');
      expect(refused.headers['ratelimit-policy']).toBe('"default";q=0;w=60');
      expect(await statuses(app, 2, eve)).toEqual([429, 429]);
      expect(await statuses(app, 3, { 'x-user': 'ann' })).toEqual([200, 200, 429]);
      expect(app.hits()).toBe(2);
      banned.delete('eve');
      expect(await statuses(app, 3, eve)).toEqual([200, 200, 429]);
      expect(await counted(app, 'eve', { limit: 2, window: '1m' })).toBe(2);
    });

    const windowOf = (req: TestRequest) => (req.headers['x-tier'] === 'slow' ? '1h' : '1s');
    test.each([
      ['sync', windowOf],
      ['async', async (req: TestRequest) => windowOf(req)],
    ])('%s window function: each request is counted over its own window; policy headers show it', async (_kind, window) => {
      const app = await start({ limit: 1, window, identify: byUserHeader, headers: 'ietf' });
      const fast = { 'x-user': 'fast', 'x-tier': 'fast' };
      const slow = { 'x-user': 'slow', 'x-tier': 'slow' };
      const fastFirst = await app.send(fast);
      expect(fastFirst.status).toBe(200);
      expect(fastFirst.headers['ratelimit-policy']).toBe('"default";q=1;w=1');
      const slowFirst = await app.send(slow);
      expect(slowFirst.status).toBe(200);
      expect(slowFirst.headers['ratelimit-policy']).toBe('"default";q=1;w=3600');
      const fastDenied = await app.send(fast);
      expect(fastDenied.status).toBe(429);
      expect(fastDenied.headers['retry-after']).toBe('2');
      const slowDenied = await app.send(slow);
      expect(slowDenied.status).toBe(429);
      expect(Number(slowDenied.headers['retry-after'])).toBeGreaterThan(3_000);
      clock.advance(2_000);
      expect((await app.send(fast)).status).toBe(200);
      expect((await app.send(slow)).status).toBe(429);
      expect(app.hits()).toBe(3);
    });

    const tiersOf = (req: TestRequest): TierOptions[] =>
      isPro(req)
        ? [
            { limit: 3, window: '1s' },
            { limit: 4, window: '1h' },
          ]
        : [
            { limit: 1, window: '1s' },
            { limit: 2, window: '1h' },
          ];
    test.each([
      ['sync', tiersOf],
      ['async', async (req: TestRequest) => tiersOf(req)],
    ])('%s limits function: the tiers of each request, both enforced; the ietf policy lists them', async (_kind, limits) => {
      const app = await start({ limits, identify: byUserHeader, headers: 'ietf' });
      const free = { 'x-user': 'ann', 'x-plan': 'free' };
      const first = await app.send(free);
      expect(first.status).toBe(200);
      expect(first.headers['ratelimit-policy']).toBe('"1s";q=1;w=1, "1h";q=2;w=3600');
      expect((await app.send(free)).status).toBe(429); // the 1 s tier
      clock.advance(2_000);
      expect((await app.send(free)).status).toBe(200);
      clock.advance(2_000);
      const hourly = await app.send(free);
      expect(hourly.status).toBe(429); // the hour tier: 2 used
      expect(Number(hourly.headers['retry-after'])).toBeGreaterThan(60);

      const pro = { 'x-user': 'bob', 'x-plan': 'pro' };
      const proFirst = await app.send(pro);
      expect(proFirst.headers['ratelimit-policy']).toBe('"1s";q=3;w=1, "1h";q=4;w=3600');
      expect(proFirst.headers.ratelimit).toMatch(/^"1s";r=2;t=\d+, "1h";r=3;t=\d+$/);
      expect(await statuses(app, 3, pro)).toEqual([200, 200, 429]);
      clock.advance(2_000);
      expect(await statuses(app, 2, pro)).toEqual([200, 429]);
      expect(app.hits()).toBe(2 + 4);
    });

    describe('an invalid answer, a throw or a rejection: error handling, onError, nothing counted, the route never runs', () => {
      test.each(invalidCases())('%s', async (_what, options, expected) => {
        const onError = jest.fn();
        // A long timeoutMs: onError must see this error alone, not a store call slowed by a loaded machine.
        const app = await start({ ...options(), identify: () => 'client', onError, timeoutMs: 10_000 });
        const failed = await app.send({ 'x-bad': '1' });
        expect(failed.status).toBe(500);
        expect(failed.headers['x-ratelimit-limit']).toBeUndefined();
        expect(app.hits()).toBe(0);
        expect(app.errors).toHaveLength(1);
        const [error] = app.errors;
        if (expected instanceof RegExp) {
          expect(error).toBeInstanceOf(OptionError);
          expect(error).toBeInstanceOf(TypeError);
          expect((error as Error).message).toMatch(expected);
        } else {
          expect(error).toBe(expected);
        }
        expect(onError).toHaveBeenCalledTimes(1);
        expect(onError.mock.calls[0][0]).toBe(error);
        expect(await counted(app, 'client', { limit: 2, window: '1m' })).toBe(0);
        // The full quota is still there.
        expect(await statuses(app, 3, {})).toEqual([200, 200, 429]);
        expect(app.hits()).toBe(2);
        expect(onError).toHaveBeenCalledTimes(1);
      });

      // A function answering nothing is a bug in the app, not a request for the default limit.
      test.each([
        ['limit returns undefined', { limit: (req: TestRequest) => (isBad(req) ? undefined : 2) as number, window: '1m' }, /^limit: /],
        [
          'window resolves to undefined',
          { limit: 2, window: async (req: TestRequest) => (isBad(req) ? undefined : '1m') as string },
          /^window: /,
        ],
        [
          'limits resolves to undefined',
          { limits: async (req: TestRequest) => (isBad(req) ? undefined : [{ limit: 2, window: '1m' }]) as TierOptions[] },
          /^limits: /,
        ],
      ] as [string, TestOptions, RegExp][])('%s: an OptionError, not the default limit', async (_what, options, pattern) => {
        const app = await start({ ...options, identify: () => 'client' });
        const failed = await app.send({ 'x-bad': '1' });
        expect(failed.status).toBe(500);
        expect(app.hits()).toBe(0);
        expect((app.errors[0] as Error).message).toMatch(pattern);
      });
    });
  });
});

withoutRedis.describe('limits together with limit or window: an OptionError at construction', () => {
  const tiers = [{ limit: 2, window: '1m' }];
  const CONFLICTS: [string, TestOptions][] = [
    ['limit function + limits', { limit: () => 5, limits: tiers }],
    ['limit + limits function', { limit: 5, limits: () => tiers }],
    ['window + async limits function', { window: '1m', limits: async () => tiers }],
    ['async window function + limits', { window: async () => '1m', limits: tiers }],
    ['limit function + limits function', { limit: () => 5, limits: () => tiers }],
  ];

  const expectLimitsError = (thrown: unknown) => expectOptionError(thrown, 'limits', 'SWL_CONFLICTING_OPTIONS');

  test.each(CONFLICTS)('Express (%s)', (_what, options) => {
    expectLimitsError(thrownBy(() => rateLimit(options as never)));
  });

  test.each(CONFLICTS)('Fastify plugin options (%s): the app fails to load', async (_what, options) => {
    const app = Fastify();
    app.register(rateLimitPlugin, options as never);
    expectLimitsError(await rejectionOf(() => app.ready()));
    await app.close();
  });

  test.each(CONFLICTS)('Fastify config.rateLimit (%s): adding the route throws', async (_what, options) => {
    const app = Fastify();
    await app.register(rateLimitPlugin, {});
    expectLimitsError(thrownBy(() => app.get('/', { config: { rateLimit: options as never } }, async () => 'ok')));
    await app.close();
  });

  test("Fastify: a route's limits function replaces the plugin's limit and window as a group (no conflict)", async () => {
    const app = Fastify();
    await app.register(rateLimitPlugin, { limit: 50, window: '1h', identify: () => 'c' });
    app.get('/', { config: { rateLimit: { limits: async () => [{ limit: 1, window: '1m' }] } } }, async () => 'ok');
    await app.ready();
    expect((await request(app.server).get('/')).status).toBe(200);
    expect((await request(app.server).get('/')).status).toBe(429);
    await app.close();
  });
});

withoutRedis.describe("without an error handler of the app's own, the framework's default answers 500", () => {
  const options = { limit: () => -1, identify: () => 'c' };
  test('Express 5 default error handler', async () => {
    const app = express();
    let ran = false;
    app.get('/', rateLimit(options), (_req, res) => {
      ran = true;
      res.send('ok');
    });
    const response = await request(app).get('/');
    expect(response.status).toBe(500);
    expect(ran).toBe(false);
  });

  test('Fastify default error handler: 500 with the message naming the option', async () => {
    const app = Fastify();
    await app.register(rateLimitPlugin, options);
    let ran = false;
    app.get('/', async () => {
      ran = true;
      return 'ok';
    });
    await app.ready();
    const response = await request(app.server).get('/');
    expect(response.status).toBe(500);
    expect(JSON.parse(response.text).message).toMatch(/^limit: /);
    expect(ran).toBe(false);
    await app.close();
  });
});
