/**
 * Expiry: the Redis key's PTTL per algorithm (2 x window for the sliding window, in
 * milliseconds so sub-second windows work, kept by later writes in the same windows), and the
 * state is gone after it, both in the logic (injected clock) and in real Redis (a real 100 ms
 * window and a short sleep).
 * The RedisStore runs on ioredis and on node-redis; an ioredis client reads the keys.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Redis } from 'ioredis';
import { createLimiter, MemoryStore, RedisStore, type Store } from '../../src';
import type { AlgorithmName } from '../../src/algorithms/types';
import { closeClient, manualClock, REDIS_CLIENTS, redisClient, type StoreClient, uniquePrefix } from '../helpers/redis';
import { onRedis, redisStoresPerClient, selectStores, withoutRedis } from '../helpers/stores';

let client: Redis;
onRedis.beforeAll(() => {
  client = redisClient();
});
onRedis.afterAll(() => client.quit());

const HOUR = 3_600_000;
const START = 1_700_000_000_000 - (1_700_000_000_000 % HOUR); // a boundary of every window used
/** Real time between the script setting PX and our PTTL: generous for a loaded machine. */
const SLACK = 250;

/** The client the RedisStores of the current `describe.each(REDIS_CLIENTS)` block run on. */
let storeClient: StoreClient;

function limiterOnStoreClient(algorithm: AlgorithmName, limits: { limit: number; window: number | string }[], clock = manualClock(START)) {
  const limiter = createLimiter({
    store: new RedisStore({ client: storeClient }),
    limits,
    algorithm,
    clock: clock.now,
    prefix: uniquePrefix('ttl'),
    denyCacheSize: 0,
  });
  return { clock, limiter };
}

/** Expects `key` to expire in `ms` at most, and in no less than `ms - SLACK` (the time the test took). */
async function expectExpiresIn(key: string, ms: number): Promise<void> {
  const ttl = await client.pttl(key);
  expect(ttl).toBeLessThanOrEqual(ms);
  expect(ttl).toBeGreaterThan(ms - SLACK);
}

onRedis.describe.each(REDIS_CLIENTS)('%s', (_name, kind) => {
  beforeAll(async () => {
    storeClient = await kind.standalone();
  });
  afterAll(() => closeClient(storeClient));

  describe('PTTL of the real key', () => {
    test('sliding window: 2 x window', async () => {
      const { limiter } = limiterOnStoreClient('sliding-window', [{ limit: 10, window: '1m' }]);
      await limiter.check('a');
      await expectExpiresIn(limiter.keyFor('a'), 120_000);
    });

    test('sliding window with tiers: 2 x the longest window', async () => {
      const { limiter } = limiterOnStoreClient('sliding-window', [
        { limit: 3, window: '1s' },
        { limit: 50, window: '1h' },
        { limit: 10, window: '1m' },
      ]);
      await limiter.check('a');
      await expectExpiresIn(limiter.keyFor('a'), 2 * HOUR);
    });

    test('sliding window, 200 ms window: a millisecond expiry of 400 ms, not rounded to seconds', async () => {
      const { limiter } = limiterOnStoreClient('sliding-window', [{ limit: 10, window: '200ms' }]);
      await limiter.check('a');
      await expectExpiresIn(limiter.keyFor('a'), 400);
    });

    test('fixed window: until the end of the current window', async () => {
      const { clock, limiter } = limiterOnStoreClient('fixed-window', [{ limit: 10, window: '1m' }]);
      clock.set(START + 15_000);
      await limiter.check('a');
      await expectExpiresIn(limiter.keyFor('a'), 45_000);
    });

    test('fixed window with tiers: until the latest end among the tiers', async () => {
      const { clock, limiter } = limiterOnStoreClient('fixed-window', [
        { limit: 3, window: '1s' },
        { limit: 10, window: '1m' },
      ]);
      clock.set(START + 50_500);
      await limiter.check('a');
      await expectExpiresIn(limiter.keyFor('a'), 9_500);
    });

    test('sliding log: the longest window', async () => {
      const { limiter } = limiterOnStoreClient('sliding-log', [
        { limit: 3, window: '1s' },
        { limit: 10, window: '1m' },
      ]);
      await limiter.check('a');
      await expectExpiresIn(limiter.keyFor('a'), 60_000);
    });

    test.each<[AlgorithmName, number]>([
      ['sliding-window', 120_000],
      ['fixed-window', 60_000 - 1_100],
    ])('%s: a count in the same windows keeps the expiry, one in a new window of any tier sets it', async (algorithm, expiry) => {
      const { clock, limiter } = limiterOnStoreClient(algorithm, [
        { limit: 10, window: '1s' },
        { limit: 100, window: '1m' },
      ]);
      const key = limiter.keyFor('a');
      clock.set(START + 100);
      await limiter.check('a');
      await client.pexpire(key, 5 * HOUR); // a marker: a write that sets the expiry replaces it
      clock.set(START + 900);
      expect((await limiter.check('a')).counted).toBe(true);
      expect(await client.pttl(key)).toBeGreaterThan(5 * HOUR - SLACK);
      clock.set(START + 1_100); // the 1 s tier's next window
      expect((await limiter.check('a')).counted).toBe(true);
      await expectExpiresIn(key, expiry);
    });

    test.each<AlgorithmName>(['sliding-window', 'fixed-window', 'sliding-log'])(
      '%s: a peek or a denied check creates no key and sets no expiry',
      async (algorithm) => {
        const { limiter } = limiterOnStoreClient(algorithm, [{ limit: 1, window: '1m' }]);
        await limiter.peek('fresh');
        expect(await client.exists(limiter.keyFor('fresh'))).toBe(0);
        await limiter.check('fresh', { cost: 0 });
        expect(await client.exists(limiter.keyFor('fresh'))).toBe(0);
        await limiter.check('a');
        await client.pexpire(limiter.keyFor('a'), 5 * HOUR); // a marker: only a counting write may change it
        expect((await limiter.check('a')).allowed).toBe(false);
        await limiter.peek('a');
        expect(await client.pttl(limiter.keyFor('a'))).toBeGreaterThan(5 * HOUR - SLACK);
      },
    );
  });

  describe('real expiry in Redis (the one place with a real sleep)', () => {
    test("100 ms windows: every algorithm's key is gone from Redis after 2 x window", async () => {
      const limiters = (['sliding-window', 'fixed-window', 'sliding-log'] as const).map((algorithm) =>
        createLimiter({
          store: new RedisStore({ client: storeClient }),
          limit: 3,
          window: '100ms',
          algorithm,
          prefix: uniquePrefix('real'),
        }),
      );
      await Promise.all(limiters.map((limiter) => limiter.check('a')));
      for (const limiter of limiters) {
        const ttl = await client.pttl(limiter.keyFor('a'));
        // Never persistent (-1). The fixed window's key may already be gone (-2), or within its last
        // millisecond (0): it expires at the end of the current 100 ms window. The others are still there.
        if (limiter.algorithm === 'fixed-window' && (ttl === -2 || ttl === 0)) continue;
        expect(ttl).toBeGreaterThan(0);
        expect(ttl).toBeLessThanOrEqual(limiter.algorithm === 'sliding-window' ? 200 : 100);
      }
      await sleep(260);
      for (const limiter of limiters) expect(await client.exists(limiter.keyFor('a'))).toBe(0);
    });
  });
});

const STORES = selectStores<[string, () => Store]>([
  ...redisStoresPerClient(),
  ['MemoryStore', () => new MemoryStore({ sweepIntervalMs: 0 })],
]);

describe.each(STORES)('after 2 x window the sliding window state is gone (injected clock) on %s', (_name, makeStore) => {
  test.each([200, 60_000])('window %d ms: counted 1 ms before, forgotten at 2 x window', async (window) => {
    const clock = manualClock(START);
    const limiter = createLimiter({
      store: makeStore(),
      limit: 5,
      window: `${window}ms`,
      clock: clock.now,
      prefix: uniquePrefix('gone'),
      denyCacheSize: 0,
    });
    expect((await limiter.check('a', { cost: 5 })).allowed).toBe(true);
    clock.set(START + 2 * window - 1);
    const almost = await limiter.peek('a', { cost: 5 });
    expect(almost.estimated).toBeCloseTo(5 / window, 12); // 1 ms of the previous window's weight left
    expect(almost.allowed).toBe(false);
    clock.set(START + 2 * window);
    const gone = await limiter.peek('a', { cost: 5 });
    expect(gone.estimated).toBe(0);
    expect(gone.allowed).toBe(true);
  });
});

withoutRedis.describe('MemoryStore expiry', () => {
  test('sliding window: a count later in the same window keeps the expiry its first count set', async () => {
    const clock = manualClock(START);
    const store = new MemoryStore({ sweepIntervalMs: 0 });
    const limiter = createLimiter({ store, limit: 5, window: 1_000, clock: clock.now, prefix: uniquePrefix('mem'), denyCacheSize: 0 });
    await limiter.check('a');
    clock.set(START + 999);
    await limiter.check('a');
    store.sweep(START + 1_999);
    expect(store.size).toBe(1);
    clock.set(START + 1_999);
    expect((await limiter.peek('a')).estimated).toBeCloseTo(2 / 1_000, 12); // both counts, 1 ms of weight left
    store.sweep(START + 2_000);
    expect(store.size).toBe(0);
  });

  test('an expired entry is dropped on access and by sweep()', async () => {
    const clock = manualClock(START);
    const store = new MemoryStore({ sweepIntervalMs: 0 });
    const limiter = createLimiter({ store, limit: 5, window: 1_000, clock: clock.now, prefix: uniquePrefix('mem'), denyCacheSize: 0 });
    await limiter.check('a');
    await limiter.check('b');
    expect(store.size).toBe(2);
    store.sweep(START + 1_999);
    expect(store.size).toBe(2);
    store.sweep(START + 2_000);
    expect(store.size).toBe(0);
    await limiter.check('c');
    clock.set(START + 5_000);
    await limiter.peek('c');
    expect(store.size).toBe(0);
  });
});
