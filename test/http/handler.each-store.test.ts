/**
 * Algorithms, tiers, header styles and near-limit monitoring through both adapters
 * (Express middleware, Fastify plugin options and per-route config), on RedisStore and
 * MemoryStore. Real apps over real sockets, real Redis, manual clock.
 */
import express from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
import request from 'supertest';
import type { Decision } from '../../src';
import { ALGORITHM_NAMES } from '../../src/algorithms';
import type { AlgorithmName } from '../../src/algorithms/types';
import { rateLimit } from '../../src/express';
import { rateLimitPlugin } from '../../src/fastify';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { storesOfTestFile, withoutRedis } from '../helpers/stores';

const MINUTE = 60_000;
const START = 1_800_000_000_000 - (1_800_000_000_000 % MINUTE) + 30_000; // half-way through a minute

const fastifyApps: FastifyInstance[] = [];
afterAll(() => Promise.all(fastifyApps.map((app) => app.close())));

const stores = storesOfTestFile();
const ALGORITHMS: readonly AlgorithmName[] = ALGORITHM_NAMES;

/** Retry-After (s) after 3 requests at START and a 4th at START + 1 s, limit 3 per minute, per algorithm. */
const EXPECTED_RETRY_AFTER: Record<AlgorithmName, number> = {
  // current 3 at 30 s into the window: next window, 3 * (60 - e)/60 + 1 <= 3 from e = 20 s: 29 s + 20 s
  'sliding-window': 49,
  // the window ends 29 s later
  'fixed-window': 29,
  // the oldest entry (at START) leaves at START + 60 s: 59 s after START + 1 s
  'sliding-log': 59,
  // a unit comes back every 20 s: the bucket, full at START + 60 s, has room for one at START + 20 s
  'token-bucket': 19,
  // the 10 ms bucket at START holds 3 units, taken as spread over it: 1 is left (room for one) once
  // 2/3 of the bucket has left the window, at START + 60 s + 6 ms, 59.006 s after START + 1 s
  'precise-window': 60,
};

type Get = (url: string) => Promise<request.Response>;

async function expressApp(options: Parameters<typeof rateLimit>[0]): Promise<Get> {
  const app = express();
  app.use(rateLimit(options));
  app.get('/', (_req, res) => {
    res.send('ok');
  });
  return (url) => request(app).get(url);
}

async function fastifyApp(options: Parameters<typeof rateLimitPlugin>[1], routeConfig?: object): Promise<Get> {
  const app = Fastify();
  fastifyApps.push(app);
  await app.register(rateLimitPlugin, options);
  app.get('/', routeConfig ? { config: { rateLimit: routeConfig } } : {}, async () => 'ok');
  await app.ready();
  return (url) => request(app.server).get(url);
}

describe.each(stores)('on %s', (_storeName, makeStore) => {
  describe.each(ALGORITHMS)('algorithm %s', (algorithm) => {
    const frameworks: [string, (clock: () => number) => Promise<Get>][] = [
      [
        'Express',
        (clock) =>
          expressApp({ store: makeStore(), algorithm, limit: 3, window: '1m', clock, prefix: uniquePrefix('ex'), identify: () => 'c' }),
      ],
      [
        'Fastify plugin',
        (clock) =>
          fastifyApp({ store: makeStore(), algorithm, limit: 3, window: '1m', clock, prefix: uniquePrefix('fp'), identify: () => 'c' }),
      ],
      [
        'Fastify route config',
        (clock) =>
          fastifyApp(
            { store: makeStore(), limit: 1000, window: '1h', clock, prefix: uniquePrefix('fr'), identify: () => 'c' },
            { algorithm, limit: 3, window: '1m' },
          ),
      ],
    ];
    test.each(frameworks)("%s: three allowed, then 429 with the algorithm's exact Retry-After", async (_name, make) => {
      const clock = manualClock(START);
      const get = await make(clock.now);
      for (let i = 0; i < 3; i++) expect((await get('/')).status).toBe(200);
      clock.advance(1_000);
      const denied = await get('/');
      expect(denied.status).toBe(429);
      expect(denied.headers['retry-after']).toBe(String(EXPECTED_RETRY_AFTER[algorithm]));
      clock.advance(EXPECTED_RETRY_AFTER[algorithm] * 1_000);
      expect((await get('/')).status).toBe(200);
    });
  });

  test('tiers per Fastify route: a request refused by the 1 s tier is not counted by the 1 h tier', async () => {
    const clock = manualClock(START);
    const decisions: Decision[] = [];
    const get = await fastifyApp(
      {
        store: makeStore(),
        clock: clock.now,
        prefix: uniquePrefix('ft'),
        identify: () => 'c',
        onDecision: (d) => decisions.push(d),
        headers: ['legacy', 'ietf'],
      },
      {
        limits: [
          { limit: 2, window: '1s' },
          { limit: 5, window: '1h' },
        ],
      },
    );
    for (let i = 0; i < 2; i++) expect((await get('/')).status).toBe(200);
    for (let i = 0; i < 10; i++) expect((await get('/')).status).toBe(429);
    const last = decisions[decisions.length - 1];
    expect(last.tier).toBe(0);
    expect(last.tiers[1].estimated).toBe(2); // ten refusals counted nothing in the hourly tier
    clock.advance(2_000);
    const allowed = await get('/');
    expect(allowed.status).toBe(200);
    expect(allowed.headers['ratelimit-policy']).toBe('"1s";q=2;w=1, "1h";q=5;w=3600');
    // Reset per tier, when quota grows again: the 1 s tier's one unit weighs for two windows; the
    // hour tier holds 3, so a unit comes back a third into the next hour.
    const now = START + 2_000;
    const hourReset = (Math.floor(now / 3_600_000) + 1) * 3_600_000 + 1_200_000;
    expect(allowed.headers.ratelimit).toBe(`"1s";r=1;t=2, "1h";r=2;t=${Math.ceil((hourReset - now) / 1000)}`);
    expect(decisions[decisions.length - 1].tiers[1].estimated).toBe(3);
  });

  test('near-limit monitoring through the Fastify plugin: onNearLimit only inside the band', async () => {
    const clock = manualClock(START);
    const ratios: number[] = [];
    const near: number[] = [];
    const get = await fastifyApp({
      store: makeStore(),
      limit: 10,
      window: '1m',
      clock: clock.now,
      prefix: uniquePrefix('fn'),
      identify: () => 'c',
      onDecision: (d) => ratios.push(d.ratio),
      onNearLimit: (d) => near.push(d.ratio),
      nearLimitBand: [0.8, 1],
    });
    for (let i = 0; i < 11; i++) await get('/');
    expect(ratios).toEqual([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1]);
    expect(near).toEqual([0.8, 0.9, 1, 1]);
  });
});

withoutRedis.describe('the decision on the request', () => {
  test('Express: req.rateLimit holds the decision, as with express-rate-limit', async () => {
    const seen: (number | undefined)[] = [];
    const app = express();
    app.use(rateLimit({ limit: 5, window: '1m', identify: () => 'c' }));
    app.get('/', (req, res) => {
      seen.push(req.rateLimit?.remaining);
      res.send('ok');
    });
    await request(app).get('/');
    await request(app).get('/');
    expect(seen).toEqual([4, 3]);
  });

  test('Fastify: request.rateLimit holds the decision, null on exempt routes', async () => {
    const seen: (number | null)[] = [];
    const app = Fastify();
    fastifyApps.push(app);
    await app.register(rateLimitPlugin, { limit: 5, window: '1m', identify: () => 'c' });
    app.get('/', async (req) => {
      seen.push(req.rateLimit?.remaining ?? null);
      return 'ok';
    });
    app.get('/free', { config: { rateLimit: false } }, async (req) => {
      seen.push(req.rateLimit === null ? -1 : 99);
      return 'ok';
    });
    await app.ready();
    await request(app.server).get('/');
    await request(app.server).get('/');
    await request(app.server).get('/free');
    expect(seen).toEqual([4, 3, -1]);
  });
});
