/**
 * `RatewardenThrottlerStorage` on its own: invalid durations from the guard, options checked at
 * construction and its defaults, the seconds habit (`ttl: 60`), and a failing store with
 * `failMode` open and closed. MemoryStore, a manual clock. What `increment` answers, on every
 * store: increment.each-store.test.ts; the storage under the guard in real Nest apps:
 * throttler.each-store.test.ts.
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
    expect(() => new RatewardenThrottlerStorage({ afterBlock: 'never' as never })).toThrow(/^afterBlock: must be one of/);
    expect(() => new RatewardenThrottlerStorage({ algorithm: 'leaky' as never })).toThrow(/^algorithm: must be one of/);
  });

  test("the defaults: the throttler's own counting (a sliding log, each hit lasting ttl), a block's end starting afresh", async () => {
    const { storage: s } = storage();
    expect(s.limiter).toMatchObject({ prefix: 'throttler', algorithm: 'sliding-log', blockFor: 0 });
    // A limiter with a block is made on the first call with a blockDuration, with afterBlock 'reset'.
    expect(await s.increment('k', 1_000, 1, 0, 'default')).toMatchObject({ isBlocked: false });
    expect(await s.increment('k', 1_000, 1, 2_000, 'default')).toMatchObject({ isBlocked: true, timeToBlockExpire: 2 });
    const sliding = new RatewardenThrottlerStorage({ algorithm: 'sliding-window', afterBlock: 'keep' });
    expect(sliding.limiter.algorithm).toBe('sliding-window');
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
