/**
 * `blockFor` and shadow mode through both adapters (Express 5 middleware, Fastify plugin
 * options and per-route `config.rateLimit`), on MemoryStore and RedisStore: a blocked client
 * gets 429 with the block's Retry-After until the block ends; a shadow limiter lets every
 * request through, reports would-be denials (onDecision, req.rateLimit), sends no headers
 * unless asked, and counts exactly as an enforcing one would; a shadow limiter beside an
 * enforcing one on the same route only reports. Real apps over real sockets, manual clock.
 */
import express from 'express';
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import request from 'supertest';
import { createLimiter, type Decision, type Limiter, type Store } from '../../src';
import { type ExpressRateLimitOptions, rateLimit } from '../../src/express';
import { type FastifyRateLimitOptions, type RouteRateLimitOptions, rateLimitPlugin } from '../../src/fastify';
import type { HeadersOption } from '../../src/http/headers';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { storesOfTestFile } from '../helpers/stores';

const MINUTE = 60_000;
/** A boundary of every window used here. */
const START = 1_800_000_000_000 - (1_800_000_000_000 % MINUTE);

const fastifyApps: FastifyInstance[] = [];
afterAll(() => Promise.all(fastifyApps.map((app) => app.close())));

const STORES = storesOfTestFile();

/** The limiter settings under test; the app identifies every request as one client. */
interface Settings {
  limit: number;
  window: string;
  blockFor?: string;
  afterBlock?: 'keep' | 'reset';
  shadow?: boolean;
  headers?: HeadersOption;
}

interface App {
  get(): Promise<request.Response>;
  /** Every decision passed to onDecision. */
  readonly decisions: Decision[];
  /** `req.rateLimit` / `request.rateLimit` as the route handler saw it, once per handler run. */
  readonly seen: (Decision | null | undefined)[];
  /** A limiter on the same store and key space, to peek at what was counted. */
  readonly limiter: Limiter;
  /** The key space of the settings under test. */
  readonly prefix: string;
}

type Framework = 'Express' | 'Fastify plugin' | 'Fastify route config';
const FRAMEWORKS: Framework[] = ['Express', 'Fastify plugin', 'Fastify route config'];

async function makeApp(framework: Framework, store: Store, clock: () => number, settings: Settings): Promise<App> {
  const decisions: Decision[] = [];
  const seen: (Decision | null | undefined)[] = [];
  const prefix = uniquePrefix('bs');
  const common = { store, clock, prefix, identify: () => 'c', onDecision: (decision: Decision) => decisions.push(decision) };
  if (framework === 'Express') {
    const middleware = rateLimit({ ...common, ...settings } as ExpressRateLimitOptions);
    const app = express();
    app.use(middleware);
    app.get('/', (req, res) => {
      seen.push(req.rateLimit);
      res.json({ ok: true });
    });
    return { get: () => request(app).get('/'), decisions, seen, limiter: middleware.limiter, prefix };
  }
  const app = Fastify();
  fastifyApps.push(app);
  const handler = async (req: FastifyRequest) => {
    seen.push(req.rateLimit);
    return { ok: true };
  };
  let limiter: () => Limiter;
  if (framework === 'Fastify plugin') {
    await app.register(rateLimitPlugin, { ...common, ...settings } as FastifyRateLimitOptions);
    app.get('/', handler);
    limiter = () => app.rateLimiter;
  } else {
    // The plugin's own limit is generous; the route's config carries the settings, in its own key space.
    await app.register(rateLimitPlugin, { ...common, prefix: uniquePrefix('base'), limit: 1_000, window: '1h' });
    app.get('/', { config: { rateLimit: { ...settings, prefix } as RouteRateLimitOptions } }, handler);
    const { limit, window } = settings;
    limiter = () => createLimiter({ store, clock, prefix, limit, window, denyCacheSize: 0 });
  }
  await app.ready();
  return { get: () => request(app.server).get('/'), decisions, seen, limiter: limiter(), prefix };
}

/** The rate-limit headers and Retry-After of a response. */
function limitHeaders(response: request.Response): Record<string, string> {
  return Object.fromEntries(Object.entries(response.headers).filter(([name]) => /^(x-)?ratelimit|^retry-after$/.test(name))) as Record<
    string,
    string
  >;
}

describe.each(STORES)('on %s', (_storeName, makeStore) => {
  describe.each(FRAMEWORKS)('%s', (framework) => {
    test("blockFor '10s', limit 2 per 1 s: 429 with Retry-After: 10, still 429 after 2 s, through after exactly 10 s", async () => {
      const clock = manualClock(START);
      const app = await makeApp(framework, makeStore(), clock.now, { limit: 2, window: '1s', blockFor: '10s' });
      for (let i = 0; i < 2; i++) expect((await app.get()).status).toBe(200);

      const denied = await app.get();
      expect(denied.status).toBe(429);
      expect(denied.headers['retry-after']).toBe('10');
      expect(denied.headers['x-ratelimit-remaining']).toBe('0');
      expect(denied.headers['x-ratelimit-reset']).toBe(String((START + 10_000) / 1000));
      expect(denied.body).toEqual({ error: 'Too Many Requests', retryAfter: 10 });
      expect(app.decisions[2]).toMatchObject({ allowed: false, blocked: true, retryAfterMs: 10_000, shadow: false });

      clock.set(START + 2_000);
      // The counts alone would allow by now: both requests lie two windows back, nothing weighs.
      expect(await app.limiter.peek('c', { cost: 0 })).toMatchObject({ estimated: 0, blocked: true, retryAfterMs: 8_000 });
      const stillBlocked = await app.get();
      expect(stillBlocked.status).toBe(429);
      expect(stillBlocked.headers['retry-after']).toBe('8');
      expect(stillBlocked.headers['x-ratelimit-remaining']).toBe('0');
      expect(app.decisions[3]).toMatchObject({ allowed: false, blocked: true, retryAfterMs: 8_000 });

      clock.set(START + 10_000 - 1);
      const lastMs = await app.get();
      expect(lastMs.status).toBe(429);
      expect(lastMs.headers['retry-after']).toBe('1');

      clock.set(START + 10_000);
      const through = await app.get();
      expect(through.status).toBe(200);
      expect(through.headers['retry-after']).toBeUndefined();
      expect(through.headers['x-ratelimit-remaining']).toBe('1');
      expect(app.seen).toHaveLength(3); // the handler ran for the two first requests and this one
      expect(app.seen[2]).toMatchObject({ allowed: true, blocked: false });
    });

    test("afterBlock 'reset', limit 2 per 10 s, blockFor '3s': Retry-After: 3, not the window's wait, and two more through after exactly 3 s", async () => {
      const clock = manualClock(START);
      const app = await makeApp(framework, makeStore(), clock.now, { limit: 2, window: '10s', blockFor: '3s', afterBlock: 'reset' });
      for (let i = 0; i < 2; i++) expect((await app.get()).status).toBe(200);
      const denied = await app.get();
      expect(denied.status).toBe(429);
      expect(denied.headers['retry-after']).toBe('3');
      expect(denied.headers['x-ratelimit-reset']).toBe(String((START + 3_000) / 1000));
      clock.set(START + 3_000 - 1);
      expect((await app.get()).status).toBe(429);
      clock.set(START + 3_000);
      const through = await app.get();
      expect(through.status).toBe(200);
      expect(through.headers['x-ratelimit-remaining']).toBe('1');
      expect((await app.get()).status).toBe(200);
      expect((await app.get()).headers['retry-after']).toBe('3');
    });

    test('shadow mode, limit 2: five requests all pass, would-be denials reported, no headers, exact counting', async () => {
      const clock = manualClock(START);
      const app = await makeApp(framework, makeStore(), clock.now, { limit: 2, window: '1m', shadow: true });
      const responses = [];
      for (let i = 0; i < 5; i++) responses.push(await app.get());
      expect(responses.map((response) => response.status)).toEqual([200, 200, 200, 200, 200]);
      expect(responses.map((response) => response.body)).toEqual(Array(5).fill({ ok: true }));
      for (const response of responses) expect(limitHeaders(response)).toEqual({});

      expect(app.decisions.map((decision) => [decision.allowed, decision.shadow])).toEqual([
        [true, true],
        [true, true],
        [false, true],
        [false, true],
        [false, true],
      ]);
      expect(app.decisions[2]).toMatchObject({ remaining: 0, counted: false, blocked: false });
      expect(app.decisions[2].retryAfterMs).toBeGreaterThan(0);
      // The handler ran every time, with the decision on the request.
      expect(app.seen).toHaveLength(5);
      app.seen.forEach((decision, i) => {
        expect(decision).toBe(app.decisions[i]);
      });

      // Would-be denials counted nothing, as when enforced: 2 counted, not 5.
      expect((await app.limiter.peek('c', { cost: 0 })).estimated).toBe(2);
    });

    test('shadow mode with headers set explicitly: the headers are sent, and the status is still 200', async () => {
      const clock = manualClock(START);
      const app = await makeApp(framework, makeStore(), clock.now, { limit: 2, window: '1m', shadow: true, headers: 'draft-6' });
      const statuses: number[] = [];
      const remaining: string[] = [];
      for (let i = 0; i < 4; i++) {
        const response = await app.get();
        statuses.push(response.status);
        remaining.push(response.headers['ratelimit-remaining']);
        expect(response.headers['ratelimit-limit']).toBe('2');
        expect(response.headers['ratelimit-policy']).toBe('2;w=60');
        expect(response.headers['x-ratelimit-limit']).toBeUndefined(); // only the style asked for
      }
      expect(statuses).toEqual([200, 200, 200, 200]);
      expect(remaining).toEqual(['1', '0', '0', '0']);
      expect(app.decisions.map((decision) => decision.allowed)).toEqual([true, true, false, false]);
    });

    test('shadow mode with blockFor: the block is recorded (decision.blocked) but not enforced', async () => {
      const clock = manualClock(START);
      const store = makeStore();
      const app = await makeApp(framework, store, clock.now, { limit: 2, window: '1s', blockFor: '10s', shadow: true });
      const responses: request.Response[] = [];
      for (let i = 0; i < 3; i++) responses.push(await app.get());
      clock.set(START + 2_000);
      responses.push(await app.get());
      // The block is in the store: a fresh enforcing limiter on the same key space sees it.
      const enforcing = createLimiter({ store, prefix: app.prefix, limit: 2, window: '1s', clock: clock.now });
      expect(await enforcing.peek('c')).toMatchObject({ allowed: false, blocked: true, shadow: false, retryAfterMs: 8_000, cached: false });
      clock.set(START + 10_000);
      responses.push(await app.get());

      expect(responses.map((response) => response.status)).toEqual([200, 200, 200, 200, 200]);
      for (const response of responses) expect(limitHeaders(response)).toEqual({});
      expect(app.seen).toHaveLength(5);
      expect(app.decisions.map(({ allowed, blocked, shadow, retryAfterMs }) => ({ allowed, blocked, shadow, retryAfterMs }))).toEqual([
        { allowed: true, blocked: false, shadow: true, retryAfterMs: 0 },
        { allowed: true, blocked: false, shadow: true, retryAfterMs: 0 },
        { allowed: false, blocked: true, shadow: true, retryAfterMs: 10_000 },
        // Counts alone would allow 2 s later: the block refuses.
        { allowed: false, blocked: true, shadow: true, retryAfterMs: 8_000 },
        { allowed: true, blocked: false, shadow: true, retryAfterMs: 0 },
      ]);
    });
  });

  describe('a shadow limiter beside an enforcing one on the same route, different prefixes', () => {
    /** Enforcing: 3 per minute. Shadow, the new stricter limit under watch: 2 per minute. */
    const ENFORCING = { limit: 3, window: '1m' };
    const SHADOW = { limit: 2, window: '1m', shadow: true };

    /** The five responses, the decisions each limiter reported and those the handler saw: the enforcing one decides, with its headers only. */
    function expectOutcome(
      responses: request.Response[],
      enforced: Decision[],
      shadowed: Decision[],
      seen: (Decision | null | undefined)[],
    ): void {
      expect(responses.map((response) => response.status)).toEqual([200, 200, 200, 429, 429]);
      // Only the enforcing limiter's headers.
      expect(responses.map((response) => response.headers['x-ratelimit-limit'])).toEqual(['3', '3', '3', '3', '3']);
      expect(responses.map((response) => response.headers['x-ratelimit-remaining'])).toEqual(['2', '1', '0', '0', '0']);
      // The shadow one runs first and sees every request; it only reports.
      expect(shadowed.map((decision) => [decision.allowed, decision.shadow])).toEqual([
        [true, true],
        [true, true],
        [false, true],
        [false, true],
        [false, true],
      ]);
      expect(enforced.map((decision) => [decision.allowed, decision.shadow])).toEqual([
        [true, false],
        [true, false],
        [true, false],
        [false, false],
        [false, false],
      ]);
      // The handler ran for the three allowed requests, with the enforcing decision (the last limiter passed).
      expect(seen).toEqual(enforced.slice(0, 3));
    }

    /** What the two limiters share (a new store, a clock at START, one client), and where their decisions and the handler's land. */
    function twoLimiters() {
      return {
        common: { store: makeStore(), clock: manualClock(START).now, identify: () => 'c' },
        enforced: [] as Decision[],
        shadowed: [] as Decision[],
        seen: [] as (Decision | null | undefined)[],
      };
    }

    test('Express: two middlewares', async () => {
      const { common, enforced, shadowed, seen } = twoLimiters();
      const shadow = rateLimit({ ...common, ...SHADOW, prefix: uniquePrefix('shadow'), onDecision: (d) => shadowed.push(d) });
      const enforcing = rateLimit({ ...common, ...ENFORCING, prefix: uniquePrefix('enforce'), onDecision: (d) => enforced.push(d) });
      const app = express();
      app.get('/', shadow, enforcing, (req, res) => {
        seen.push(req.rateLimit);
        res.send('ok');
      });
      const responses: request.Response[] = [];
      for (let i = 0; i < 5; i++) responses.push(await request(app).get('/'));
      expectOutcome(responses, enforced, shadowed, seen);
      expect((await shadow.limiter.peek('c', { cost: 0 })).estimated).toBe(2);
      expect((await enforcing.limiter.peek('c', { cost: 0 })).estimated).toBe(3);
    });

    test('Fastify: the plugin registered twice, one with shadow: true', async () => {
      const { common, enforced, shadowed, seen } = twoLimiters();
      const shadowPrefix = uniquePrefix('shadow');
      const app = Fastify();
      fastifyApps.push(app);
      await app.register(rateLimitPlugin, { ...common, ...SHADOW, prefix: shadowPrefix, onDecision: (d) => shadowed.push(d) });
      await app.register(rateLimitPlugin, {
        ...common,
        ...ENFORCING,
        prefix: uniquePrefix('enforce'),
        onDecision: (d) => enforced.push(d),
      });
      app.get('/', async (req) => {
        seen.push(req.rateLimit);
        return 'ok';
      });
      await app.ready();
      const responses: request.Response[] = [];
      for (let i = 0; i < 5; i++) responses.push(await request(app.server).get('/'));
      expectOutcome(responses, enforced, shadowed, seen);
      // The first registration keeps the `rateLimiter` name: here the shadow one.
      expect(app.rateLimiter.prefix).toBe(shadowPrefix);
      expect(app.rateLimiter.shadow).toBe(true);
      expect((await app.rateLimiter.peek('c', { cost: 0 })).estimated).toBe(2);
    });
  });
});
