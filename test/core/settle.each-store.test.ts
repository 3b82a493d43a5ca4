/**
 * `limiter.settle(identifier, decision, actualCost)` on every algorithm and store: a check's
 * count settled to what the request actually cost, in one atomic step. Less gives the difference
 * back to the window it was counted in; more charges the difference now, past the limit if need
 * be, and the next request waits exactly until that debt has decayed. Never below zero; exact
 * under concurrent settlements. Injected clock, starting on a boundary of every window.
 */
import { type AlgorithmName, createLimiter, type Limiter } from '../../src';
import { ALGORITHM_NAMES } from '../../src/algorithms';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { everyStore } from '../helpers/stores';

const STORES = everyStore();
const MINUTE = 60_000;
const START = 1_800_000_000_000 - (1_800_000_000_000 % 3_600_000);
const LIMIT = 200;

describe.each(STORES)('on %s', (_storeName, makeStore) => {
  describe.each(ALGORITHM_NAMES)('%s', (algorithm: AlgorithmName) => {
    let clock: ReturnType<typeof manualClock>;
    let limiter: Limiter;
    beforeEach(() => {
      clock = manualClock(START);
      limiter = createLimiter({
        store: makeStore(),
        algorithm,
        limit: LIMIT,
        window: '1m',
        clock: clock.now,
        prefix: uniquePrefix('settle'),
      });
    });
    const counted = async () => (await limiter.peek('k', { cost: 0 })).estimated;

    test('reserve 100 and settle 30: 70 are given back', async () => {
      const reserved = await limiter.check('k', { cost: 100 });
      expect(reserved).toMatchObject({ allowed: true, counted: true, remaining: 100 });
      await limiter.settle('k', reserved, 30);
      expect(await counted()).toBe(30);
      expect((await limiter.check('k', { cost: 170 })).allowed).toBe(true);
      expect((await limiter.check('k', { cost: 1 })).allowed).toBe(false);
    });

    test('reserve 100 and settle 250: 150 more are charged, and the next request waits exactly for the debt', async () => {
      const reserved = await limiter.check('k', { cost: 100 });
      await limiter.settle('k', reserved, 250);
      expect(await counted()).toBe(250);
      const denied = await limiter.check('k');
      expect(denied.allowed).toBe(false);
      const wait = denied.retryAfterMs;
      if (algorithm === 'sliding-window') {
        // In the next window, 250 × (60 − e) / 60 + 1 <= 200 from e = 12.24 s.
        expect(wait).toBe(MINUTE + 12_240);
      }
      if (algorithm === 'fixed-window') expect(wait).toBe(MINUTE);
      clock.set(START + wait - 1);
      expect((await limiter.check('k')).allowed).toBe(false);
      clock.set(START + wait);
      expect((await limiter.check('k')).allowed).toBe(true);
    });

    test('settled after its window rolled: given back to the window it was counted in', async () => {
      clock.set(START + 30_000);
      const reserved = await limiter.check('k', { cost: 100 });
      clock.set(START + MINUTE + 15_000);
      const before = await counted();
      await limiter.settle('k', reserved, 30);
      const after = await counted();
      const expected: Record<AlgorithmName, [number, number]> = {
        // The previous window's 100 becomes 30, weighed by the 45 s of it still in the sliding window.
        'sliding-window': [75, 22.5],
        // The count is in the previous window, which no longer counts: nothing to give back now.
        'fixed-window': [0, 0],
        // The entries counted at 30 s are still within the last minute.
        'sliding-log': [100, 30],
        // 45 s refilled 150 of the 100 used: the bucket is full, and a refund cannot overfill it.
        'token-bucket': [0, 0],
        // Its 10 ms bucket at 30 s is wholly within the last minute.
        'precise-window': [100, 30],
      };
      expect([before, after]).toEqual(expected[algorithm]);
    });

    test('an overcharge after the window rolled is charged now', async () => {
      clock.set(START + 30_000);
      const reserved = await limiter.check('k', { cost: 100 });
      clock.set(START + MINUTE + 15_000);
      const before = await counted();
      await limiter.settle('k', reserved, 250);
      expect((await counted()) - before).toBe(150);
    });

    test('never below zero: settling a count that is gone already leaves nothing owed back', async () => {
      const reserved = await limiter.check('k', { cost: 50 });
      await limiter.reset('k');
      await limiter.settle('k', reserved, 0);
      expect(await counted()).toBe(0);
      expect((await limiter.check('k', { cost: LIMIT })).allowed).toBe(true);
      expect(await counted()).toBe(LIMIT);
    });

    test('concurrent settlements are exact', async () => {
      const checks = await Promise.all(Array.from({ length: 20 }, () => limiter.check('k', { cost: 10 })));
      expect(checks.every((decision) => decision.allowed)).toBe(true);
      const actual = checks.map((_, i) => (i * 7) % 23);
      await Promise.all(checks.map((decision, i) => limiter.settle('k', decision, actual[i])));
      expect(await counted()).toBe(actual.reduce((sum, cost) => sum + cost, 0));
    });

    test('a denied check counted nothing: settling it charges its whole actual cost', async () => {
      await limiter.check('k', { cost: LIMIT });
      const denied = await limiter.check('k', { cost: 5 });
      expect(denied).toMatchObject({ allowed: false, counted: false });
      await limiter.settle('k', denied, 3);
      expect(await counted()).toBe(LIMIT + 3);
    });
  });

  test('settle validates what it is given', async () => {
    const limiter = createLimiter({ store: makeStore(), limit: 10, prefix: uniquePrefix('settle') });
    const decision = await limiter.check('k');
    await expect(limiter.settle('k', decision, -1)).rejects.toMatchObject({
      code: 'SWL_INVALID_COST',
      message: expect.stringMatching(/^actualCost: /),
    });
    await expect(limiter.settle('k', decision, 1.5)).rejects.toMatchObject({ code: 'SWL_INVALID_COST' });
    await expect(limiter.settle('k', { allowed: true } as never, 1)).rejects.toMatchObject({ code: 'SWL_INVALID_TYPE' });
  });
});
