import {
  type AfterBlock,
  createLimiter,
  type Decision,
  type Limiter,
  type LimiterOptions,
  MemoryStore,
  OptionError,
  type Store,
} from '../../src';
import { ALGORITHM_NAMES } from '../../src/algorithms';
import type { AlgorithmName } from '../../src/algorithms/types';
import { decisionEssentials } from '../helpers/decisions';
import { keysUnder, manualClock, uniquePrefix } from '../helpers/redis';
import { onRedis, storesWithClusterOfTestFile, withoutRedis } from '../helpers/stores';

const MINUTE = 60_000;
/** A boundary of every window used here, so the expected waits are easy to state. */
const START = 1_800_000_000_000 - (1_800_000_000_000 % MINUTE);
const TIERS = [
  { limit: 2, window: 1_000 },
  { limit: 10, window: 10_000 },
];
/** Longer than any wait or reset the counts alone produce with TIERS after two requests. */
const BLOCK = MINUTE;
/**
 * The counts' own wait for a third request of cost 1 after two at START (on a boundary):
 * the fixed window ends after 1 s; the log's oldest entry leaves after 1 s; the sliding window
 * counter carries the two into the next window, where 2 * (1000 - e) / 1000 + 1 <= 2 from e = 500;
 * the token bucket of 2 per second has one unit back after 500 ms; the precise window's 1 ms
 * buckets (1 s at the default precision) make it the log: 1 s.
 */
const COUNTS_WAIT: Record<AlgorithmName, number> = {
  'sliding-window': 1_500,
  'fixed-window': 1_000,
  'sliding-log': 1_000,
  'token-bucket': 500,
  'precise-window': 1_000,
};
/** A block shorter than every algorithm's COUNTS_WAIT. */
const SHORT = 300;

const STORES = storesWithClusterOfTestFile();
const REDIS_STORES = STORES.filter((kind) => kind.name !== 'MemoryStore');

/** A store that counts the calls the limiter makes to it. */
function countingStore(inner: Store): { store: Store; calls: { check: number } } {
  const calls = { check: 0 };
  const store: Store = {
    needsTimeout: inner.needsTimeout,
    check(scripts, key, check) {
      calls.check++;
      return inner.check(scripts, key, check);
    },
    settle: (scripts, key, call) => inner.settle(scripts, key, call),
    reset: (key) => inner.reset(key),
  };
  return { store, calls };
}

/** The figures of a blocked decision at `now`, for a block ending at `until`. */
function expectBlocked(decision: Decision, now: number, until: number): void {
  expect(decision).toMatchObject({
    allowed: false,
    blocked: true,
    counted: false,
    now,
    retryAfterMs: until - now,
    resetAt: until,
    remaining: 0,
  });
  for (const tier of decision.tiers) expect(tier).toMatchObject({ remaining: 0, retryAfterMs: until - now, resetAt: until });
}

describe.each(STORES)('blockFor on $name', (kind) => {
  describe.each(ALGORITHM_NAMES)('%s', (algorithm) => {
    function setup(options: LimiterOptions = {}) {
      const clock = manualClock(START);
      const store = options.store ?? kind.make();
      const prefix = options.prefix ?? uniquePrefix('block');
      const make = (more: LimiterOptions = {}): Limiter =>
        createLimiter({
          store,
          limits: TIERS,
          algorithm,
          clock: clock.now,
          prefix,
          blockFor: BLOCK,
          denyCacheSize: 0,
          ...options,
          ...more,
        });
      return { clock, store, prefix, make, limiter: make() };
    }

    /** Two allowed checks at the current time, then the denial that starts the block. */
    async function deny(limiter: Limiter, id = 'u'): Promise<Decision> {
      for (let i = 0; i < 2; i++) expect(await limiter.check(id)).toMatchObject({ allowed: true, blocked: false, counted: true });
      return limiter.check(id);
    }

    test('refused for blockFor from the denial whatever the counts say: the exact time left, no quota in any tier, nothing counted', async () => {
      const { clock, store, limiter } = setup();
      // The same two requests, without a block, on another prefix: what the counts alone say.
      const control = createLimiter({
        store,
        limits: TIERS,
        algorithm,
        clock: clock.now,
        prefix: uniquePrefix('control'),
        denyCacheSize: 0,
      });
      await control.check('u');
      await control.check('u');

      const denial = await deny(limiter);
      expectBlocked(denial, START, START + BLOCK);
      expect(denial.cached).toBe(false);

      for (const at of [0, 1, COUNTS_WAIT[algorithm], 2_000, 30_000, BLOCK - 1]) {
        clock.set(START + at);
        // The counts alone would allow from COUNTS_WAIT on.
        expect((await control.peek('u')).allowed).toBe(at >= COUNTS_WAIT[algorithm]);
        for (let i = 0; i < 3; i++) expectBlocked(await limiter.check('u'), START + at, START + BLOCK);
        // Nothing was counted: the estimates are those of the two requests alone.
        const blockedPeek = await limiter.peek('u', { cost: 0 });
        expectBlocked(blockedPeek, START + at, START + BLOCK);
        const controlPeek = await control.peek('u', { cost: 0 });
        expect(blockedPeek.tiers.map((tier) => tier.estimated)).toEqual(controlPeek.tiers.map((tier) => tier.estimated));
      }

      clock.set(START + BLOCK);
      const after = await limiter.check('u');
      expect(after).toMatchObject({ allowed: true, blocked: false, counted: true, retryAfterMs: 0 });
      // Only this request counts: none of the 18 refused during the block were counted.
      expect(after.tiers.map((tier) => tier.estimated)).toEqual([1, 1]);
    });

    test('exact: a client that waits exactly retryAfterMs gets through, 1 ms earlier it does not', async () => {
      const { clock, limiter } = setup();
      clock.set(START + 123); // not on a boundary
      const denial = await deny(limiter);
      expect(denial).toMatchObject({ allowed: false, blocked: true, retryAfterMs: BLOCK });
      clock.set(START + 123 + denial.retryAfterMs - 1);
      expect(await limiter.peek('u')).toMatchObject({ allowed: false, blocked: true, retryAfterMs: 1 });
      clock.set(START + 123 + denial.retryAfterMs);
      expect(await limiter.peek('u')).toMatchObject({ allowed: true, blocked: false, retryAfterMs: 0 });
      expect(await limiter.check('u')).toMatchObject({ allowed: true, blocked: false, counted: true });
    });

    test("blockFor shorter than the counts' own wait: retryAfterMs is the counts' wait, and exact", async () => {
      const { clock, limiter } = setup({ blockFor: `${SHORT}ms` });
      const denial = await deny(limiter);
      const wait = COUNTS_WAIT[algorithm];
      expect(denial).toMatchObject({ allowed: false, blocked: true, retryAfterMs: wait });
      // While the block lasts the counts' wait still binds.
      clock.set(START + SHORT - 1);
      expect(await limiter.peek('u')).toMatchObject({ allowed: false, blocked: true, retryAfterMs: wait - SHORT + 1 });
      // Once it has ended, only the counts refuse.
      clock.set(START + SHORT);
      expect(await limiter.peek('u')).toMatchObject({ allowed: false, blocked: false, retryAfterMs: wait - SHORT });
      clock.set(START + wait - 1);
      expect(await limiter.peek('u')).toMatchObject({ allowed: false, blocked: false, retryAfterMs: 1 });
      clock.set(START + wait);
      expect(await limiter.peek('u')).toMatchObject({ allowed: true, blocked: false });
      expect(await limiter.check('u')).toMatchObject({ allowed: true, blocked: false, counted: true });
    });

    test('reset() lifts the block, for this limiter at once and for the store: other limiters without the denial cached see it', async () => {
      const { clock, make, limiter } = setup({ denyCacheSize: 10_000 });
      const other = make(); // another process that has cached the denial
      const uncached = make({ denyCacheSize: 0 });
      expect((await deny(limiter)).blocked).toBe(true);
      clock.set(START + 1_000);
      expect(await other.check('u')).toMatchObject({ allowed: false, blocked: true, cached: false });

      await limiter.reset('u');
      const redis = kind.redis();
      if (redis !== undefined) expect(await redis.exists(limiter.keyFor('u'))).toBe(0);
      expect(await uncached.peek('u')).toMatchObject({ allowed: true, blocked: false });
      expect(await make().peek('u')).toMatchObject({ allowed: true, blocked: false, cached: false }); // a fresh process
      const after = await limiter.check('u');
      expect(after).toMatchObject({ allowed: true, blocked: false, cached: false });
      expect(after.tiers.map((tier) => tier.estimated)).toEqual([1, 1]);
      // The other process's local cache still answers until its entry ends, at the block's end.
      clock.set(START + BLOCK - 1);
      expect(await other.check('u')).toMatchObject({ allowed: false, blocked: true, cached: true, retryAfterMs: 1 });
      clock.set(START + BLOCK);
      expect(await other.check('u')).toMatchObject({ allowed: true, blocked: false, cached: false });
    });

    describe("afterBlock: 'reset'", () => {
      test("the denial that starts the block forgets the counts: nothing counted, a wait of exactly blockFor, whatever the counts' own wait; then a whole quota in every tier", async () => {
        const { clock, limiter } = setup({ blockFor: `${SHORT}ms`, afterBlock: 'reset' });
        expect(limiter.afterBlock).toBe('reset');
        const denial = await deny(limiter);
        expectBlocked(denial, START, START + SHORT);
        expect(denial.tiers.map((tier) => tier.estimated)).toEqual([0, 0]);

        clock.set(START + SHORT - 1);
        const blocked = await limiter.check('u');
        expectBlocked(blocked, START + SHORT - 1, START + SHORT);
        expect(blocked.tiers.map((tier) => tier.estimated)).toEqual([0, 0]);

        // Where the counts would still refuse (COUNTS_WAIT > SHORT), the whole quota is back.
        clock.set(START + SHORT);
        const first = await limiter.check('u');
        expect(first).toMatchObject({ allowed: true, blocked: false, counted: true, remaining: 1 });
        expect(first.tiers.map((tier) => tier.estimated)).toEqual([1, 1]);
        expect(await limiter.check('u')).toMatchObject({ allowed: true, remaining: 0 });
        // Over the limit again: a new block, wiping again.
        expectBlocked(await limiter.check('u'), START + SHORT, START + 2 * SHORT);
      });

      test("afterBlock: 'keep' (the default) leaves the counts: the same start refuses until the counts' wait", async () => {
        const { clock, limiter } = setup({ blockFor: `${SHORT}ms` });
        expect(limiter.afterBlock).toBe('keep');
        await deny(limiter);
        clock.set(START + SHORT);
        expect(await limiter.peek('u')).toMatchObject({ allowed: false, blocked: false, retryAfterMs: COUNTS_WAIT[algorithm] - SHORT });
      });

      test('a refund during the block gives nothing back; a charge during it counts after it', async () => {
        const { clock, limiter } = setup({ blockFor: `${SHORT}ms`, afterBlock: 'reset' });
        const counted = await limiter.check('u');
        const settled = await limiter.check('u');
        expect((await limiter.check('u')).blocked).toBe(true);
        clock.set(START + 100);
        await limiter.refund('u', counted);
        expect((await limiter.peek('u', { cost: 0 })).tiers.map((tier) => tier.estimated)).toEqual([0, 0]);
        // The second request turns out to cost 2: one more unit, charged at START + 100.
        await limiter.settle('u', settled, 2);
        clock.set(START + SHORT);
        const after = await limiter.check('u');
        expect(after).toMatchObject({ allowed: true, blocked: false });
        expect(after.tiers[0].estimated).toBeGreaterThan(1);
      });

      test('with the deny cache: answered locally until the block ends, then the store gives the whole quota', async () => {
        const { store, calls } = countingStore(kind.make());
        const { clock, limiter } = setup({ store, blockFor: `${SHORT}ms`, afterBlock: 'reset', denyCacheSize: 10_000 });
        await deny(limiter);
        clock.set(START + SHORT - 1);
        expect(await limiter.check('u')).toMatchObject({ allowed: false, blocked: true, cached: true, retryAfterMs: 1 });
        expect(calls.check).toBe(3);
        clock.set(START + SHORT);
        for (let i = 0; i < 2; i++) expect(await limiter.check('u')).toMatchObject({ allowed: true, cached: false });
        expect(calls.check).toBe(5);
      });
    });

    test('the deny cache answers a blocked identifier until the block ends with no store call after the first refusal', async () => {
      const { store, calls } = countingStore(kind.make());
      const { clock, limiter } = setup({ store, denyCacheSize: 10_000 });
      const denial = await deny(limiter);
      expectBlocked(denial, START, START + BLOCK);
      expect(denial.cached).toBe(false);
      expect(calls.check).toBe(3); // two allowed, one denial

      for (let i = 0; i < 1_000; i++) {
        const at = START + Math.floor((i * (BLOCK - 1)) / 999); // from the denial to 1 ms before the end
        clock.set(at);
        const decision = await limiter.check('u');
        expect(decision.cached).toBe(true);
        expectBlocked(decision, at, START + BLOCK);
      }
      expect(calls.check).toBe(3);

      clock.set(START + BLOCK);
      expect(await limiter.check('u')).toMatchObject({ allowed: true, blocked: false, cached: false });
      expect(calls.check).toBe(4);
    });
  });
});

onRedis.describe.each(REDIS_STORES)('the block is in Redis, on $name', (kind) => {
  describe.each(ALGORITHM_NAMES)('%s', (algorithm) => {
    function limiterAt(clock: () => number, prefix: string, afterBlock?: AfterBlock): Limiter {
      // Each its own deny cache, as separate processes have.
      return createLimiter({ store: kind.make(), limits: TIERS, algorithm, clock, prefix, blockFor: BLOCK, afterBlock });
    }

    test('a block set through one limiter is honoured by another at once, and by one built later (a restarted process)', async () => {
      const clock = manualClock(START);
      const prefix = uniquePrefix('shared');
      const first = limiterAt(clock.now, prefix);
      const second = limiterAt(clock.now, prefix);
      for (let i = 0; i < 2; i++) expect((await first.check('u')).allowed).toBe(true);
      expectBlocked(await first.check('u'), START, START + BLOCK);

      const seen = await second.check('u');
      expect(seen.cached).toBe(false);
      expectBlocked(seen, START, START + BLOCK);
      clock.set(START + 5_000); // the counts alone would allow
      expectBlocked(await second.check('u'), START + 5_000, START + BLOCK);

      clock.set(START + 10_000);
      const restarted = limiterAt(clock.now, prefix);
      const late = await restarted.check('u');
      expect(late.cached).toBe(false);
      expectBlocked(late, START + 10_000, START + BLOCK);

      clock.set(START + BLOCK);
      expect(await restarted.check('u')).toMatchObject({ allowed: true, blocked: false });
    });

    test("one key holds the block, and its TTL covers the block even where the counts' own expiry is shorter", async () => {
      const redis = kind.redis()!;
      const clock = manualClock(START);
      const limiter = limiterAt(clock.now, uniquePrefix('ttl'));
      const key = limiter.keyFor('u');
      for (let i = 0; i < 2; i++) await limiter.check('u');
      const countsTtl = await redis.pttl(key);
      // The counts alone keep the key 10 s (fixed window: to the end of the 10 s window; log: one
      // longest window), 20 s (sliding window: two longest windows), 10 s and a 1 ms bucket (precise
      // window) or 2 s (token bucket: until both buckets are full), all shorter than the block.
      expect(countsTtl).toBeGreaterThan(0);
      expect(countsTtl).toBeLessThanOrEqual({ 'sliding-window': 20_000, 'precise-window': 10_001 }[algorithm as string] ?? 10_000);

      const before = Date.now();
      expect((await limiter.check('u')).blocked).toBe(true);
      const ttl = await redis.pttl(key);
      const elapsed = Date.now() - before;
      // Written with PX = blockFor by Redis' own clock: at most the real time since has gone.
      expect(ttl).toBeLessThanOrEqual(BLOCK);
      expect(ttl).toBeGreaterThanOrEqual(BLOCK - elapsed - 1);

      expect(await keysUnder(redis, limiter.prefix)).toEqual([key]);
      if (algorithm === 'sliding-log') {
        expect(await redis.type(key)).toBe('zset');
        expect(Number(await redis.zscore(key, '!'))).toBe(-(START + BLOCK));
      } else {
        expect(await redis.type(key)).toBe('string');
        expect(await redis.get(key)).toMatch(new RegExp(`^!${(START + BLOCK).toString(36)} `));
      }
    });

    test("afterBlock: 'reset': the key holds the block marker alone, and lives exactly blockFor", async () => {
      const redis = kind.redis()!;
      const clock = manualClock(START);
      const limiter = limiterAt(clock.now, uniquePrefix('wipe'), 'reset');
      const key = limiter.keyFor('u');
      for (let i = 0; i < 2; i++) await limiter.check('u');
      const before = Date.now();
      expect((await limiter.check('u')).blocked).toBe(true);
      const ttl = await redis.pttl(key);
      expect(ttl).toBeLessThanOrEqual(BLOCK);
      expect(ttl).toBeGreaterThanOrEqual(BLOCK - (Date.now() - before) - 1);
      if (algorithm === 'sliding-log') {
        expect(await redis.zrange(key, '0', '-1', 'WITHSCORES')).toEqual(['!', String(-(START + BLOCK))]);
      } else {
        expect(await redis.get(key)).toBe(`!${(START + BLOCK).toString(36)}`);
      }
    });
  });
});

withoutRedis.describe('blockFor option', () => {
  test.each([-1, 'soon'])('blockFor %p throws an OptionError naming blockFor', (blockFor) => {
    expect(() => createLimiter({ blockFor })).toThrow(OptionError);
    expect(() => createLimiter({ blockFor })).toThrow(/^blockFor: /);
  });

  test("afterBlock: 'keep' or 'reset', with blockFor only", () => {
    expect(createLimiter({ blockFor: '1m' }).afterBlock).toBe('keep');
    expect(createLimiter({ blockFor: '1m', afterBlock: 'reset' }).afterBlock).toBe('reset');
    expect(() => createLimiter({ blockFor: '1m', afterBlock: 'forget' as AfterBlock })).toThrow(
      expect.objectContaining({ code: 'SWL_INVALID_CHOICE', message: expect.stringMatching(/^afterBlock: /) }),
    );
    expect(() => createLimiter({ afterBlock: 'reset' })).toThrow(
      expect.objectContaining({ code: 'SWL_CONFLICTING_OPTIONS', message: expect.stringMatching(/^afterBlock: /) }),
    );
  });

  test("durations are read as milliseconds; 0 means no block: a denial then waits for the counts' wait only", async () => {
    expect(createLimiter({ blockFor: '10s' }).blockFor).toBe(10_000);
    expect(createLimiter({ blockFor: '250ms' }).blockFor).toBe(250);
    expect(createLimiter().blockFor).toBe(0);
    const clock = manualClock(START);
    const limiter = createLimiter({
      store: new MemoryStore({ sweepIntervalMs: 0 }),
      limits: TIERS,
      algorithm: 'fixed-window',
      clock: clock.now,
      blockFor: 0,
      denyCacheSize: 0,
    });
    expect(limiter.blockFor).toBe(0);
    await limiter.check('u');
    await limiter.check('u');
    expect(await limiter.check('u')).toMatchObject({ allowed: false, blocked: false, retryAfterMs: 1_000 });
    clock.set(START + 1_000);
    expect(await limiter.check('u')).toMatchObject({ allowed: true, blocked: false });
  });
});

describe.each(STORES)('the deny cache with blockFor on $name', (kind) => {
  // A denied peek must not answer the next check from the cache: that check starts the block.
  test('a check denied after a denied peek still starts the block', async () => {
    const clock = manualClock(START);
    const limiter = createLimiter({
      store: kind.make(),
      limits: TIERS,
      algorithm: 'fixed-window',
      clock: clock.now,
      prefix: uniquePrefix('peek'),
      blockFor: BLOCK,
    });
    await limiter.check('u');
    await limiter.check('u');
    expect(await limiter.peek('u')).toMatchObject({ allowed: false, blocked: false, retryAfterMs: 1_000 });
    expect(await limiter.check('u')).toMatchObject({ allowed: false, blocked: true, retryAfterMs: BLOCK });
    clock.set(START + 2_000);
    expect(await limiter.check('u')).toMatchObject({ allowed: false, blocked: true, retryAfterMs: BLOCK - 2_000 });
  });

  // A blocked denial is cached only until the block ends: a denial from the store after that starts a new block.
  test("blockFor shorter than the counts' wait: the same decisions with and without the deny cache", async () => {
    const clock = manualClock(START);
    const store = kind.make();
    const common = { store, limits: TIERS, algorithm: 'fixed-window' as const, clock: clock.now, blockFor: `${SHORT}ms` };
    const uncached = createLimiter({ ...common, prefix: uniquePrefix('nocache'), denyCacheSize: 0 });
    const cached = createLimiter({ ...common, prefix: uniquePrefix('cache') });
    const both = async (method: 'check' | 'peek') => [await uncached[method]('u'), await cached[method]('u')];
    for (const at of [0, 0, 0, SHORT, 800, 1_000]) {
      clock.set(START + at);
      const method = at === SHORT ? 'peek' : 'check';
      const [expected, actual] = await both(method);
      expect({ at, method, ...decisionEssentials(actual) }).toEqual({ at, method, ...decisionEssentials(expected) });
    }
  });
});
