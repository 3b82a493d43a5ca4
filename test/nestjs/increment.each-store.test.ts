/**
 * `RatewardenThrottlerStorage.increment` by the semantics @nestjs/throttler documents, on a
 * MemoryStore, a RedisStore and a RedisStore on Cluster, with the storage's defaults: `ttl` is how
 * long each hit lasts, `limit` the most hits within it, `blockDuration` how long a client past
 * the limit is blocked (`0`: no block, let through again as soon as the oldest hit expires), and
 * the record the guard reads (`totalHits`, `timeToExpire`, `isBlocked`, `timeToBlockExpire`, in
 * seconds, rounded up). Then the throttler's own storage (its published `ThrottlerStorageService`)
 * and this one answer a seeded random sequence of calls alike. Manual clocks throughout.
 */
import { ThrottlerStorageService } from '@nestjs/throttler';
import type { AfterBlock, AlgorithmName } from '../../src';
import { RatewardenThrottlerStorage, type ThrottlerStorageRecord } from '../../src/nestjs';
import { mulberry32 } from '../../support/random';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { storesWithClusterOfTestFile } from '../helpers/stores';

const START = 1_800_000_000_000;
const STORES = storesWithClusterOfTestFile();

describe.each(STORES)('on $name', (kind) => {
  function storage(options: { algorithm?: AlgorithmName; afterBlock?: AfterBlock } = {}) {
    const clock = manualClock(START);
    const made = new RatewardenThrottlerStorage({ store: kind.make(), clock: clock.now, prefix: uniquePrefix('nest'), ...options });
    const at = (ms: number) => clock.set(START + ms);
    return { storage: made, at };
  }

  test('a first hit: counted, its ttl to run, not blocked', async () => {
    const { storage: s } = storage();
    expect(await s.increment('k', 1_000, 1, 0, 'default')).toEqual({
      totalHits: 1,
      timeToExpire: 1,
      isBlocked: false,
      timeToBlockExpire: 0,
    });
  });

  test('each hit lasts ttl from when it was made; blockDuration 0: let through again as soon as the oldest hit expires', async () => {
    const { storage: s, at } = storage();
    const hit = () => s.increment('k', 10_000, 2, 0, 'default');
    expect(await hit()).toEqual({ totalHits: 1, timeToExpire: 10, isBlocked: false, timeToBlockExpire: 0 });
    at(6_000);
    // timeToExpire: until the oldest hit leaves and quota comes back.
    expect(await hit()).toEqual({ totalHits: 2, timeToExpire: 4, isBlocked: false, timeToBlockExpire: 0 });
    at(7_000);
    // Refused, counting nothing: the first hit leaves 3 s later.
    expect(await hit()).toEqual({ totalHits: 3, timeToExpire: 3, isBlocked: true, timeToBlockExpire: 3 });
    at(9_999);
    expect(await hit()).toMatchObject({ isBlocked: true, timeToBlockExpire: 1 });
    at(10_000);
    // The first hit has left; the one of 6 s still counts, leaving room for exactly one.
    expect(await hit()).toEqual({ totalHits: 2, timeToExpire: 6, isBlocked: false, timeToBlockExpire: 0 });
    expect(await hit()).toMatchObject({ isBlocked: true, timeToBlockExpire: 6 });
  });

  test('blockDuration: the denial blocks for exactly that long, counting nothing meanwhile, and the key starts afresh when it ends', async () => {
    const { storage: s, at } = storage();
    const hit = () => s.increment('k', 60_000, 2, 20_000, 'default');
    await hit();
    await hit();
    expect(await hit()).toMatchObject({ totalHits: 3, isBlocked: true, timeToBlockExpire: 20 });
    at(19_999);
    expect(await hit()).toMatchObject({ isBlocked: true, timeToBlockExpire: 1 });
    at(20_000);
    // Both hits would last until 60 s; the block's end forgot them: the whole limit is back.
    expect(await hit()).toMatchObject({ totalHits: 1, isBlocked: false, timeToExpire: 60 });
    expect(await hit()).toMatchObject({ totalHits: 2, isBlocked: false });
    expect(await hit()).toMatchObject({ isBlocked: true, timeToBlockExpire: 20 });
  });

  test("afterBlock: 'keep': the hits from before the block still count when it ends", async () => {
    const { storage: s, at } = storage({ afterBlock: 'keep' });
    const hit = () => s.increment('k', 60_000, 2, 20_000, 'default');
    await hit();
    await hit();
    // The hits hold the key longer than the block: the wait is theirs.
    expect(await hit()).toMatchObject({ isBlocked: true, timeToBlockExpire: 60 });
    at(20_000);
    // Still two hits within the ttl: refused, and blocked again, until the first hit leaves.
    expect(await hit()).toMatchObject({ isBlocked: true, timeToBlockExpire: 40 });
  });

  test("algorithm: 'sliding-window': a hit weighs into the next window too, and the reset is up to two windows away", async () => {
    const { storage: s, at } = storage({ algorithm: 'sliding-window' });
    const hit = () => s.increment('k', 1_000, 1, 0, 'default');
    expect(await hit()).toEqual({ totalHits: 1, timeToExpire: 2, isBlocked: false, timeToBlockExpire: 0 });
    at(1_000);
    // With the default algorithm this request passes: the hit of 0 s lasted 1 s.
    expect(await hit()).toMatchObject({ isBlocked: true, timeToBlockExpire: 1 });
  });

  test('keys, and throttler names on one key, count apart', async () => {
    const { storage: s } = storage();
    expect(await s.increment('a', 1_000, 1, 0, 'short')).toMatchObject({ isBlocked: false });
    expect(await s.increment('b', 1_000, 1, 0, 'short')).toMatchObject({ isBlocked: false });
    expect(await s.increment('a', 1_000, 1, 0, 'long')).toMatchObject({ isBlocked: false });
    expect(await s.increment('a', 1_000, 1, 0, 'short')).toMatchObject({ isBlocked: true });
  });

  test('a limit of 0 refuses every request for a ttl, counting nothing, as the throttler own storage does', async () => {
    const { storage: s } = storage();
    for (let i = 0; i < 2; i++) {
      expect(await s.increment('k', 30_000, 0, 0, 'default')).toMatchObject({ isBlocked: true, timeToBlockExpire: 30 });
    }
    expect(await s.increment('k', 30_000, 2, 0, 'default')).toMatchObject({ isBlocked: false, totalHits: 1 });
  });

  test('one limiter per blockDuration, sharing the store: a block one started holds for the others', async () => {
    // Without a deny cache: each limiter keeps its own, so a denial one of them cached would answer
    // until it ends, unaware of the block another limiter started on the same key.
    const { storage: s } = storage();
    const shared = new RatewardenThrottlerStorage({ store: s.limiter.store, prefix: s.limiter.prefix, denyCacheSize: 0 });
    await shared.increment('k', 1_000, 1, 0, 'short');
    // No block: back when the hit leaves, in 1 s.
    expect(await shared.increment('k', 1_000, 1, 0, 'short')).toMatchObject({ isBlocked: true, timeToBlockExpire: 1 });
    expect(await shared.increment('k', 1_000, 1, 5_000, 'short')).toMatchObject({ isBlocked: true, timeToBlockExpire: 5 });
    // The block is kept in the key: the limiter without a block sees it too.
    expect(await shared.increment('k', 1_000, 1, 0, 'short')).toMatchObject({ isBlocked: true, timeToBlockExpire: 5 });
  });
});

describe.each(STORES)("the throttler's own storage and this one, on $name", (kind) => {
  // The throttler's storage reads Date.now(): both storages read the one clock this test moves.
  let now = START;
  beforeEach(() => jest.spyOn(Date, 'now').mockImplementation(() => now));
  afterEach(() => jest.restoreAllMocks());

  test('answer a seeded random sequence of calls alike: blocked or not, the wait, and the hits counted', async () => {
    const random = mulberry32(0x7e57);
    const counts = { calls: 0, denied: 0, blocks: 0, afterBlock: 0 };
    for (let config = 0; config < 6; config++) {
      const ttl = [1_000, 2_500, 10_000][config % 3];
      const limit = 1 + Math.floor(random() * 4);
      const blockDuration = [0, ttl, 3_000, 15_000][Math.floor(random() * 4)];
      const theirs = new ThrottlerStorageService();
      const ours = new RatewardenThrottlerStorage({ store: kind.make(), clock: () => now, prefix: uniquePrefix('nest-diff') });
      // Per key, the end of the block the throttler's storage holds it in (its totalHits then counts
      // down as hits leave; this storage keeps answering limit + 1).
      const blockedUntil = new Map<string, number>();
      const history: string[] = [];
      try {
        for (let step = 0; step < 150; step++) {
          const r = random();
          const advance = r < 0.3 ? 0 : r < 0.7 ? Math.floor(random() * ttl * 0.4) : r < 0.9 ? ttl - 2 + Math.floor(random() * 4) : ttl * 2;
          now += advance;
          const key = `${config}:${['a', 'b'][Math.floor(random() * 2)]}`;
          history.push(`+${advance} ${key}`);
          const expected = await theirs.increment(key, ttl, limit, blockDuration, 'default');
          const actual = await ours.increment(key, ttl, limit, blockDuration, 'default');
          const inBlock = (blockedUntil.get(key) ?? 0) > now;
          // The throttler's storage answers a timeToBlockExpire only when blocked (else whatever its
          // record holds, such as a negative number): the guard reads it only then.
          const compared = (record: ThrottlerStorageRecord) => ({
            isBlocked: record.isBlocked,
            timeToBlockExpire: record.isBlocked ? record.timeToBlockExpire : 'not read',
            totalHits: inBlock ? 'not compared' : record.totalHits,
          });
          if (JSON.stringify(compared(actual)) !== JSON.stringify(compared(expected))) {
            throw new Error(
              `config ${config} (ttl ${ttl}, limit ${limit}, blockDuration ${blockDuration}), step ${step}: the answers differ\n` +
                `last calls: ${history.slice(-8).join(', ')}\ntheirs: ${JSON.stringify(expected)}\nours:   ${JSON.stringify(actual)}`,
            );
          }
          counts.calls++;
          if (expected.isBlocked) counts.denied++;
          if (expected.isBlocked && blockDuration > 0 && !inBlock) {
            blockedUntil.set(key, now + blockDuration);
            counts.blocks++;
          }
          if (!expected.isBlocked && (blockedUntil.get(key) ?? Infinity) <= now) {
            blockedUntil.delete(key);
            counts.afterBlock++;
          }
        }
      } finally {
        theirs.onApplicationShutdown();
      }
    }
    // The sequence reaches denials, blocks and the first call after a block.
    expect(counts.calls).toBe(900);
    expect(counts.denied).toBeGreaterThan(100);
    expect(counts.blocks).toBeGreaterThan(20);
    expect(counts.afterBlock).toBeGreaterThan(10);
  });
});
