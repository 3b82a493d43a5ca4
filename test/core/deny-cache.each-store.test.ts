/**
 * The local deny cache must be exact: a limiter with it decides (allowed, retryAfterMs,
 * resetAt) exactly as one without it, and a flood from a denied identifier costs no
 * store round trips after the first denial.
 */
import type { Redis } from 'ioredis';
import { createLimiter, type Decision, MemoryStore, RedisStore } from '../../src';
import { ALGORITHM_NAMES } from '../../src/algorithms';
import type { AlgorithmName } from '../../src/algorithms/types';
import { DenyCache } from '../../src/core/deny-cache';
import type { Tier } from '../../src/tiers';
import { mulberry32 as seeded } from '../../support/random';
import { decisionEssentials } from '../helpers/decisions';
import { manualClock, redisClient, uniquePrefix } from '../helpers/redis';
import { onRedis, storesOfTestFile, withoutRedis } from '../helpers/stores';

let client: Redis;
onRedis.beforeAll(() => {
  client = redisClient();
});
onRedis.afterAll(() => client.quit());
afterEach(() => jest.restoreAllMocks());

const ALGORITHMS: readonly AlgorithmName[] = ALGORITHM_NAMES;
const stores = storesOfTestFile(() => client);
const CONFIGS: Tier[][] = [
  [{ limit: 5, window: 1_000 }],
  [
    { limit: 3, window: 1_000 },
    { limit: 8, window: 10_000 },
  ],
  [{ limit: 10, window: 60_000 }],
];

describe.each(stores)('deny cache on %s', (_name, makeStore) => {
  test.each(ALGORITHMS)('%s: with and without the cache, identical decisions for a random sequence (with resets)', async (algorithm) => {
    const random = seeded(0xcace + ALGORITHMS.indexOf(algorithm));
    let cachedAnswers = 0;
    let denials = 0;
    for (const limits of CONFIGS) {
      const clock = manualClock(1_700_000_000_000 + Math.floor(random() * 10_000));
      const store = makeStore();
      const common = { store, limits, algorithm, clock: clock.now };
      const exact = createLimiter({ ...common, prefix: uniquePrefix('nocache'), denyCacheSize: 0 });
      const cached = createLimiter({ ...common, prefix: uniquePrefix('cache') });
      const smallest = Math.min(...limits.map((tier) => tier.limit));
      const history: string[] = [];
      for (let step = 0; step < 600; step++) {
        const r = random();
        if (r < 0.4) clock.advance(0);
        else if (r < 0.8) clock.advance(Math.floor(random() * 50));
        else if (r < 0.97) clock.advance(Math.floor(random() * limits[0].window));
        else clock.advance(limits[limits.length - 1].window);
        const id = `id${Math.floor(random() * 3)}`;
        if (random() < 0.03) {
          history.push(`${clock.now()} reset ${id}`);
          await Promise.all([exact.reset(id), cached.reset(id)]);
          continue;
        }
        // Mostly cost 1, sometimes other costs: a denial for one cost says nothing exact about another.
        const cost = random() < 0.7 ? 1 : Math.floor(random() * (smallest + 1));
        const method = random() < 0.15 ? 'peek' : 'check';
        history.push(`${clock.now()} ${method} ${id} cost ${cost}`);
        const expected = await exact[method](id, { cost });
        const actual = await cached[method](id, { cost });
        if (actual.cached) cachedAnswers++;
        if (!expected.allowed) denials++;
        expect(expected.cached).toBe(false);
        if (JSON.stringify(decisionEssentials(actual)) !== JSON.stringify(decisionEssentials(expected))) {
          throw new Error(
            `${algorithm} ${JSON.stringify(limits)} step ${step}: cached limiter differs\n  ${history.slice(-10).join('\n  ')}\n` +
              `without cache: ${JSON.stringify(decisionEssentials(expected))}\nwith cache:    ${JSON.stringify({ ...decisionEssentials(actual), cached: actual.cached })}`,
          );
        }
      }
    }
    // The comparison must have exercised the cache.
    expect(denials).toBeGreaterThan(200);
    // A token bucket gives a unit back soon after a denial, which ends a cached answer sooner.
    expect(cachedAnswers).toBeGreaterThan(algorithm === 'token-bucket' ? 50 : 100);
  });
});

describe('deny cache saves store round trips', () => {
  onRedis.test('a flood of 1,000 checks from a denied identifier makes no Redis calls after the first denial', async () => {
    const spy = jest.spyOn(RedisStore.prototype, 'checkWithCallback');
    const limiter = createLimiter({ store: new RedisStore({ client }), limit: 5, window: '1m', prefix: uniquePrefix('flood') });
    for (let i = 0; i < 5; i++) expect((await limiter.check('flooder')).allowed).toBe(true);
    const first = await limiter.check('flooder');
    expect(first.allowed).toBe(false);
    expect(first.cached).toBe(false);
    const callsAtFirstDenial = spy.mock.calls.length;
    expect(callsAtFirstDenial).toBe(6);

    const flood = await Promise.all(Array.from({ length: 1_000 }, () => limiter.check('flooder')));
    expect(flood.every((decision) => !decision.allowed && decision.cached)).toBe(true);
    // Real clock: the remaining wait shrinks, but never past the original resetAt.
    for (const decision of flood) {
      expect(decision.retryAfterMs).toBeGreaterThan(0);
      expect(decision.retryAfterMs).toBeLessThanOrEqual(first.retryAfterMs);
    }
    expect(spy.mock.calls.length).toBe(callsAtFirstDenial);

    // Another identifier still reaches the store.
    expect((await limiter.check('someone-else')).allowed).toBe(true);
    expect(spy.mock.calls.length).toBe(callsAtFirstDenial + 1);
  });

  onRedis.test('the cached denial lasts exactly until retryAfterMs, then the store is asked again', async () => {
    const spy = jest.spyOn(RedisStore.prototype, 'checkWithCallback');
    const clock = manualClock(1_700_000_000_000);
    const limiter = createLimiter({
      store: new RedisStore({ client }),
      limit: 2,
      window: 10_000,
      algorithm: 'fixed-window',
      clock: clock.now,
      prefix: uniquePrefix('until'),
    });
    clock.set(1_700_000_000_000 - (1_700_000_000_000 % 10_000) + 4_000);
    await limiter.check('a');
    await limiter.check('a');
    const denied = await limiter.check('a');
    expect(denied.allowed).toBe(false);
    expect(denied.retryAfterMs).toBe(6_000);
    const calls = spy.mock.calls.length;
    clock.advance(5_999);
    const stillDenied = await limiter.check('a');
    expect(stillDenied).toMatchObject({ allowed: false, cached: true, retryAfterMs: 1, resetAt: denied.resetAt });
    expect(stillDenied.now).toBe(denied.now + 5_999);
    expect(spy.mock.calls.length).toBe(calls);
    clock.advance(1);
    const allowed = await limiter.check('a');
    expect(allowed.allowed).toBe(true);
    expect(spy.mock.calls.length).toBe(calls + 1);
  });

  onRedis.test('reset() clears the cached denial', async () => {
    const spy = jest.spyOn(RedisStore.prototype, 'checkWithCallback');
    const limiter = createLimiter({ store: new RedisStore({ client }), limit: 1, window: '1h', prefix: uniquePrefix('reset') });
    expect((await limiter.check('x')).allowed).toBe(true);
    expect((await limiter.check('x')).allowed).toBe(false);
    expect((await limiter.check('x')).cached).toBe(true);
    await limiter.reset('x');
    const calls = spy.mock.calls.length;
    const after = await limiter.check('x');
    expect(after.allowed).toBe(true);
    expect(after.cached).toBe(false);
    expect(spy.mock.calls.length).toBe(calls + 1);
  });

  withoutRedis.test('a denial for cost 1 is not reused for a larger cost, whose wait is longer', async () => {
    const clock = manualClock(1_700_000_000_000);
    const store = new MemoryStore({ sweepIntervalMs: 0 });
    const limiter = createLimiter({
      store,
      limit: 4,
      window: 1_000,
      algorithm: 'sliding-log',
      clock: clock.now,
      prefix: uniquePrefix('cost'),
    });
    for (let i = 0; i < 4; i++) {
      expect((await limiter.check('c')).allowed).toBe(true);
      clock.advance(100);
    }
    const one = await limiter.check('c'); // oldest unit leaves at 1000 ms after the first
    expect(one.retryAfterMs).toBe(600);
    const three = await limiter.check('c', { cost: 3 }); // needs the third oldest gone
    expect(three.allowed).toBe(false);
    expect(three.retryAfterMs).toBe(800);
    expect(three.cost).toBe(3);
  });

  withoutRedis.test('a cached denial is dropped when a smaller request is counted, since the wait grows', async () => {
    const clock = manualClock(1_700_000_000_000);
    const limiter = createLimiter({
      store: new MemoryStore({ sweepIntervalMs: 0 }),
      limit: 4,
      window: 1_000,
      algorithm: 'sliding-log',
      clock: clock.now,
      prefix: uniquePrefix('grow'),
    });
    expect((await limiter.check('g')).allowed).toBe(true); // one unit at +0
    clock.advance(100);
    const denied = await limiter.check('g', { cost: 4 }); // 1 + 4 > 4: wait until the unit at +0 leaves
    expect(denied.retryAfterMs).toBe(900);
    expect((await limiter.check('g', { cost: 1 })).allowed).toBe(true); // counted at +100 ms
    clock.advance(100);
    const again = await limiter.check('g', { cost: 4 }); // now the unit at +100 ms must leave too
    expect(again.allowed).toBe(false);
    expect(again.cached).toBe(false);
    expect(again.retryAfterMs).toBe(900);
  });
});

withoutRedis.describe('DenyCache bounds', () => {
  const TIERS = [{ limit: 10, window: 60_000 }];
  const denial = (cost = 1) =>
    ({
      allowed: false,
      retryAfterMs: 60_000,
      resetAt: 1_700_000_060_000,
      now: 1_700_000_000_000,
      cost,
      tier: 0,
      tiers: [{ ...TIERS[0], estimated: 10, remaining: 0, retryAfterMs: 60_000, resetAt: 1_700_000_060_000 }],
      cached: false,
    }) as unknown as Decision;

  // Evicting with a fresh Map iterator each time made this O(capacity) per denial: about 7 s
  // for 1,000,000 denials at the default capacity (10,000) and a minute at 100,000.
  test('1,000,000 distinct denied identifiers: bounded to the capacity, least recently denied out, fast', () => {
    const cache = new DenyCache(100_000);
    const now = 1_700_000_000_000;
    // One decision for all: the cost measured is the cache's, not building a million decisions.
    const decision = denial();
    for (let i = 0; i < 1_000_000; i++) {
      cache.remember(`id${i}`, decision, now);
      if (i === 500) cache.remember('id0', decision, now); // denied again: most recent again
    }
    expect(cache.get('id999999', 1, TIERS, now)).toMatchObject({ cached: true, retryAfterMs: 60_000 });
    expect(cache.get('id900000', 1, TIERS, now)).toBeDefined();
    expect(cache.get('id899999', 1, TIERS, now)).toBeUndefined();
    expect(cache.get('id1', 1, TIERS, now)).toBeUndefined();
    expect(cache.get('id0', 1, TIERS, now)).toBeUndefined(); // re-denied at 501, still long evicted by 1,000,000
  }, 5_000);

  test('a denied-again key moves to the end of the eviction order', () => {
    const cache = new DenyCache(3);
    const now = 1_700_000_000_000;
    for (const id of ['a', 'b', 'c']) cache.remember(id, denial(), now);
    cache.remember('a', denial(), now);
    cache.remember('d', denial(), now); // evicts b
    expect(['a', 'b', 'c', 'd'].map((id) => cache.get(id, 1, TIERS, now) !== undefined)).toEqual([true, false, true, true]);
    cache.remember('e', denial(), now); // evicts c
    cache.remember('f', denial(), now); // evicts a
    expect(['a', 'c', 'd', 'e', 'f'].map((id) => cache.get(id, 1, TIERS, now) !== undefined)).toEqual([false, false, true, true, true]);
  });

  test('a cached denial expires at its retryAfterMs and is reused only for the same cost', () => {
    const cache = new DenyCache(10);
    const now = 1_700_000_000_000;
    cache.remember('k', denial(2), now);
    expect(cache.get('k', 1, TIERS, now)).toBeUndefined();
    expect(cache.get('k', 3, TIERS, now)).toBeUndefined();
    expect(cache.get('k', 2, TIERS, now + 59_999)).toMatchObject({ retryAfterMs: 1, now: now + 59_999, resetAt: now + 60_000 });
    expect(cache.get('k', 2, TIERS, now + 60_000)).toBeUndefined();
    expect(cache.get('k', 2, TIERS, now)).toBeUndefined(); // the expired entry was dropped
  });
});
