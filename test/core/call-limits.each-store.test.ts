/**
 * Per-call limits: check(id, { limit }), { limit, window } and { limits } on every algorithm,
 * in memory and on Redis. Counts belong to the identifier, not to the limit; invalid per-call
 * values reject with an OptionError and count nothing; a cost above the call's smallest limit
 * is refused, never counted; the deny cache never answers a call under other limits. The last part records what
 * happens to a key's counts when the window of a tier changes between calls.
 */
import type { Redis } from 'ioredis';
import {
  type CheckOptions,
  createLimiter,
  type Limiter,
  MemoryStore,
  OptionError,
  RedisStore,
  type Store,
  type TierOptions,
} from '../../src';
import type { AlgorithmName } from '../../src/algorithms/types';
import { keysUnder, manualClock, redisClient, uniquePrefix } from '../helpers/redis';
import { onRedis, selectStores } from '../helpers/stores';

const ALGORITHMS: AlgorithmName[] = ['sliding-window', 'fixed-window', 'sliding-log'];
const MINUTE = 60_000;
const HOUR = 3_600_000;
// A realistic epoch, at a boundary of every window used here but the day: 2023-11-14T22:00:00Z.
const START = 1_700_000_000_000 - (1_700_000_000_000 % HOUR);

let client: Redis;
onRedis.beforeAll(() => {
  client = redisClient();
});
onRedis.afterAll(() => client.quit());

type BackendName = 'MemoryStore' | 'RedisStore';
const BACKENDS = selectStores<BackendName>(['MemoryStore', 'RedisStore']);

interface Setup {
  clock: ReturnType<typeof manualClock>;
  limiter: Limiter;
  store: Store;
  /** The keys the store holds (Redis: under the limiter's prefix; memory: how many). */
  keys(): Promise<string[] | number>;
}

function setupFor(
  backend: BackendName,
  algorithm: AlgorithmName,
  tiers: { limit: number; window: string } | { limits: readonly TierOptions[] },
  { denyCache = false }: { denyCache?: boolean } = {},
): Setup {
  const clock = manualClock(START);
  const store = backend === 'RedisStore' ? new RedisStore({ client }) : new MemoryStore({ sweepIntervalMs: 0 });
  const limiter = createLimiter({
    store,
    ...tiers,
    algorithm,
    clock: clock.now,
    prefix: uniquePrefix('calls'),
    ...(denyCache ? {} : { denyCacheSize: 0 }),
  });
  const keys = async (): Promise<string[] | number> => {
    if (store instanceof MemoryStore) return store.size;
    return (await keysUnder(client, limiter.prefix)).sort();
  };
  return { clock, limiter, store, keys };
}

const TWO_TIERS = [
  { limit: 3, window: '1s' },
  { limit: 10, window: '1h' },
];

/** Each tier as [limit, window]. */
const shape = (decision: { tiers: readonly { limit: number; window: number }[] }) =>
  decision.tiers.map((tier) => [tier.limit, tier.window]);
const estimates = (decision: { tiers: readonly { estimated: number }[] }) => decision.tiers.map((tier) => tier.estimated);

/** What the store holds for nothing at all: a memory store with no key, or no key under the prefix. */
const EMPTY = { MemoryStore: 0, RedisStore: [] as string[] };

describe.each(BACKENDS)('per-call limits on %s', (backend) => {
  describe.each(ALGORITHMS)('%s', (algorithm) => {
    const setup = (tiers: Parameters<typeof setupFor>[2], options?: { denyCache?: boolean }) =>
      setupFor(backend, algorithm, tiers, options);

    test('with one tier, { limit } keeps the limiter’s window and { window } its limit', async () => {
      const { limiter } = setup({ limit: 10, window: '1m' });
      const decision = await limiter.check('u', { limit: 1000 });
      expect(decision).toMatchObject({ allowed: true, limit: 1000, window: MINUTE, remaining: 999 });
      expect(shape(decision)).toEqual([[1000, MINUTE]]);
      const windowOnly = await limiter.peek('v', { window: '1h' });
      expect(shape(windowOnly)).toEqual([[10, HOUR]]);
    });

    test('counts belong to the identifier: 100 counted under limit 100 leave 900 under limit 1000, and 100 denies again', async () => {
      const { limiter, keys } = setup({ limit: 10, window: '1m' });
      expect(await limiter.check('u', { limit: 100, cost: 50 })).toMatchObject({ allowed: true, remaining: 50 });
      expect(await limiter.check('u', { limit: 100, cost: 50 })).toMatchObject({ allowed: true, remaining: 0, estimated: 100 });
      expect(await limiter.check('u', { limit: 100 })).toMatchObject({ allowed: false, estimated: 100 });
      expect(await limiter.peek('u', { limit: 1000, cost: 0 })).toMatchObject({ estimated: 100, remaining: 900 });
      expect(await limiter.check('u', { limit: 1000 })).toMatchObject({ allowed: true, estimated: 101, remaining: 899 });
      // Back to 100: the 101 counted under 1000 are the identifier's, so it is denied, and so is the limiter's own 10.
      expect(await limiter.check('u', { limit: 100 })).toMatchObject({ allowed: false, estimated: 101, remaining: 0 });
      expect(await limiter.check('u')).toMatchObject({ allowed: false, limit: 10, estimated: 101 });
      // All of it in one key.
      expect(await keys()).toEqual(backend === 'MemoryStore' ? 1 : [limiter.keyFor('u')]);
    });

    test('{ limits } replaces the tiers for that call', async () => {
      const { limiter } = setup({ limit: 10, window: '1m' });
      const limits = [
        { limit: 3, window: '1s' },
        { limit: 50, window: '1h' },
      ];
      for (let i = 1; i <= 3; i++) {
        const decision = await limiter.check('u', { limits });
        expect(decision.allowed).toBe(true);
        expect(shape(decision)).toEqual([
          [3, 1_000],
          [50, HOUR],
        ]);
        expect(estimates(decision)).toEqual([i, i]);
      }
      const denied = await limiter.check('u', { limits });
      expect(denied).toMatchObject({ allowed: false, tier: 0, limit: 3, window: 1_000 });
      expect(estimates(denied)).toEqual([3, 3]);
      // The limiter's own tiers are unchanged for calls without options.
      expect(shape(await limiter.peek('other'))).toEqual([[10, MINUTE]]);
    });

    test('with several tiers, { limit } alone rejects naming limit; { limit, window } and { limits } work', async () => {
      const { limiter, keys } = setup({ limits: TWO_TIERS });
      for (const options of [{ limit: 5 }, { window: '1h' }]) {
        await expect(limiter.check('u', options)).rejects.toBeInstanceOf(OptionError);
        await expect(limiter.check('u', options)).rejects.toMatchObject({
          code: 'SWL_INVALID_LIMIT',
          message: expect.stringMatching(/^limit: /),
        });
        await expect(limiter.peek('u', options)).rejects.toMatchObject({ code: 'SWL_INVALID_LIMIT' });
      }
      expect(await keys()).toEqual(EMPTY[backend]);
      for (let i = 1; i <= 5; i++) {
        const decision = await limiter.check('v', { limit: 5, window: '1h' });
        expect(decision).toMatchObject({ allowed: true, limit: 5, window: HOUR, estimated: i });
        expect(shape(decision)).toEqual([[5, HOUR]]);
      }
      expect(await limiter.check('v', { limit: 5, window: '1h' })).toMatchObject({ allowed: false });
      const three = await limiter.check('w', {
        limits: [
          { limit: 1, window: '1s' },
          { limit: 2, window: '1m' },
          { limit: 3, window: '1h' },
        ],
      });
      expect(shape(three)).toEqual([
        [1, 1_000],
        [2, MINUTE],
        [3, HOUR],
      ]);
    });

    const INVALID: [string, unknown, string, string][] = [
      ['limit 1.5', { limit: 1.5 }, 'limit', 'SWL_INVALID_LIMIT'],
      ['a negative limit', { limit: -3 }, 'limit', 'SWL_INVALID_LIMIT'],
      ['a string limit', { limit: '5' }, 'limit', 'SWL_INVALID_LIMIT'],
      ['limit × window above 2^51', { limit: 2 ** 40, window: '1d' }, 'limit', 'SWL_INVALID_LIMIT'],
      ["window 'soon'", { window: 'soon' }, 'window', 'SWL_INVALID_DURATION'],
      ['window 0', { window: 0 }, 'window', 'SWL_INVALID_DURATION'],
      ["a valid limit with window 'soon'", { limit: 5, window: 'soon' }, 'window', 'SWL_INVALID_DURATION'],
      ['limits []', { limits: [] }, 'limits', 'SWL_INVALID_LIMIT'],
      ['limits not an array', { limits: 'x' }, 'limits', 'SWL_INVALID_LIMIT'],
      ['limits with limit', { limits: [{ limit: 5, window: '1s' }], limit: 5 }, 'limits', 'SWL_CONFLICTING_OPTIONS'],
      ['limits with window', { limits: [{ limit: 5, window: '1s' }], window: '1s' }, 'limits', 'SWL_CONFLICTING_OPTIONS'],
      ['a tier that is not an object', { limits: [null] }, 'limits[0]', 'SWL_INVALID_LIMIT'],
      ['a tier with limit -1', { limits: [{ limit: -1, window: '1s' }] }, 'limits[0].limit', 'SWL_INVALID_LIMIT'],
      [
        'a second tier with a bad window',
        {
          limits: [
            { limit: 5, window: '1s' },
            { limit: 5, window: 'later' },
          ],
        },
        'limits[1].window',
        'SWL_INVALID_DURATION',
      ],
      ['a tier with a misspelt key', { limits: [{ limit: 5, windw: '1s' }] }, 'windw', 'SWL_UNKNOWN_OPTION'],
    ];

    test.each(INVALID)(
      '%s rejects with an OptionError starting with the option’s name, and counts nothing',
      async (_, options, name, code) => {
        const { limiter, keys } = setup({ limit: 10, window: '1m' });
        for (const call of [() => limiter.check('u', options as CheckOptions), () => limiter.peek('u', options as CheckOptions)]) {
          const result = call();
          await expect(result).rejects.toBeInstanceOf(OptionError);
          await expect(result).rejects.toMatchObject({
            code,
            message: expect.stringMatching(new RegExp(`^${name.replace(/[[\].]/g, '\\$&')}: `)),
          });
        }
        expect(await keys()).toEqual(EMPTY[backend]);
        expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(0);
      },
    );

    test('a cost above the call’s smallest limit is never allowed: refused, nothing counted, Retry-After infinite', async () => {
      const { limiter, keys } = setup({ limit: 10, window: '1m' });
      for (const options of [{ cost: 50 }, { cost: 50, limit: 10 }]) {
        expect(await limiter.check('u', options)).toMatchObject({
          allowed: false,
          counted: false,
          cost: 50,
          limit: 10,
          remaining: 10,
          retryAfterMs: Infinity,
          identifier: 'u',
        });
      }
      const limits = [
        { limit: 100, window: '1s' },
        { limit: 20, window: '1h' },
      ];
      // The binding tier is the one the cost can never fit; the other tier's wait is its own.
      const refused = await limiter.check('u', { cost: 50, limits });
      expect(refused).toMatchObject({ allowed: false, counted: false, tier: 1, limit: 20, retryAfterMs: Infinity });
      expect(refused.tiers.map((tier) => tier.retryAfterMs)).toEqual([0, Infinity]);
      expect(await limiter.peek('u', { cost: 50, limits })).toMatchObject({ allowed: false, retryAfterMs: Infinity });
      expect(await keys()).toEqual(EMPTY[backend]);
      expect(await limiter.check('u', { cost: 50, limit: 100 })).toMatchObject({ allowed: true, estimated: 50, remaining: 50 });
      expect(estimates(await limiter.check('v', { cost: 20, limits }))).toEqual([20, 20]);
    });

    test('a limit of 0 refuses every cost above 0 without counting, and the store never sees it', async () => {
      const { limiter, keys } = setup({ limit: 10, window: '1m' });
      const refused = await limiter.check('u', { limit: 0 });
      expect(refused).toMatchObject({ allowed: false, counted: false, limit: 0, remaining: 0, estimated: 0, retryAfterMs: Infinity });
      expect(refused.ratio).toBe(Infinity);
      // A cost of 0 passes a limit of 0: there is nothing to count.
      expect(await limiter.peek('u', { limit: 0, cost: 0 })).toMatchObject({ allowed: true, limit: 0, remaining: 0, retryAfterMs: 0 });
      // Settling the refusal charges nothing: a tier of limit 0 keeps no count.
      await limiter.settle('u', refused, 5);
      expect(await keys()).toEqual(EMPTY[backend]);
      expect(await limiter.check('u')).toMatchObject({ allowed: true, estimated: 1, remaining: 9 });
      // Beside a tier with quota, the refusal binds on the 0 tier and shows the other tier's counts.
      const limits = [
        { limit: 5, window: '1m' },
        { limit: 0, window: '1h' },
      ];
      const mixed = await limiter.check('u', { limits });
      expect(mixed).toMatchObject({ allowed: false, counted: false, tier: 1, limit: 0, window: HOUR, retryAfterMs: Infinity });
      expect(mixed.tiers.map((tier) => [tier.limit, tier.remaining, tier.retryAfterMs])).toEqual([
        [5, 4, 0],
        [0, 0, Infinity],
      ]);
      expect(await limiter.check('u')).toMatchObject({ allowed: true, estimated: 2 });
    });

    test('a limiter whose limit is 0 refuses everything, whatever the cost, and writes nothing', async () => {
      const { limiter, keys } = setup({ limit: 0, window: '1m' });
      for (const cost of [1, 7]) {
        expect(await limiter.check('u', { cost })).toMatchObject({
          allowed: false,
          counted: false,
          cost,
          limit: 0,
          retryAfterMs: Infinity,
        });
      }
      expect(await limiter.check('u', { limit: 3 })).toMatchObject({ allowed: true, limit: 3, remaining: 2 });
      expect(await limiter.check('v')).toMatchObject({ allowed: false });
      expect(await keys()).toEqual(backend === 'MemoryStore' ? 1 : [`${limiter.prefix}:u`]);
    });

    test('the deny cache does not reuse a denial made under other limits', async () => {
      const { limiter } = setup({ limit: 10, window: '1m' }, { denyCache: true });
      await limiter.check('u', { limit: 2 });
      await limiter.check('u', { limit: 2 });
      expect(await limiter.check('u', { limit: 2 })).toMatchObject({ allowed: false, cached: false });
      expect(await limiter.check('u', { limit: 2 })).toMatchObject({ allowed: false, cached: true, limit: 2 });
      expect(await limiter.check('u', { limit: 100 })).toMatchObject({ allowed: true, cached: false, limit: 100, estimated: 3 });
      // Nor a denial under another window.
      expect(await limiter.check('u', { limit: 3 })).toMatchObject({ allowed: false, cached: false });
      expect(await limiter.check('u', { limit: 3 })).toMatchObject({ allowed: false, cached: true });
      expect(await limiter.peek('u', { limit: 3, window: '2m' })).toMatchObject({ cached: false, window: 2 * MINUTE });
    });

    test('a misspelt per-call option rejects with SWL_UNKNOWN_OPTION and counts nothing', async () => {
      const { limiter, keys } = setup({ limit: 10, window: '1m' });
      for (const options of [{ limt: 1000 }, { limts: [{ limit: 1000, window: '1h' }] }, { windw: '1h' }]) {
        await expect(limiter.check('u', options as CheckOptions)).rejects.toMatchObject({
          name: 'OptionError',
          code: 'SWL_UNKNOWN_OPTION',
          message: expect.stringMatching(new RegExp(`^${Object.keys(options)[0]}: `)),
        });
      }
      expect(await keys()).toEqual(EMPTY[backend]);
    });

    test('options that are not an object reject with an OptionError (SWL_INVALID_OPTIONS) and count nothing', async () => {
      const { limiter, keys } = setup({ limit: 10, window: '1m' });
      for (const options of [null, 'x', 42]) {
        await expect(limiter.check('u', options as unknown as CheckOptions)).rejects.toMatchObject({
          name: 'OptionError',
          code: 'SWL_INVALID_OPTIONS',
        });
      }
      expect(await keys()).toEqual(EMPTY[backend]);
    });
  });
});

/**
 * What happens when the window of a tier changes between calls for one key (observed on a
 * realistic epoch, START = 1_699_999_200_000). The sliding and fixed window counters store per
 * tier, by position, the index of its window (floor(now / window)) with the counts: a tier whose
 * window differs from the stored one finds another index and starts from zero, and the first
 * check that counts rewrites the key with the call's tiers only. The sliding log keeps
 * timestamps, so any window sees them, but a counting or denied check trims entries older than
 * its own longest window, and a counting check sets the key's expiry to that window.
 */
describe.each(BACKENDS)('when the window changes for a key, on %s', (backend) => {
  describe.each(['sliding-window', 'fixed-window'] as const)('%s: counters matched by position and window index', (algorithm) => {
    const setup = (tiers: Parameters<typeof setupFor>[2]) => setupFor(backend, algorithm, tiers);

    test('one tier: another window starts from zero; once it counts, the old window’s count is gone as well', async () => {
      const { clock, limiter } = setup({ limit: 10, window: '1m' });
      clock.set(START + 5_000);
      await limiter.check('u', { cost: 4 });
      expect((await limiter.peek('u', { window: '1h', cost: 0 })).estimated).toBe(0);
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(4); // peeks write nothing
      expect(await limiter.check('u', { window: '1h' })).toMatchObject({ allowed: true, window: HOUR, estimated: 1 });
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(0);
      expect((await limiter.peek('u', { window: '1h', cost: 0 })).estimated).toBe(1);
    });

    test('a check under changed windows that is denied writes nothing: the stored counts stay', async () => {
      const { clock, limiter } = setup({ limits: TWO_TIERS });
      clock.set(START + 100);
      await limiter.check('u', { cost: 3 });
      const denied = await limiter.check('u', {
        limits: [
          { limit: 3, window: '1s' },
          { limit: 10, window: '1d' },
        ],
      });
      expect(denied).toMatchObject({ allowed: false, tier: 0 });
      expect(estimates(denied)).toEqual([3, 0]);
      expect(estimates(await limiter.peek('u', { cost: 0 }))).toEqual([3, 3]);
    });

    test('several tiers: a tier whose window changed starts from zero, the others keep their counts', async () => {
      const { clock, limiter } = setup({ limits: TWO_TIERS });
      clock.set(START + 100);
      await limiter.check('u', { cost: 2 });
      const changed = await limiter.check('u', {
        limits: [
          { limit: 3, window: '1s' },
          { limit: 10, window: '1d' },
        ],
      });
      expect(estimates(changed)).toEqual([3, 1]);
      // The 1 h tier's count was replaced by the 1 d tier's.
      expect(estimates(await limiter.peek('u', { cost: 0 }))).toEqual([3, 0]);
    });

    test('tiers are matched by position, not by window: reordering them starts both from zero', async () => {
      const { clock, limiter } = setup({ limits: TWO_TIERS });
      clock.set(START + 100);
      await limiter.check('u', { cost: 2 });
      const reordered = await limiter.check('u', {
        limits: [
          { limit: 10, window: '1h' },
          { limit: 3, window: '1s' },
        ],
      });
      expect(estimates(reordered)).toEqual([1, 1]);
      expect(estimates(await limiter.peek('u', { cost: 0 }))).toEqual([0, 0]);
    });

    test('{ limit, window } on a several-tier limiter is one tier: tier 0 keeps its count, the others’ are dropped once it counts', async () => {
      const { clock, limiter } = setup({ limits: TWO_TIERS });
      clock.set(START + 100);
      await limiter.check('u', { cost: 2 });
      expect(await limiter.check('u', { limit: 3, window: '1s' })).toMatchObject({ allowed: true, estimated: 3 });
      expect(estimates(await limiter.peek('u', { cost: 0 }))).toEqual([3, 0]);
      // And the key now expires as the one-second tier's would.
      if (backend === 'RedisStore') {
        const ttl = await client.pttl(limiter.keyFor('u'));
        expect(ttl).toBeGreaterThan(0);
        expect(ttl).toBeLessThanOrEqual(algorithm === 'sliding-window' ? 2_000 : 900);
      } else {
        const memory = setupStore(limiter);
        memory.sweep(START + 100 + (algorithm === 'sliding-window' ? 2_000 : 900));
        expect(memory.size).toBe(0);
      }
    });
  });

  describe('sliding-log: timestamps kept, trimmed to the call’s longest window', () => {
    const setup = (tiers: Parameters<typeof setupFor>[2]) => setupFor(backend, 'sliding-log', tiers);

    test('a longer window sees the entries counted under a shorter one', async () => {
      const { clock, limiter } = setup({ limit: 10, window: '1m' });
      await limiter.check('u', { cost: 3 });
      clock.set(START + 30_000);
      expect(await limiter.check('u', { window: '1h' })).toMatchObject({ allowed: true, window: HOUR, estimated: 4 });
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(4);
    });

    test('a counting check with a shorter longest window trims older entries for every window', async () => {
      const { clock, limiter } = setup({ limit: 10, window: '1h' });
      await limiter.check('u', { cost: 3 });
      clock.set(START + 2 * MINUTE);
      expect((await limiter.peek('u', { window: '1m', cost: 0 })).estimated).toBe(0);
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(3); // peeks trim nothing
      expect(await limiter.check('u', { window: '1m' })).toMatchObject({ allowed: true, estimated: 1 });
      // The three counted at START were within the hour, and are gone.
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(1);
    });

    test('a denied check with a shorter window trims too', async () => {
      const { clock, limiter } = setup({ limit: 10, window: '1h' });
      await limiter.check('u', { cost: 3 });
      clock.set(START + 90_000);
      await limiter.check('u');
      clock.set(START + 2 * MINUTE);
      expect(await limiter.check('u', { limit: 1, window: '1m' })).toMatchObject({ allowed: false, estimated: 1 });
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(1);
    });

    test('a counting check sets the key’s expiry to its own longest window', async () => {
      const { clock, limiter } = setup({ limit: 10, window: '1h' });
      await limiter.check('u', { cost: 3 });
      clock.set(START + 2 * MINUTE);
      await limiter.check('u', { window: '1m' });
      if (backend === 'RedisStore') {
        const ttl = await client.pttl(limiter.keyFor('u'));
        expect(ttl).toBeGreaterThan(0);
        expect(ttl).toBeLessThanOrEqual(MINUTE);
      } else {
        // One minute later the entry of START + 2 min, still inside the hour, has expired with the key.
        clock.set(START + 3 * MINUTE - 1);
        expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(1);
        clock.set(START + 3 * MINUTE);
        expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(0);
      }
    });
  });
});

/** The MemoryStore of a limiter set up on the MemoryStore backend. */
function setupStore(limiter: Limiter): MemoryStore {
  expect(limiter.store).toBeInstanceOf(MemoryStore);
  return limiter.store as MemoryStore;
}
