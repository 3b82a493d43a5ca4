/**
 * retryAfterMs and resetAt are exact for every algorithm: waiting exactly retryAfterMs is
 * allowed, 1 ms (or 1 s) less is not, including several tiers and costs above 1; and each
 * tier's resetAt is the first moment its remaining quota grows, not a moment earlier.
 */
import { createLimiter, type Decision, type Limiter, MemoryStore, type Store } from '../../src';
import { ALGORITHM_NAMES } from '../../src/algorithms';
import type { AlgorithmName } from '../../src/algorithms/types';
import type { Tier } from '../../src/tiers';
import { mulberry32 as seeded } from '../../support/random';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { redisStoresPerClient, selectStores } from '../helpers/stores';

const stores = selectStores<[string, () => Store]>([
  ...redisStoresPerClient(),
  ['MemoryStore', () => new MemoryStore({ sweepIntervalMs: 0 })],
]);
const ALGORITHMS: readonly AlgorithmName[] = ALGORITHM_NAMES;
const MINUTE = 60_000;
const START = 1_700_000_040_000 - (1_700_000_040_000 % (10 * MINUTE)); // a boundary of every window used

describe.each(stores)('exact retryAfterMs on %s', (_name, makeStore) => {
  function setup(algorithm: AlgorithmName, limits: Tier[]) {
    const clock = manualClock(START);
    const limiter = createLimiter({
      store: makeStore(),
      limits,
      algorithm,
      clock: clock.now,
      prefix: uniquePrefix('retry'),
      denyCacheSize: 0,
    });
    return { clock, limiter };
  }

  /**
   * At `at - 1000` and `at - 1` (when still ahead) a request of `cost` is denied; at `at` it is
   * allowed. Peeks only, and the clock only moves forward: it is left at `at`.
   */
  async function expectFirstAllowedAt(
    limiter: Limiter,
    clock: ReturnType<typeof manualClock>,
    id: string,
    cost: number,
    at: number,
  ): Promise<void> {
    for (const early of [1_000, 1]) {
      if (at - early < clock.now()) continue;
      clock.set(at - early);
      expect({ early, allowed: (await limiter.peek(id, { cost })).allowed }).toEqual({ early, allowed: false });
    }
    clock.set(at);
    expect((await limiter.peek(id, { cost })).allowed).toBe(true);
  }

  test('sliding window, cost 5: the previous window decays until exactly 5 fit', async () => {
    const { clock, limiter } = setup('sliding-window', [{ limit: 10, window: MINUTE }]);
    expect((await limiter.check('a', { cost: 6 })).allowed).toBe(true);
    clock.set(START + MINUTE); // current 0, previous 6: 6 + 5 > 10
    const denied = await limiter.check('a', { cost: 5 });
    expect(denied.allowed).toBe(false);
    // 6 * (60 - e) / 60 + 5 <= 10  <=>  e >= 10 s
    expect(denied.retryAfterMs).toBe(10_000);
    // More quota comes at the same moment here: 6 * (60 - e) / 60 <= 5 from e = 10 s too.
    expect(denied.resetAt).toBe(START + MINUTE + 10_000);
    await expectFirstAllowedAt(limiter, clock, 'a', 5, denied.now + denied.retryAfterMs);
    clock.set(denied.now + denied.retryAfterMs);
    expect((await limiter.check('a', { cost: 5 })).allowed).toBe(true);
  });

  test('sliding window: a full current window waits into the next one', async () => {
    const { clock, limiter } = setup('sliding-window', [{ limit: 10, window: MINUTE }]);
    clock.set(START + 30_000);
    expect((await limiter.check('a', { cost: 10 })).allowed).toBe(true);
    const denied = await limiter.check('a', { cost: 4 });
    // Next window: 10 * (60 - e) / 60 + 4 <= 10  <=>  e >= 24 s; from 30 s into this one: 30 + 24 s.
    expect(denied.retryAfterMs).toBe(54_000);
    // The full limit as one request: only once the previous window has no weight left.
    const all = await limiter.peek('a', { cost: 10 });
    expect(all.retryAfterMs).toBe(90_000);
    // But one unit comes back sooner: 10 * (60 - e) / 60 <= 9 from e = 6 s of the next window.
    expect(denied.resetAt).toBe(START + MINUTE + 6_000);
    await expectFirstAllowedAt(limiter, clock, 'a', 1, denied.resetAt);
    await expectFirstAllowedAt(limiter, clock, 'a', 4, denied.now + denied.retryAfterMs);
    await expectFirstAllowedAt(limiter, clock, 'a', 10, all.now + all.retryAfterMs);
  });

  test('fixed window, cost 3: until the window ends', async () => {
    const { clock, limiter } = setup('fixed-window', [{ limit: 5, window: 10_000 }]);
    clock.set(START + 3_000);
    expect((await limiter.check('a', { cost: 3 })).allowed).toBe(true);
    const denied = await limiter.check('a', { cost: 3 });
    expect(denied.allowed).toBe(false);
    expect(denied.retryAfterMs).toBe(7_000);
    expect(denied.resetAt).toBe(START + 10_000);
    // Cost 2 still fits now; after it, a further cost-2 request has to wait for the next window.
    const two = await limiter.check('a', { cost: 2 });
    expect(two).toMatchObject({ allowed: true, retryAfterMs: 0, remaining: 0 });
    expect(two.resetAt).toBe(START + 10_000);
    await expectFirstAllowedAt(limiter, clock, 'a', 3, denied.resetAt);
  });

  test('sliding log, cost 3: until the third oldest unit leaves the window', async () => {
    const { clock, limiter } = setup('sliding-log', [{ limit: 5, window: MINUTE }]);
    expect((await limiter.check('a', { cost: 2 })).allowed).toBe(true);
    clock.set(START + 10_000);
    expect((await limiter.check('a', { cost: 3 })).allowed).toBe(true);
    clock.set(START + 20_000);
    const denied = await limiter.check('a', { cost: 3 });
    expect(denied.allowed).toBe(false);
    // Units at 0, 0, 10, 10, 10 s: three must leave, the third leaves at 10 + 60 s.
    expect(denied.retryAfterMs).toBe(50_000);
    const one = await limiter.peek('a');
    expect(one.retryAfterMs).toBe(40_000); // one unit: the oldest leaves at 60 s
    await expectFirstAllowedAt(limiter, clock, 'a', 1, START + 60_000);
    await expectFirstAllowedAt(limiter, clock, 'a', 3, START + 70_000);
  });

  test.each(ALGORITHMS)('%s, two tiers: the longer wait wins and is exact', async (algorithm) => {
    const { clock, limiter } = setup(algorithm, [
      { limit: 2, window: 1_000 },
      { limit: 4, window: 10_000 },
    ]);
    expect((await limiter.check('a', { cost: 2 })).allowed).toBe(true);
    clock.set(START + 2_000);
    expect((await limiter.check('a', { cost: 2 })).allowed).toBe(true);
    clock.set(START + 4_000);
    // A token bucket has refilled 1.6 units of its 10 s tier by now (one every 2.5 s): a cost of 2 waits.
    const cost = algorithm === 'token-bucket' ? 2 : 1;
    const denied = await limiter.check('a', { cost });
    expect(denied.allowed).toBe(false);
    expect(denied.tier).toBe(1);
    // The 1 s tier is empty again; the 10 s tier holds 4.
    //   fixed window: until its window ends at 10 s: 6 s;  sliding log: until the units of 0 s leave: 6 s;
    //   sliding window: in the next window 4 * (10 - e) / 10 + 1 <= 4 from e = 2.5 s: 6 + 2.5 s;
    //   token bucket: full again at 10 s, room for 2 (5 s of refill) at 5 s: 1 s;
    //   precise window: 1 ms buckets in a 10 s window (the default precision), exact as the log: 6 s.
    const expected = {
      'sliding-window': 8_500,
      'fixed-window': 6_000,
      'sliding-log': 6_000,
      'token-bucket': 1_000,
      'precise-window': 6_000,
    }[algorithm];
    expect(denied.retryAfterMs).toBe(expected);
    expect(denied.tiers[1].resetAt).toBe(denied.resetAt);
    if (algorithm === 'token-bucket') {
      // The 1 s bucket is full again; the 10 s one holds 2.4 units, 0.4 of a unit above 2: one
      // more unit (remaining 1 to 2, at level 2) comes back 1 s later, when the request fits too.
      expect(denied.tiers[0].resetAt).toBe(denied.now);
      expect(denied.resetAt).toBe(denied.now + 1_000);
    } else {
      expect(denied.tiers[0].resetAt).toBe(denied.now);
      // Cost 1 with nothing left: the next unit of quota is exactly what the request waits for.
      expect(denied.resetAt).toBe(denied.now + denied.retryAfterMs);
    }
    await expectFirstAllowedAt(limiter, clock, 'a', cost, denied.now + denied.retryAfterMs);
  });

  test.each(ALGORITHMS)('%s: every denial and every full allowance in a random sequence gives the exact wait', async (algorithm) => {
    const random = seeded(0x7e7 + ALGORITHMS.indexOf(algorithm));
    let verified = 0;
    for (const limits of [
      [{ limit: 7, window: 5_000 }],
      [
        { limit: 3, window: 1_000 },
        { limit: 10, window: 20_000 },
      ],
    ]) {
      const { clock, limiter } = setup(algorithm, limits);
      const smallest = Math.min(...limits.map((tier) => tier.limit));
      for (let step = 0; step < 120; step++) {
        clock.advance(random() < 0.5 ? 0 : Math.floor(random() * 1_500));
        const cost = random() < 0.5 ? 1 : Math.floor(random() * (smallest + 1));
        const decision = await limiter.check('r', { cost });
        const binding = decision.tiers[decision.tier];
        expect(decision.resetAt).toBe(binding.resetAt);
        expect(binding.retryAfterMs).toBe(Math.max(...decision.tiers.map((tier) => tier.retryAfterMs)));
        expect(decision.retryAfterMs).toBe(decision.allowed ? 0 : binding.retryAfterMs);
        // When the next request of this cost fits: after a denial, its own wait; after an allowance, a peek's.
        const wait = decision.allowed ? (await limiter.peek('r', { cost })).retryAfterMs : decision.retryAfterMs;
        if (wait > 0) {
          await expectFirstAllowedAt(limiter, clock, 'r', cost, clock.now() + wait);
          verified++;
        }
      }
    }
    expect(verified).toBeGreaterThan(40);
  });

  test.each(ALGORITHMS)('%s: the resetAt of each tier is the first moment its remaining quota grows', async (algorithm) => {
    const random = seeded(0x4e5 + ALGORITHMS.indexOf(algorithm));
    const limits = [
      { limit: 3, window: 1_000 },
      { limit: 10, window: 20_000 },
    ];
    const { clock, limiter } = setup(algorithm, limits);
    let probed = 0;
    for (let sample = 0; sample < 40; sample++) {
      // A fresh identifier, a few random checks, then probes of the last decision, forward in time only.
      const id = `s${sample}`;
      let decision: Decision | undefined;
      for (let step = 1 + Math.floor(random() * 8); step > 0; step--) {
        clock.advance(Math.floor(random() * 700));
        decision = await limiter.check(id, { cost: 1 + Math.floor(random() * 3) });
      }
      const last = decision!;
      const probes = last.tiers
        .flatMap((tier, i) => (tier.resetAt === last.now ? [] : [{ i, tier }]))
        .sort((a, b) => a.tier.resetAt - b.tier.resetAt);
      for (const [i, tier] of last.tiers.entries())
        if (tier.resetAt === last.now) expect({ i, estimated: tier.estimated }).toEqual({ i, estimated: 0 });
      for (const { i, tier } of probes) {
        if (tier.resetAt - 1 > clock.now()) {
          clock.set(tier.resetAt - 1);
          expect({ i, remaining: (await limiter.peek(id, { cost: 0 })).tiers[i].remaining }).toEqual({ i, remaining: tier.remaining });
        }
        clock.set(tier.resetAt);
        expect((await limiter.peek(id, { cost: 0 })).tiers[i].remaining).toBeGreaterThan(tier.remaining);
        probed++;
      }
    }
    expect(probed).toBeGreaterThan(40);
  });
});
