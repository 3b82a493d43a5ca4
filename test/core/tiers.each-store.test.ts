/**
 * Tiers are all-or-nothing: a request denied by any tier is counted by none, and the
 * decision reports every tier and the binding one.
 */

import { createLimiter, type Decision, MemoryStore, type Store } from '../../src';
import { ALGORITHM_NAMES } from '../../src/algorithms';
import { DEFAULT_PRECISION } from '../../src/algorithms/precise-window';
import type { AlgorithmName } from '../../src/algorithms/types';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { redisStoresPerClient, selectStores } from '../helpers/stores';

const HOUR = 3_600_000;
const START = 1_700_000_000_000 - (1_700_000_000_000 % HOUR); // a boundary of both tiers
const LIMITS = [
  { limit: 3, window: '1s' },
  { limit: 5, window: '1h' },
] as const;

const stores = selectStores<[string, () => Store]>([
  ...redisStoresPerClient(),
  ['MemoryStore', () => new MemoryStore({ sweepIntervalMs: 0 })],
]);
const ALGORITHMS: readonly AlgorithmName[] = ALGORITHM_NAMES;

/**
 * How long after a window boundary at which `counted` units were counted the tier's quota
 * grows again: a fixed window or a log lets them go when the window ends; the sliding window
 * counter carries them into the next window as `previous`, whose weight then decays, so one
 * unit's worth is back `window / counted` into it; a token bucket gives one back every
 * `window / limit`.
 */
function firstRelease(algorithm: AlgorithmName, window: number, counted: number, limit: number): number {
  if (algorithm === 'token-bucket') return Math.ceil(window / limit);
  if (algorithm === 'precise-window') {
    // The units, counted at the start of a bucket of width ms, are taken as spread over it: one
    // of them has left once (counted - 1) / counted of the bucket is left inside the window.
    const width = Math.max(1, Math.floor(window / DEFAULT_PRECISION));
    return window + width - 1 - Math.floor(((counted - 1) * width) / counted);
  }
  return algorithm === 'sliding-window' ? window + Math.ceil(window / counted) : window;
}

/**
 * A count read back: exact, but a token bucket has drained since (5 units an hour: 0.01 of a
 * unit over the seconds these tests advance the clock).
 */
function expectCount(algorithm: AlgorithmName, estimated: number, count: number): void {
  if (algorithm === 'token-bucket') {
    expect(estimated).toBeLessThanOrEqual(count);
    expect(estimated).toBeGreaterThan(count - 0.02);
  } else expect(estimated).toBe(count);
}

/** The invariants every decision keeps between its tiers and its top-level figures. */
function expectConsistent(decision: Decision): void {
  expect(decision.tiers).toHaveLength(2);
  expect(decision.tiers.map((tier) => [tier.limit, tier.window])).toEqual([
    [3, 1_000],
    [5, HOUR],
  ]);
  for (const tier of decision.tiers) {
    expect(tier.remaining).toBe(Math.max(0, Math.floor(tier.limit - tier.estimated)));
    // Reset: when more quota is available. Now when nothing is counted, later when something is,
    // and never after the moment this tier lets the request through (as the IETF draft asks of Retry-After).
    if (tier.estimated === 0) expect(tier.resetAt).toBe(decision.now);
    else expect(tier.resetAt).toBeGreaterThan(decision.now);
    if (tier.retryAfterMs > 0) expect(tier.resetAt).toBeLessThanOrEqual(decision.now + tier.retryAfterMs);
  }
  const top = decision.tiers[decision.tier];
  expect(decision).toMatchObject({ limit: top.limit, window: top.window, remaining: top.remaining, estimated: top.estimated });
  expect(decision.ratio).toBeCloseTo(top.estimated / top.limit, 12);
  expect(decision.resetAt).toBe(top.resetAt);
  expect(top.retryAfterMs).toBe(Math.max(...decision.tiers.map((tier) => tier.retryAfterMs)));
  expect(decision.retryAfterMs).toBe(decision.allowed ? 0 : top.retryAfterMs);
}

describe.each(stores)('tiers on %s', (_name, makeStore) => {
  describe.each(ALGORITHMS)('%s', (algorithm) => {
    function setup() {
      const clock = manualClock(START);
      const limiter = createLimiter({
        store: makeStore(),
        limits: LIMITS,
        algorithm,
        clock: clock.now,
        prefix: uniquePrefix('tiers'),
        denyCacheSize: 0,
      });
      return { clock, limiter };
    }

    test('a request denied by the 1 s tier increments nothing in the 1 h tier', async () => {
      const { clock, limiter } = setup();
      for (let i = 1; i <= 3; i++) {
        const decision = await limiter.check('u');
        expect(decision.allowed).toBe(true);
        expect(decision.tiers.map((tier) => tier.estimated)).toEqual([i, i]);
        expectConsistent(decision);
      }
      // Denied by the 1 s tier, 10 times, and with a cost the 1 h tier alone would allow.
      for (let i = 0; i < 10; i++) {
        const denied = await limiter.check('u', { cost: 1 + (i % 2) });
        expect(denied.allowed).toBe(false);
        expect(denied.tier).toBe(0);
        expectCount(algorithm, denied.tiers[1].estimated, 3);
        expect(denied.tiers[1].retryAfterMs).toBe(0); // the 1 h tier alone would allow it now
        expect(denied.tiers[0].retryAfterMs).toBe(denied.retryAfterMs);
        expectConsistent(denied);
        clock.advance(10);
      }
      const peek = await limiter.peek('u', { cost: 0 });
      expectCount(algorithm, peek.tiers[1].estimated, 3);
      expect(peek.tiers[0].estimated).toBeGreaterThan(0);

      // Once the 1 s tier lets one through, the 1 h tier counts it: 4.
      const wait = (await limiter.peek('u')).retryAfterMs;
      clock.advance(wait);
      const fourth = await limiter.check('u');
      expect(fourth.allowed).toBe(true);
      expectCount(algorithm, fourth.tiers[1].estimated, 4);
      expectConsistent(fourth);
    });

    test('the binding tier and the figures of every tier', async () => {
      const { clock, limiter } = setup();
      const first = await limiter.check('u');
      // Both fit again right away: the binding tier is the one with least left (the 1 s tier: 2 of 3).
      expect(first).toMatchObject({
        allowed: true,
        tier: 0,
        limit: 3,
        window: 1_000,
        remaining: 2,
        estimated: 1,
        retryAfterMs: 0,
        resetAt: START + firstRelease(algorithm, 1_000, 1, 3),
      });
      expect(first.tiers).toEqual([
        { limit: 3, window: 1_000, estimated: 1, remaining: 2, retryAfterMs: 0, resetAt: START + firstRelease(algorithm, 1_000, 1, 3) },
        { limit: 5, window: HOUR, estimated: 1, remaining: 4, retryAfterMs: 0, resetAt: START + firstRelease(algorithm, HOUR, 1, 5) },
      ]);
      await limiter.check('u');
      const third = await limiter.check('u');
      // Allowed, and the 1 s tier is spent: a next request must wait, and more quota comes when it may.
      expect(third).toMatchObject({ allowed: true, tier: 0, remaining: 0, retryAfterMs: 0 });
      expect(third.tiers[0].resetAt).toBeGreaterThan(START);
      expect(third.tiers[1]).toEqual({
        limit: 5,
        window: HOUR,
        estimated: 3,
        remaining: 2,
        retryAfterMs: 0,
        resetAt: START + firstRelease(algorithm, HOUR, 3, 5),
      });
      expectConsistent(third);
      // The next request's own wait is when the 1 s tier gives a unit back.
      expect((await limiter.peek('u')).retryAfterMs).toBe(third.resetAt - START);

      // Spend the 1 h tier: two more, each after the 1 s tier has emptied (3 s later).
      for (let i = 4; i <= 5; i++) {
        clock.advance(3_000);
        const decision = await limiter.check('u');
        expect(decision.allowed).toBe(true);
        expectCount(algorithm, decision.tiers[1].estimated, i);
        expectConsistent(decision);
      }
      // The 5th spent the 1 h tier: now it binds, although the 1 s tier has room.
      clock.advance(3_000);
      const denied = await limiter.check('u');
      expect(denied.allowed).toBe(false);
      expect(denied.tier).toBe(1);
      expect(denied).toMatchObject({ limit: 5, window: HOUR, remaining: 0 });
      expectCount(algorithm, denied.estimated, 5);
      expect(denied.tiers[0]).toEqual({ limit: 3, window: 1_000, estimated: 0, remaining: 3, retryAfterMs: 0, resetAt: denied.now });
      if (algorithm === 'token-bucket') {
        // The hour bucket gives a unit back every 12 minutes, counted from when the 5 were spent.
        expect(denied.retryAfterMs).toBeGreaterThan(HOUR / 5 - 20_000);
        expect(denied.retryAfterMs).toBeLessThanOrEqual(HOUR / 5);
      } else {
        expect(denied.retryAfterMs).toBeGreaterThan(HOUR - 20_000);
        expect(denied.retryAfterMs).toBeLessThanOrEqual(2 * HOUR);
      }
      expectConsistent(denied);
      // Denied by the 1 h tier: the 1 s tier counted nothing either.
      expect((await limiter.peek('u', { cost: 0 })).tiers[0].estimated).toBe(0);
      // And the wait it gives is exact.
      clock.advance(denied.retryAfterMs - 1);
      expect((await limiter.peek('u')).allowed).toBe(false);
      clock.advance(1);
      expect((await limiter.check('u')).allowed).toBe(true);
    });

    test('when every tier allows now, the binding tier is the one with least left, whatever its position', async () => {
      const clock = manualClock(START);
      const limiter = createLimiter({
        store: makeStore(),
        limits: [
          { limit: 10, window: '1s' },
          { limit: 3, window: '1h' },
        ],
        algorithm,
        clock: clock.now,
        prefix: uniquePrefix('bind'),
        denyCacheSize: 0,
      });
      const first = await limiter.check('u');
      expect(first).toMatchObject({
        allowed: true,
        tier: 1,
        limit: 3,
        window: HOUR,
        remaining: 2,
        resetAt: START + firstRelease(algorithm, HOUR, 1, 3),
      });
      const peek = await limiter.peek('u', { cost: 0 });
      expect(peek).toMatchObject({ tier: 1, remaining: 2 });
    });

    test('a cost that fits one tier and not the other counts in neither', async () => {
      const { limiter } = setup();
      await limiter.check('u', { cost: 2 });
      const denied = await limiter.check('u', { cost: 2 }); // 1 s: 2 + 2 > 3; 1 h: 2 + 2 <= 5
      expect(denied.allowed).toBe(false);
      expect(denied.tier).toBe(0);
      expect(denied.cost).toBe(2);
      const after = await limiter.peek('u', { cost: 0 });
      expect(after.tiers.map((tier) => tier.estimated)).toEqual([2, 2]);
      const one = await limiter.check('u', { cost: 1 });
      expect(one.allowed).toBe(true);
      expect(one.tiers.map((tier) => tier.estimated)).toEqual([3, 3]);
    });

    test('identifiers are independent across tiers', async () => {
      const { limiter } = setup();
      for (let i = 0; i < 3; i++) await limiter.check('a');
      expect((await limiter.check('a')).allowed).toBe(false);
      const b = await limiter.check('b');
      expect(b.allowed).toBe(true);
      expect(b.tiers.map((tier) => tier.estimated)).toEqual([1, 1]);
    });
  });
});
