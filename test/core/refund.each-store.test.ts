import { createLimiter, type Decision, type Limiter, MemoryStore, OptionError, type Store, type TierOptions } from '../../src';
import type { AlgorithmName } from '../../src/algorithms/types';
import { keysUnder, manualClock, uniquePrefix } from '../helpers/redis';
import { onRedis, type StoreWithClient, storesWithClusterOfTestFile } from '../helpers/stores';

// The token bucket's refund (no windows: its level) has its own tests at the end of this file.
const ALGORITHMS = ['sliding-window', 'fixed-window', 'sliding-log'] as const;
const HOUR = 3_600_000;
const START = 1_700_000_000_000 - (1_700_000_000_000 % HOUR); // a boundary of every window used here

const BACKENDS = storesWithClusterOfTestFile();
const REDIS_BACKENDS = BACKENDS.filter((backend) => backend.name !== 'MemoryStore');

interface Setup {
  clock: ReturnType<typeof manualClock>;
  limiter: Limiter;
  store: Store;
  /** Whether the store holds a key for `identifier`: Redis EXISTS; on the MemoryStore, whether it holds any key at all. */
  stored(identifier: string): Promise<boolean>;
}

function setupFor(
  backend: StoreWithClient,
  algorithm: AlgorithmName,
  limits: readonly TierOptions[],
  { denyCache = false }: { denyCache?: boolean } = {},
): Setup {
  const clock = manualClock(START);
  const store = backend.make();
  const limiter = createLimiter({
    store,
    limits,
    algorithm,
    clock: clock.now,
    prefix: uniquePrefix('refund'),
    // The default size when on; off elsewhere, so every answer comes from the store.
    ...(denyCache ? {} : { denyCacheSize: 0 }),
  });
  const redis = backend.redis();
  const stored = async (identifier: string): Promise<boolean> =>
    redis === undefined ? (store as MemoryStore).size > 0 : (await redis.exists(limiter.keyFor(identifier))) === 1;
  return { clock, limiter, store, stored };
}

const ONE_TIER = [{ limit: 10, window: '1m' }];
const TWO_TIERS = [
  { limit: 3, window: '1s' },
  { limit: 10, window: '1h' },
];

describe.each(BACKENDS)('refund on $name', (backend) => {
  describe.each(ALGORITHMS)('%s', (algorithm) => {
    const setup = (limits: readonly TierOptions[], options?: { denyCache?: boolean }) => setupFor(backend, algorithm, limits, options);

    test('takes back exactly what the decision counted: a peek sees what it saw before the check', async () => {
      const { clock, limiter } = setup(ONE_TIER);
      clock.set(START - 30_000); // the previous window of the sliding window counter
      await limiter.check('u', { cost: 2 });
      clock.set(START + 5_000);
      await limiter.check('u');
      const before = await limiter.peek('u', { cost: 0 });
      expect(before.estimated).toBeGreaterThan(0);
      const decision = await limiter.check('u', { cost: 3 });
      expect(decision).toMatchObject({ allowed: true, counted: true, cost: 3 });
      expect(decision.estimated).toBeCloseTo(before.estimated + 3, 10);
      await expect(limiter.refund('u', decision)).resolves.toBeUndefined();
      expect(await limiter.peek('u', { cost: 0 })).toEqual(before);
    });

    test('several tiers: every tier gets back what it counted', async () => {
      const { clock, limiter } = setup(TWO_TIERS);
      clock.set(START - 5_000); // the previous window of the 1 h tier
      await limiter.check('u');
      clock.set(START + 1_500);
      await limiter.check('u');
      clock.set(START + 1_700);
      const before = await limiter.peek('u', { cost: 0 });
      expect(before.tiers.map((tier) => tier.estimated > 0)).toEqual([true, true]);
      const decision = await limiter.check('u', { cost: 2 });
      expect(decision.counted).toBe(true);
      await limiter.refund('u', decision);
      expect(await limiter.peek('u', { cost: 0 })).toEqual(before);
    });

    test('a decision made under per-call limits is refunded from those tiers', async () => {
      const { limiter } = setup(ONE_TIER);
      const limits = [
        { limit: 5, window: '10s' },
        { limit: 20, window: '1h' },
      ];
      await limiter.check('u', { limits });
      const before = await limiter.peek('u', { limits, cost: 0 });
      const decision = await limiter.check('u', { limits, cost: 2 });
      expect(decision.tiers.map((tier) => tier.estimated)).toEqual([3, 3]);
      await limiter.refund('u', decision);
      expect(await limiter.peek('u', { limits, cost: 0 })).toEqual(before);
    });

    test('a tier whose window ended since gives back nothing, the other tier gives back its count', async () => {
      const { clock, limiter } = setup(TWO_TIERS);
      await limiter.check('u'); // at START
      const decision = await limiter.check('u', { cost: 2 }); // at START: [3, 3]
      clock.set(START + 1_500); // the 1 s window rolled once, the 1 h window did not
      await limiter.check('u');
      const before = (await limiter.peek('u', { cost: 0 })).tiers.map((tier) => tier.estimated);
      await limiter.refund('u', decision);
      const after = (await limiter.peek('u', { cost: 0 })).tiers.map((tier) => tier.estimated);
      // sliding window: 1 s tier = 1 + 3 × 0.5 before, 1 + 1 × 0.5 after (taken from `previous`);
      // fixed window: the 1 s window it was counted in is over; sliding log: the 1 s window no longer holds it.
      const expected = {
        'sliding-window': { before: [2.5, 4], after: [1.5, 2] },
        'fixed-window': { before: [1, 4], after: [1, 2] },
        'sliding-log': { before: [1, 4], after: [1, 2] },
      }[algorithm];
      expect({ before, after }).toEqual(expected);
    });

    test('never below zero: refunding the same decision twice takes it back once', async () => {
      const { clock, limiter } = setup(ONE_TIER);
      clock.set(START + 1_000);
      const decision = await limiter.check('u', { cost: 2 });
      await limiter.refund('u', decision);
      await limiter.refund('u', decision);
      expect(await limiter.peek('u', { cost: 0 })).toMatchObject({ estimated: 0, remaining: 10 });
      // Nothing negative was stored: the next unit counts as 1, the full limit fits, and no more.
      expect((await limiter.check('u')).estimated).toBe(1);
      expect((await limiter.check('u', { cost: 9 })).allowed).toBe(true);
      expect((await limiter.check('u')).allowed).toBe(false);
    });

    test('never below zero after reset(), and the refund does not bring the key back', async () => {
      const { clock, limiter, stored } = setup(ONE_TIER);
      clock.set(START + 1_000);
      const decision = await limiter.check('u', { cost: 3 });
      expect(await stored('u')).toBe(true);
      await limiter.reset('u');
      expect(await stored('u')).toBe(false);
      await limiter.refund('u', decision);
      expect(await stored('u')).toBe(false);
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(0);
      expect((await limiter.check('u')).estimated).toBe(1);
      expect((await limiter.check('u', { cost: 9 })).allowed).toBe(true);
      expect((await limiter.check('u')).allowed).toBe(false);
    });

    test('a refund for an identifier with nothing stored creates no key', async () => {
      const { limiter, stored, store } = setup(TWO_TIERS);
      const decision = await limiter.check('a', { cost: 2 });
      // The MemoryStore holds 'a' only, before and after; on Redis, EXISTS.
      const nobody = async () => (store instanceof MemoryStore ? store.size > 1 : stored('nobody'));
      expect(await nobody()).toBe(false);
      await limiter.refund('nobody', decision);
      expect(await nobody()).toBe(false);
      if (store instanceof MemoryStore) expect(store.size).toBe(1);
      expect((await limiter.peek('nobody', { cost: 0 })).tiers.map((tier) => tier.estimated)).toEqual([0, 0]);
      // And 'a' kept its count.
      expect((await limiter.peek('a', { cost: 0 })).tiers.map((tier) => tier.estimated)).toEqual([2, 2]);
    });

    test('a decision that counted nothing (a denial, a peek, cost 0) is ignored', async () => {
      const { limiter } = setup([{ limit: 3, window: '1m' }]);
      const allowed = [];
      for (let i = 0; i < 3; i++) allowed.push(await limiter.check('u'));
      const denial = await limiter.check('u');
      const peek = await limiter.peek('u', { cost: 0 });
      const peekOne = await limiter.peek('u');
      const free = await limiter.check('u', { cost: 0 });
      expect([denial, peek, peekOne, free].map((decision) => [decision.allowed, decision.counted])).toEqual([
        [false, false],
        [true, false],
        [false, false],
        [true, false],
      ]);
      const before = await limiter.peek('u', { cost: 0 });
      for (const decision of [denial, peek, peekOne, free]) await limiter.refund('u', decision);
      // What decides is `counted`: an allowed decision marked as not counted is ignored too.
      await limiter.refund('u', { ...allowed[0], counted: false });
      expect(await limiter.peek('u', { cost: 0 })).toEqual(before);
      expect(before.estimated).toBe(3);
      expect((await limiter.check('u')).allowed).toBe(false);
    });

    test('drops a cached denial of the identifier: the next check is allowed and not cached', async () => {
      const { limiter } = setup([{ limit: 3, window: '1m' }], { denyCache: true });
      const allowed = [];
      for (let i = 0; i < 3; i++) allowed.push(await limiter.check('u'));
      expect(await limiter.check('u')).toMatchObject({ allowed: false, cached: false });
      expect(await limiter.check('u')).toMatchObject({ allowed: false, cached: true });
      await limiter.refund('u', allowed[1]);
      expect(await limiter.check('u')).toMatchObject({ allowed: true, cached: false, estimated: 3 });
      expect(await limiter.check('u')).toMatchObject({ allowed: false, cached: false });
    });

    test('concurrency: 200 parallel checks on a limit of 5 allow 5; refunding those 5 allows exactly 5 again', async () => {
      const { limiter } = setup([{ limit: 5, window: '1h' }], { denyCache: true });
      const first = await Promise.all(Array.from({ length: 200 }, () => limiter.check('hot')));
      const counted = first.filter((decision) => decision.allowed);
      expect(counted).toHaveLength(5);
      expect(counted.every((decision) => decision.counted)).toBe(true);
      await Promise.all(counted.map((decision) => limiter.refund('hot', decision)));
      expect((await limiter.peek('hot', { cost: 0 })).estimated).toBe(0);
      const second = await Promise.all(Array.from({ length: 200 }, () => limiter.check('hot')));
      expect(second.filter((decision) => decision.allowed)).toHaveLength(5);
    });

    test('a non-object decision rejects with an OptionError (SWL_INVALID_TYPE)', async () => {
      const { limiter } = setup(ONE_TIER);
      await limiter.check('u');
      for (const value of [null, undefined, 42, 'decision', true]) {
        const refund = limiter.refund('u', value as unknown as Decision);
        await expect(refund).rejects.toBeInstanceOf(OptionError);
        await expect(limiter.refund('u', value as unknown as Decision)).rejects.toMatchObject({
          code: 'SWL_INVALID_TYPE',
          message: expect.stringMatching(/^decision: /),
        });
      }
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(1);
    });

    test('refund() never throws synchronously, even given an object that is not a decision', async () => {
      const { limiter } = setup(ONE_TIER);
      const counted = await limiter.check('u');
      let refund: Promise<void> | undefined;
      expect(() => {
        refund = limiter.refund('u', { counted: true, cost: 1, now: counted.now } as unknown as Decision);
      }).not.toThrow();
      expect(refund).toBeInstanceOf(Promise);
      await refund?.catch(() => undefined);
    });
  });
});

describe.each(BACKENDS)('refund from the window the decision was counted in, on $name', (backend) => {
  describe('sliding window (10 per 10 s)', () => {
    const setup = () => setupFor(backend, 'sliding-window', [{ limit: 10, window: '10s' }]);

    test('the window rolled once and counted since: taken from `previous`, the estimate drops by cost × (window − elapsed) / window', async () => {
      const { clock, limiter } = setup();
      clock.set(START + 1_000);
      await limiter.check('u', { cost: 2 });
      clock.set(START + 2_000);
      const decision = await limiter.check('u', { cost: 3 });
      clock.set(START + 14_000); // elapsed 4 s of the next window
      await limiter.check('u');
      const before = await limiter.peek('u', { cost: 0 });
      expect(before.estimated).toBeCloseTo(1 + 5 * 0.6, 10);
      await limiter.refund('u', decision);
      const after = await limiter.peek('u', { cost: 0 });
      expect(before.estimated - after.estimated).toBeCloseTo((3 * (10_000 - 4_000)) / 10_000, 10);
      expect(after.estimated).toBeCloseTo(1 + 2 * 0.6, 10);
    });

    test('the window rolled once and nothing counted since: the same drop', async () => {
      const { clock, limiter } = setup();
      clock.set(START + 1_000);
      await limiter.check('u', { cost: 2 });
      const decision = await limiter.check('u', { cost: 3 });
      clock.set(START + 17_500); // elapsed 7.5 s
      const before = await limiter.peek('u', { cost: 0 });
      expect(before.estimated).toBeCloseTo(5 * 0.25, 10);
      await limiter.refund('u', decision);
      const after = await limiter.peek('u', { cost: 0 });
      expect(before.estimated - after.estimated).toBeCloseTo(3 * 0.25, 10);
      // And the next window still sees the rest as its previous one.
      clock.set(START + 19_000);
      await limiter.check('u');
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBeCloseTo(1 + 2 * 0.1, 10);
    });

    test('the window rolled twice: nothing is taken back, not from the windows counted since', async () => {
      const { clock, limiter } = setup();
      clock.set(START + 1_000);
      await limiter.check('u', { cost: 2 });
      const decision = await limiter.check('u', { cost: 3 });
      clock.set(START + 12_000);
      await limiter.check('u', { cost: 4 });
      clock.set(START + 24_000);
      await limiter.check('u');
      const before = await limiter.peek('u', { cost: 0 });
      expect(before.estimated).toBeCloseTo(1 + 4 * 0.6, 10);
      await limiter.refund('u', decision);
      expect(await limiter.peek('u', { cost: 0 })).toEqual(before);
    });
  });

  describe('fixed window (10 per 10 s)', () => {
    const setup = () => setupFor(backend, 'fixed-window', [{ limit: 10, window: '10s' }]);

    test('within its window the count goes back; after it, the next window keeps its count', async () => {
      const { clock, limiter } = setup();
      clock.set(START + 1_000);
      await limiter.check('u', { cost: 2 });
      const early = await limiter.check('u', { cost: 3 });
      const late = await limiter.check('u', { cost: 4 });
      clock.set(START + 9_999); // still the window both were counted in
      await limiter.refund('u', late);
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(5);
      clock.set(START + 10_000); // the next window
      await limiter.check('u');
      await limiter.refund('u', early);
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(1);
      expect((await limiter.check('u', { cost: 9 })).allowed).toBe(true);
      expect((await limiter.check('u')).allowed).toBe(false);
    });
  });

  describe('sliding log (6 per 1 s)', () => {
    const setup = () => setupFor(backend, 'sliding-log', [{ limit: 6, window: '1s' }]);

    test('removes the entries of that decision (by its now), not older or newer ones', async () => {
      const { clock, limiter } = setup();
      await limiter.check('u', { cost: 2 }); // at START
      clock.set(START + 100);
      const decision = await limiter.check('u', { cost: 3 });
      clock.set(START + 200);
      await limiter.check('u');
      await limiter.refund('u', decision);
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(3);
      // The entries left are those of START (leaving the window at START + 1 s) and START + 200.
      expect((await limiter.peek('u', { cost: 0 })).resetAt).toBe(START + 1_000);
      clock.set(START + 1_000);
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(1);
    });

    test('two decisions in the same millisecond: each refund takes back its own cost', async () => {
      const { limiter } = setup();
      const two = await limiter.check('u', { cost: 2 });
      const three = await limiter.check('u', { cost: 3 });
      expect(two.now).toBe(three.now);
      await limiter.refund('u', three);
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(2);
      await limiter.refund('u', two);
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(0);
      await limiter.refund('u', two);
      expect((await limiter.check('u', { cost: 6 })).allowed).toBe(true);
      expect((await limiter.check('u')).allowed).toBe(false);
    });

    test('entries already out of the window are not replaced by newer ones', async () => {
      const { clock, limiter } = setup();
      const decision = await limiter.check('u', { cost: 2 });
      clock.set(START + 2_000); // the counting check trims them
      await limiter.check('u');
      await limiter.refund('u', decision);
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(1);
    });
  });
});

describe.each(BACKENDS)('a refund keeps the expiry of the key, on $name', (backend) => {
  /** When each algorithm's key for one check at `at` (1 h window, at an hour boundary + 1 s) expires. */
  const expiry = (algorithm: (typeof ALGORITHMS)[number], at: number): number =>
    ({ 'sliding-window': at + 2 * HOUR, 'fixed-window': START + HOUR, 'sliding-log': at + HOUR })[algorithm];

  test.each(ALGORITHMS)('%s', async (algorithm) => {
    const { clock, limiter, store } = setupFor(backend, algorithm, [{ limit: 10, window: '1h' }]);
    clock.set(START + 1_000);
    const first = await limiter.check('u');
    await limiter.check('u');
    const redis = backend.redis();
    if (redis !== undefined) {
      // A TTL shorter than any the scripts set, so a refund that set one would show.
      const key = limiter.keyFor('u');
      expect(await redis.pexpire(key, 50_000)).toBe(1);
      const before = await redis.pttl(key);
      await limiter.refund('u', first);
      const after = await redis.pttl(key);
      expect(before).toBeLessThanOrEqual(50_000);
      expect(after).toBeLessThanOrEqual(before);
      expect(before - after).toBeLessThan(100);
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(1);
    } else {
      const memory = store as MemoryStore;
      const expiresAt = expiry(algorithm, START + 1_000);
      // Refund late in the key's life (still inside the 1 h window it was counted in).
      clock.set(algorithm === 'sliding-window' ? START + HOUR - 1 : expiresAt - 1);
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(2);
      await limiter.refund('u', first);
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(1);
      memory.sweep(expiresAt - 1);
      expect(memory.size).toBe(1);
      memory.sweep(expiresAt);
      expect(memory.size).toBe(0);
    }
  });
});

onRedis.describe.each(REDIS_BACKENDS)('on $name a refund writes the identifier’s own key only', (backend) => {
  test.each(ALGORITHMS)('%s, identifiers with braces (Cluster hash tags) included', async (algorithm) => {
    const { limiter } = setupFor(backend, algorithm, TWO_TIERS);
    const redis = backend.redis()!;
    const ids = ['{', '}', '{}', 'a{tag}', 'b{tag}', '{tag}', 'user:{42}:*'];
    const last = new Map<string, Decision>();
    for (const id of ids) {
      await limiter.check(id);
      last.set(id, await limiter.check(id, { cost: 2 }));
    }
    for (const id of ids) {
      if (id === 'b{tag}') continue;
      await limiter.refund(id, last.get(id)!);
    }
    // Refunds for identifiers that have no key, one sharing a hash tag with existing keys.
    await limiter.refund('ghost{tag}', last.get('a{tag}')!);
    await limiter.refund('ghost', last.get('{')!);
    for (const id of ids) {
      const expected = id === 'b{tag}' ? 3 : 1;
      expect({ id, estimated: (await limiter.peek(id, { cost: 0 })).tiers.map((tier) => tier.estimated) }).toEqual({
        id,
        estimated: [expected, expected],
      });
    }
    expect((await keysUnder(redis, limiter.prefix)).sort()).toEqual(ids.map((id) => limiter.keyFor(id)).sort());
  });
});

describe.each(BACKENDS)('token bucket refunds, on $name', (backend) => {
  // 10 units, one back every second.
  const setup = () => setupFor(backend, 'token-bucket', [{ limit: 10, window: '10s' }]);

  test('give back what the decision took, while its units may still be in the bucket', async () => {
    const { clock, limiter } = setup();
    await limiter.check('u', { cost: 4 });
    const decision = await limiter.check('u', { cost: 3 }); // level 7
    clock.set(START + 2_000); // 2 units drained: level 5
    await limiter.refund('u', decision);
    expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(2);
  });

  test('never fuller than full: a refund larger than the level empties the bucket', async () => {
    const { clock, limiter } = setup();
    const decision = await limiter.check('u', { cost: 5 });
    clock.set(START + 4_000); // level 1
    await limiter.refund('u', decision);
    const after = await limiter.peek('u', { cost: 0 });
    expect(after.estimated).toBe(0);
    expect(after.remaining).toBe(10);
  });

  test('nothing once a whole window has passed since the decision (its units have drained)', async () => {
    const { clock, limiter } = setup();
    const decision = await limiter.check('u', { cost: 2 });
    clock.set(START + 10_000);
    await limiter.check('u', { cost: 6 });
    await limiter.refund('u', decision);
    expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(6);
  });
});
