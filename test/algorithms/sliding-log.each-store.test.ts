/**
 * Sliding log specifics: one sorted-set member per counted unit, unique even within one
 * millisecond, trimmed to the longest window.
 */
import type { Redis } from 'ioredis';
import { createLimiter, RedisStore } from '../../src';
import { manualClock, redisClient, uniquePrefix } from '../helpers/redis';
import { onRedis, storesOfTestFile } from '../helpers/stores';

let client: Redis;
onRedis.beforeAll(() => {
  client = redisClient();
});
onRedis.afterAll(() => client.quit());

const START = 1_700_000_000_000;

function logLimiter(limits: { limit: number; window: number }[], clock = manualClock(START)) {
  const limiter = createLimiter({
    store: new RedisStore({ client }),
    limits,
    algorithm: 'sliding-log',
    clock: clock.now,
    prefix: uniquePrefix('log'),
    denyCacheSize: 0,
  });
  return { clock, limiter, key: (id: string) => limiter.keyFor(id) };
}

/** The counted units: members with a time score (the sequence member `#` has a negative score). */
async function units(key: string): Promise<{ member: string; score: number }[]> {
  const flat = await client.zrangebyscore(key, 0, '+inf', 'WITHSCORES');
  const result: { member: string; score: number }[] = [];
  for (let i = 0; i < flat.length; i += 2) result.push({ member: flat[i], score: Number(flat[i + 1]) });
  return result;
}

onRedis.describe('sliding log in Redis', () => {
  test('many requests in the same millisecond are distinct members, all counted', async () => {
    const { limiter, key } = logLimiter([{ limit: 100, window: 60_000 }]);
    for (let i = 0; i < 60; i++) expect((await limiter.check('a')).allowed).toBe(true);
    const counted = await units(key('a'));
    expect(counted).toHaveLength(60);
    expect(new Set(counted.map((unit) => unit.member)).size).toBe(60);
    for (const unit of counted) {
      expect(unit.score).toBe(START);
      expect(unit.member).toMatch(new RegExp(`^${START}:\\d+$`));
    }
    // ZCARD counts every unit, plus the one sequence member.
    expect(await client.zcard(key('a'))).toBe(61);
    expect((await limiter.peek('a', { cost: 0 })).estimated).toBe(60);
  });

  test('parallel checks on the Redis clock: every unit is its own member', async () => {
    const limiter = createLimiter({
      store: new RedisStore({ client }),
      limit: 1_000,
      window: '1m',
      algorithm: 'sliding-log',
      prefix: uniquePrefix('log'),
    });
    const decisions = await Promise.all(Array.from({ length: 150 }, () => limiter.check('p')));
    expect(decisions.every((decision) => decision.allowed)).toBe(true);
    const counted = await units(limiter.keyFor('p'));
    expect(counted).toHaveLength(150);
    expect(new Set(counted.map((unit) => unit.member)).size).toBe(150);
    // Fewer distinct milliseconds than units: some shared a millisecond and were still kept apart.
    expect(new Set(counted.map((unit) => unit.score)).size).toBeLessThan(150);
  });

  test('cost n adds n members, cost 0 none; a large cost spans several ZADD batches', async () => {
    const { clock, limiter, key } = logLimiter([{ limit: 1_500, window: 60_000 }]);
    await limiter.check('a', { cost: 7 });
    expect(await units(key('a'))).toHaveLength(7);
    await limiter.check('a', { cost: 0 });
    expect(await units(key('a'))).toHaveLength(7);
    clock.advance(1);
    const big = await limiter.check('a', { cost: 1_234 });
    expect(big.allowed).toBe(true);
    expect(big.estimated).toBe(1_241);
    const counted = await units(key('a'));
    expect(counted).toHaveLength(1_241);
    expect(new Set(counted.map((unit) => unit.member)).size).toBe(1_241);
    expect(counted.filter((unit) => unit.score === START + 1)).toHaveLength(1_234);
    // The limit holds for large costs too: 1_241 + 260 > 1_500.
    expect((await limiter.check('a', { cost: 260 })).allowed).toBe(false);
    expect(await units(key('a'))).toHaveLength(1_241);
    expect((await limiter.check('a', { cost: 259 })).allowed).toBe(true);
  });

  test('a counting check trims units older than the longest window; a peek trims nothing', async () => {
    const { clock, limiter, key } = logLimiter([
      { limit: 5, window: 1_000 },
      { limit: 20, window: 10_000 },
    ]);
    await limiter.check('a', { cost: 3 }); // at 0
    clock.advance(2_000);
    await limiter.check('a', { cost: 2 }); // at 2 s: outside the 1 s tier, inside the 10 s one
    expect(await units(key('a'))).toHaveLength(5);
    clock.set(START + 10_000); // the units at 0 are exactly one longest window old: out
    const peek = await limiter.peek('a', { cost: 0 });
    expect(peek.tiers.map((tier) => tier.estimated)).toEqual([0, 2]);
    expect(await units(key('a'))).toHaveLength(5); // a peek evaluates only
    await limiter.check('a', { cost: 0 }); // cost 0 counts nothing, but trims
    expect((await units(key('a'))).map((unit) => unit.score)).toEqual([START + 2_000, START + 2_000]);
    clock.set(START + 12_000);
    await limiter.check('a');
    expect((await units(key('a'))).map((unit) => unit.score)).toEqual([START + 12_000]);
    // The sequence member survives trimming, so members stay unique.
    expect(await client.zscore(key('a'), '#')).toBe('-6');
  });

  test('denied checks trim but add nothing', async () => {
    const { clock, limiter, key } = logLimiter([{ limit: 2, window: 1_000 }]);
    await limiter.check('a', { cost: 2 });
    clock.advance(999);
    expect((await limiter.check('a')).allowed).toBe(false);
    expect(await units(key('a'))).toHaveLength(2);
    clock.advance(1);
    expect((await limiter.check('a', { cost: 2 })).allowed).toBe(true);
    expect((await units(key('a'))).map((unit) => unit.score)).toEqual([START + 1_000, START + 1_000]);
  });
});

describe.each(storesOfTestFile(() => client))('sliding log is exact on %s', (_name, makeStore) => {
  test('the count is exactly the units newer than now - window', async () => {
    const clock = manualClock(START);
    const limiter = createLimiter({
      store: makeStore(),
      limit: 10,
      window: 1_000,
      algorithm: 'sliding-log',
      clock: clock.now,
      prefix: uniquePrefix('exact'),
      denyCacheSize: 0,
    });
    const times = [0, 0, 100, 250, 250, 250, 999];
    for (const t of times) {
      clock.set(START + t);
      expect((await limiter.check('a')).allowed).toBe(true);
    }
    for (const [t, expected] of [
      [999, 7],
      [1_000, 5],
      [1_099, 5],
      [1_100, 4],
      [1_250, 1],
      [1_999, 0],
    ] as const) {
      clock.set(START + t);
      expect({ t, estimated: (await limiter.peek('a', { cost: 0 })).estimated }).toEqual({ t, estimated: expected });
    }
  });
});
