/**
 * Option validation: every mistake throws a TypeError whose message starts with the
 * option's name, when the limiter (or store) is constructed, or when check() is called
 * for a bad cost.
 */
import type { Redis } from 'ioredis';
import { createLimiter, type LimiterOptions, MemoryStore, RedisStore } from '../../src';
import { Warnings } from '../../src/errors';
import { parseDuration } from '../../src/validate';
import { redisClient } from '../helpers/redis';
import { onRedis, withoutRedis } from '../helpers/stores';
import { expectOptionError, thrownBy } from '../helpers/thrown';

let client: Redis;
onRedis.beforeAll(() => {
  client = redisClient();
});
onRedis.afterAll(() => client.quit());

/** Asserts `act` throws an OptionError (a TypeError) naming `option`. */
function expectThrowsNaming(act: () => unknown, option: string): void {
  expectOptionError(thrownBy(act), option);
}

withoutRedis.describe('createLimiter options', () => {
  test.each([-1, 1.5, NaN, Infinity, '10', 2 ** 60, true])('limit %p is rejected, naming limit', (limit) => {
    expectThrowsNaming(() => createLimiter({ limit: limit as number }), 'limit');
  });

  test.each(['1x', -5, 0, '1.5ms', '', 'ms', '1', '-1s', '1 fortnight', 0.5, NaN, Infinity, {}, '0s', '0.0001s'])(
    'window %p is rejected, naming window',
    (window) => {
      expectThrowsNaming(() => createLimiter({ limit: 10, window: window as string }), 'window');
    },
  );

  test.each([
    ['500ms', 500],
    ['1s', 1_000],
    ['1m', 60_000],
    ['1h', 3_600_000],
    ['1d', 86_400_000],
    ['1.5h', 5_400_000],
    ['0.5s', 500],
    ['2.01s', 2_010],
    ['4.03s', 4_030],
    ['1.001s', 1_001],
    ['16.01s', 16_010],
    ['8.05m', 483_000],
    [' 10 s ', 10_000],
    [2_500, 2_500],
  ] as const)('window %p parses to %d ms', (window, ms) => {
    expect(parseDuration(window, 'window', new Warnings())).toBe(ms);
    expect(createLimiter({ limit: 10, window }).tiers).toEqual([{ limit: 10, window: ms }]);
  });

  test('durations with more precision than a millisecond are rejected, however they are written', () => {
    for (const text of ['1.0005s', '0.0000001h', '1.5ms', '2.0001s'])
      expectThrowsNaming(() => parseDuration(text, 'window', new Warnings()), 'window');
  });

  test('defaults: 100 per minute, sliding window, prefix rl', () => {
    const limiter = createLimiter();
    expect(limiter.tiers).toEqual([{ limit: 100, window: 60_000 }]);
    expect(limiter.algorithm).toBe('sliding-window');
    expect(limiter.prefix).toBe('rl');
    expect(limiter.timeoutMs).toBe(500);
  });

  test('unknown keys are rejected, naming the key', () => {
    expectThrowsNaming(() => createLimiter({ limit: 10, windowMs: 1000 } as LimiterOptions), 'windowMs');
    expectThrowsNaming(() => createLimiter({ limit: 10, max: 5 } as LimiterOptions), 'max');
    expectThrowsNaming(() => createLimiter({ limits: [{ limit: 1, window: '1s', burst: 2 }] } as unknown as LimiterOptions), 'burst');
  });

  test('limits together with limit or window is rejected, naming limits', () => {
    expectThrowsNaming(() => createLimiter({ limit: 10, limits: [{ limit: 5, window: '1s' }] }), 'limits');
    expectThrowsNaming(() => createLimiter({ window: '1s', limits: [{ limit: 5, window: '1s' }] }), 'limits');
  });

  test('bad limits are rejected, naming the tier', () => {
    expectThrowsNaming(() => createLimiter({ limits: [] }), 'limits');
    expectThrowsNaming(() => createLimiter({ limits: 'x' as unknown as [] }), 'limits');
    expectThrowsNaming(() => createLimiter({ limits: [null as unknown as { limit: number; window: string }] }), 'limits[0]');
    expectThrowsNaming(
      () =>
        createLimiter({
          limits: [
            { limit: 5, window: '1s' },
            { limit: 2.5, window: '1h' },
          ],
        }),
      'limits[1].limit',
    );
    expectThrowsNaming(() => createLimiter({ limits: [{ limit: 5, window: '1x' }] }), 'limits[0].window');
  });

  test('limit x window beyond exact double arithmetic is rejected', () => {
    expectThrowsNaming(() => createLimiter({ limit: 2 ** 40, window: '1d' }), 'limit');
  });

  test.each(['leaky-bucket', 'slidingWindow', '', 42])('algorithm %p is rejected, naming algorithm', (algorithm) => {
    expectThrowsNaming(() => createLimiter({ algorithm: algorithm as 'fixed-window' }), 'algorithm');
  });

  test.each(['', 'a b', 'x{y}', '{', 'tab\there', 'new\nline', 42])('prefix %p is rejected, naming prefix', (prefix) => {
    expectThrowsNaming(() => createLimiter({ prefix: prefix as string }), 'prefix');
  });

  test('other options are validated, naming themselves', () => {
    expectThrowsNaming(() => createLimiter({ clock: 5 as unknown as () => number }), 'clock');
    expectThrowsNaming(() => createLimiter({ timeoutMs: 0 }), 'timeoutMs');
    expectThrowsNaming(() => createLimiter({ timeoutMs: 1.5 }), 'timeoutMs');
    expectThrowsNaming(() => createLimiter({ denyCacheSize: -1 }), 'denyCacheSize');
    expectThrowsNaming(() => createLimiter({ store: {} as MemoryStore }), 'store');
    expectThrowsNaming(() => createLimiter('fast' as unknown as LimiterOptions), 'options');
  });
});

withoutRedis.describe('cost in check() and peek()', () => {
  const limiter = createLimiter({
    limits: [
      { limit: 5, window: '1s' },
      { limit: 10, window: '1m' },
    ],
    denyCacheSize: 0,
  });

  test.each([-1, 1.5, NaN, Infinity, '1', null])('cost %p is rejected with a TypeError naming cost', async (cost) => {
    await expect(limiter.check('a', { cost: cost as number })).rejects.toThrow(TypeError);
    await expect(limiter.check('a', { cost: cost as number })).rejects.toThrow(/^cost: must be a non-negative integer/);
    await expect(limiter.peek('a', { cost: cost as number })).rejects.toThrow(/^cost:/);
  });

  test('costs 0 to the smallest limit are accepted; a larger cost is refused and counts nothing', async () => {
    expect(await limiter.check('b', { cost: 6 })).toMatchObject({ allowed: false, counted: false, retryAfterMs: Infinity });
    expect(await limiter.check('b', { cost: 9 })).toMatchObject({ allowed: false, counted: false, retryAfterMs: Infinity });
    expect((await limiter.peek('b', { cost: 0 })).estimated).toBe(0);
    expect((await limiter.check('b', { cost: 0 })).allowed).toBe(true);
    expect((await limiter.check('b', { cost: 5 })).allowed).toBe(true);
    expect((await limiter.peek('b', { cost: 0 })).estimated).toBe(5);
  });

  test('a non-string identifier is rejected, naming identifier', async () => {
    await expect(limiter.check(42 as unknown as string)).rejects.toThrow(/^identifier:/);
    await expect(limiter.reset(undefined as unknown as string)).rejects.toThrow(/^identifier:/);
  });
});

describe('store options', () => {
  onRedis.test('RedisStore rejects unknown keys and a missing or wrong client, naming them', () => {
    expectThrowsNaming(() => new RedisStore({ client, prefix: 'x' } as unknown as { client: Redis }), 'prefix');
    expectThrowsNaming(() => new RedisStore({ client, keyPrefix: 'x' } as unknown as { client: Redis }), 'keyPrefix');
    expectThrowsNaming(() => new RedisStore({} as { client: Redis }), 'client');
    expectThrowsNaming(() => new RedisStore({ client: { get() {} } } as unknown as { client: Redis }), 'client');
    expect(() => new RedisStore(null as unknown as { client: Redis })).toThrow(TypeError);
  });

  withoutRedis.test('MemoryStore rejects unknown keys and bad numbers, naming them', () => {
    expectThrowsNaming(() => new MemoryStore({ max: 10 } as unknown as { maxKeys: number }), 'max');
    expectThrowsNaming(() => new MemoryStore({ maxKeys: 0 }), 'maxKeys');
    expectThrowsNaming(() => new MemoryStore({ maxKeys: 1.5 }), 'maxKeys');
    expectThrowsNaming(() => new MemoryStore({ sweepIntervalMs: -1 }), 'sweepIntervalMs');
    expect(() => new MemoryStore(null as unknown as object)).toThrow(TypeError);
    const store = new MemoryStore({ maxKeys: 5, sweepIntervalMs: 0 });
    expect(store.maxKeys).toBe(5);
    store.shutdown();
  });
});

withoutRedis.describe('null is not a default', () => {
  test.each([
    ['limit', { limit: null }],
    ['window', { window: null }],
    ['algorithm', { algorithm: null }],
    ['prefix', { prefix: null }],
  ])('%s: null throws a TypeError naming the option', (name, options) => {
    expect(() => createLimiter(options as never)).toThrow(new RegExp(`^${name}:`));
  });
});
