/**
 * `RatewardenThrottlerStorage.increment` on its own, as the guard calls it: the record it answers
 * (units: seconds out, milliseconds in), a denial that counts nothing, invalid durations, options
 * checked at construction, and a failing store with `failMode` open and closed. MemoryStore, a
 * manual clock; the storage under the guard in real Nest apps: throttler-storage.test.ts.
 */
import { MemoryStore, OptionError, RateLimitTimeoutError, type Store } from '../../src';
import { RatewardenThrottlerStorage } from '../../src/nestjs';
import { captureWarnings } from '../helpers/warnings';

const START = 1_800_000_000_000;

function storage(options: ConstructorParameters<typeof RatewardenThrottlerStorage>[0] = {}) {
  let now = START;
  const made = new RatewardenThrottlerStorage({ store: new MemoryStore({ sweepIntervalMs: 0 }), clock: () => now, ...options });
  return { storage: made, advance: (ms: number) => (now += ms) };
}

const failing: Store = {
  needsTimeout: false,
  check: () => Promise.reject(new RateLimitTimeoutError('late')),
  settle: () => Promise.reject(new Error('down')),
  reset: () => Promise.reject(new Error('down')),
};

describe('increment', () => {
  test('allowed: totalHits as counted, seconds until quota grows back; denied: blocked, the exact wait, nothing counted', async () => {
    const { storage: s, advance } = storage();
    expect(await s.increment('k', 10_000, 2, 0, 'default')).toEqual({
      totalHits: 1,
      timeToExpire: 20,
      isBlocked: false,
      timeToBlockExpire: 0,
    });
    expect(await s.increment('k', 10_000, 2, 0, 'default')).toMatchObject({ totalHits: 2, isBlocked: false });
    advance(2_500);
    expect(await s.increment('k', 10_000, 2, 0, 'default')).toEqual({
      totalHits: 3,
      timeToExpire: 13,
      isBlocked: true,
      timeToBlockExpire: 13,
    });
    expect((await s.limiter.peek('default:k', { limit: 2, window: 10_000, cost: 0 })).estimated).toBe(2);
  });

  test('throttler names count apart; one limiter per blockDuration, sharing the store', async () => {
    // Without a deny cache: each limiter keeps its own, so a denial one of them cached (the 2 s below)
    // would answer until it ends, unaware of the block another limiter started on the same key.
    const { storage: s } = storage({ denyCacheSize: 0 });
    await s.increment('k', 1_000, 1, 0, 'short');
    expect(await s.increment('k', 1_000, 1, 0, 'long')).toMatchObject({ isBlocked: false });
    // The window alone would let the next request in 2 s; the block holds it for 5.
    expect(await s.increment('k', 1_000, 1, 0, 'short')).toMatchObject({ isBlocked: true, timeToBlockExpire: 2 });
    expect(await s.increment('k', 1_000, 1, 5_000, 'short')).toMatchObject({ isBlocked: true, timeToBlockExpire: 5 });
    // The block is kept in the key: the limiter without a block sees it too.
    expect(await s.increment('k', 1_000, 1, 0, 'short')).toMatchObject({ isBlocked: true, timeToBlockExpire: 5 });
  });

  test.each([
    ['ttl', [0, 1, 0]],
    ['ttl', [1.5, 1, 0]],
    ['blockDuration', [1_000, 1, -1]],
    ['blockDuration', [1_000, 1, Number.NaN]],
  ])('an invalid %s rejects with an OptionError naming it and the throttler', async (option, [ttl, limit, block]) => {
    const { storage: s } = storage();
    await expect(s.increment('k', ttl, limit, block, 'short')).rejects.toThrow(new RegExp(`^${option}: the "short" throttler's ${option}`));
  });

  test('an invalid limit rejects with the core OptionError', async () => {
    const { storage: s } = storage();
    await expect(s.increment('k', 1_000, -1, 0, 'default')).rejects.toBeInstanceOf(OptionError);
  });

  test('a limit of 0 blocks every request for a ttl, counting nothing, as the default storage does', async () => {
    const { storage: s } = storage();
    for (let i = 0; i < 2; i++) {
      expect(await s.increment('k', 30_000, 0, 0, 'default')).toMatchObject({ isBlocked: true, timeToBlockExpire: 30 });
    }
    expect(await s.increment('k', 30_000, 2, 0, 'default')).toMatchObject({ isBlocked: false, totalHits: 1 });
  });
});

describe('a ttl in the wrong unit', () => {
  const warnings = captureWarnings();

  test('a ttl under a second warns SWL_SHORT_DURATION once per throttler and value, as window: 60 does', async () => {
    const { storage: s } = storage();
    for (let i = 0; i < 3; i++) await s.increment('k', 60, 5, 0, 'short');
    expect(warnings.codes()).toEqual(['SWL_SHORT_DURATION']);
    expect(warnings.list[0].message).toMatch(/^ttl: the "short" throttler's ttl 60 is read as 60 ms.*seconds\(60\).*60000/);
    await s.increment('k', 60, 5, 0, 'other');
    await s.increment('k', 1_000, 5, 0, 'long');
    expect(warnings.codes()).toEqual(['SWL_SHORT_DURATION', 'SWL_SHORT_DURATION']);
  });
});

describe('options', () => {
  test('checked at construction', () => {
    expect(() => new RatewardenThrottlerStorage({ limit: 5 } as never)).toThrow(expect.objectContaining({ code: 'SWL_UNKNOWN_OPTION' }));
    expect(() => new RatewardenThrottlerStorage({ failMode: 'shut' as never })).toThrow(/^failMode: must be one of/);
    expect(() => new RatewardenThrottlerStorage({ prefix: 'a b' })).toThrow(expect.objectContaining({ code: 'SWL_INVALID_PREFIX' }));
    expect(() => new RatewardenThrottlerStorage({ onError: 1 as never })).toThrow(/^onError: must be a function/);
    expect(new RatewardenThrottlerStorage().limiter.prefix).toBe('throttler');
  });
});

describe('a failing store', () => {
  const warnings = captureWarnings();

  test("failMode 'open' (default): let through with a fresh count, onError hears it", async () => {
    const errors: unknown[] = [];
    const s = new RatewardenThrottlerStorage({ store: failing, onError: (error, key) => errors.push([error, key]) });
    expect(await s.increment('k', 1_000, 1, 0, 'default')).toEqual({
      totalHits: 0,
      timeToExpire: 0,
      isBlocked: false,
      timeToBlockExpire: 0,
    });
    expect(errors).toEqual([[expect.any(RateLimitTimeoutError), 'k']]);
  });

  test("failMode 'open' without onError: the SWL_STORE_FAILING warning", async () => {
    const s = new RatewardenThrottlerStorage({ store: failing });
    expect(await s.increment('k', 1_000, 1, 0, 'default')).toMatchObject({ isBlocked: false });
    expect(warnings.codes()).toEqual(['SWL_STORE_FAILING']);
  });

  test("failMode 'closed': increment rejects with the store's error", async () => {
    const s = new RatewardenThrottlerStorage({ store: failing, failMode: 'closed' });
    await expect(s.increment('k', 1_000, 1, 0, 'default')).rejects.toBeInstanceOf(RateLimitTimeoutError);
    expect(warnings.codes()).toEqual([]);
  });
});
