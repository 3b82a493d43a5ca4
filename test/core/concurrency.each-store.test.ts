/**
 * A bound on requests in progress (`concurrency`) through the core, on every store: the
 * MemoryStore, and RedisStores over each client adapter on the standalone server and on the
 * three-master cluster. Each allowed check holds a lease until released or expired (in the
 * store's clock: the injected one here); the bound and the rate tiers are decided in one
 * atomic step, so a request refused by either counts in neither.
 */
import type { Cluster } from 'ioredis';
import { createLimiter, type Decision, type Limiter, type LimiterOptions } from '../../src';
import { ALGORITHM_NAMES } from '../../src/algorithms';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { everyStore } from '../helpers/stores';

const STORES = everyStore();

const START = 1_800_000_000_000 - (1_800_000_000_000 % 3_600_000) + 60_000;
const LEASE_MS = 10_000;

describe.each(STORES)('on %s', (storeName, makeStore, clientOf) => {
  let clock: ReturnType<typeof manualClock>;
  beforeEach(() => {
    clock = manualClock(START);
  });
  const limiterWith = (options: LimiterOptions, store = makeStore(), prefix = uniquePrefix('conc')): Limiter =>
    createLimiter({ store, clock: clock.now, leaseMs: LEASE_MS, prefix, ...options });

  const held = (decisions: Decision[]) => decisions.filter((decision) => decision.allowed);

  test('the bound admits exactly `concurrency` at once, and reports the number in progress', async () => {
    const limiter = limiterWith({ concurrency: 3 });
    const decisions: Decision[] = [];
    for (let i = 0; i < 4; i++) decisions.push(await limiter.check('u'));
    expect(decisions.map((decision) => decision.concurrency)).toEqual([
      { limit: 3, inProgress: 1, refused: false },
      { limit: 3, inProgress: 2, refused: false },
      { limit: 3, inProgress: 3, refused: false },
      { limit: 3, inProgress: 3, refused: true },
    ]);
    expect(decisions.map((decision) => decision.lease !== undefined)).toEqual([true, true, true, false]);
    // A concurrency-only limiter describes the bound at the top level; a refusal has no known wait.
    expect(decisions[3]).toMatchObject({ allowed: false, counted: false, limit: 3, remaining: 0, tier: -1, retryAfterMs: Infinity });
    expect(decisions[0]).toMatchObject({ allowed: true, limit: 3, remaining: 2, tiers: [] });
    // Another identifier has its own slots.
    expect((await limiter.check('other')).concurrency).toEqual({ limit: 3, inProgress: 1, refused: false });
  });

  test('a parallel burst on one identifier: exactly `concurrency` leases, with distinct ids', async () => {
    const limiter = limiterWith({ concurrency: 5 });
    const decisions = await Promise.all(Array.from({ length: 40 }, () => limiter.check('burst')));
    const leases = held(decisions).map((decision) => decision.lease!.id);
    expect(leases).toHaveLength(5);
    expect(new Set(leases).size).toBe(5);
  });

  test('release gives the slot back once: twice changes nothing', async () => {
    const limiter = limiterWith({ concurrency: 2 });
    const [a, b] = [await limiter.check('u'), await limiter.check('u')];
    expect((await limiter.check('u')).allowed).toBe(false);
    expect(await a.lease!.release()).toBe(true);
    const c = await limiter.check('u');
    expect(c.concurrency).toEqual({ limit: 2, inProgress: 2, refused: false });
    // a's second release must not free b's or c's slot.
    expect(await a.lease!.release()).toBe(false);
    expect((await limiter.check('u')).concurrency).toEqual({ limit: 2, inProgress: 2, refused: true });
    await b.lease!.release();
    await c.lease!.release();
    expect((await limiter.peek('u')).concurrency).toMatchObject({ inProgress: 0 });
  });

  test('a lease not released (its process died) comes back after leaseMs, and a late release changes nothing', async () => {
    const limiter = limiterWith({ concurrency: 2 });
    const lost = [await limiter.check('u'), await limiter.check('u')];
    clock.advance(LEASE_MS - 1);
    expect((await limiter.check('u')).allowed).toBe(false);
    clock.advance(1);
    const fresh = [await limiter.check('u'), await limiter.check('u')];
    expect(held(fresh)).toHaveLength(2);
    expect(await lost[0].lease!.release()).toBe(false);
    expect(await lost[0].lease!.renew()).toBe(false);
    expect((await limiter.check('u')).concurrency).toEqual({ limit: 2, inProgress: 2, refused: true });
  });

  test('renew extends a lease to leaseMs from now, so a long request keeps its slot', async () => {
    const limiter = limiterWith({ concurrency: 1 });
    const long = await limiter.check('u');
    clock.advance(LEASE_MS / 2);
    expect(await long.lease!.renew()).toBe(true);
    clock.advance(LEASE_MS - 1);
    expect((await limiter.check('u')).allowed).toBe(false);
    clock.advance(1);
    expect((await limiter.check('u')).allowed).toBe(true);
  });

  test('a refusal by the bound is never served from the deny cache after a release', async () => {
    const limiter = limiterWith({ concurrency: 1 }); // the deny cache is on by default
    const first = await limiter.check('u');
    const refused = await limiter.check('u');
    expect(refused).toMatchObject({ allowed: false, cached: false });
    await first.lease!.release();
    expect(await limiter.check('u')).toMatchObject({ allowed: true, cached: false });
  });

  test('a call may lower or raise the bound of a limiter with concurrency', async () => {
    const limiter = limiterWith({ concurrency: 3 });
    await limiter.check('u');
    expect((await limiter.check('u', { concurrency: 1 })).concurrency).toEqual({ limit: 1, inProgress: 1, refused: true });
    expect((await limiter.check('u', { concurrency: 5 })).concurrency).toEqual({ limit: 5, inProgress: 2, refused: false });
    const rateOnly = createLimiter({ store: makeStore(), clock: clock.now, limit: 5, prefix: uniquePrefix('conc') });
    await expect(rateOnly.check('u', { concurrency: 2 })).rejects.toMatchObject({
      code: 'SWL_CONFLICTING_OPTIONS',
      message: expect.stringMatching(/^concurrency: /),
    });
  });

  test('a peek reports the slots in progress and takes none', async () => {
    const limiter = limiterWith({ concurrency: 2 });
    await limiter.check('u');
    const peek = await limiter.peek('u');
    expect(peek.lease).toBeUndefined();
    expect(peek.concurrency).toMatchObject({ limit: 2, inProgress: 1 });
    expect((await limiter.check('u')).concurrency).toMatchObject({ inProgress: 2, refused: false });
  });

  describe.each(ALGORITHM_NAMES)('with rate tiers (%s): one atomic decision', (algorithm) => {
    test('refused by a rate tier: no slot is taken', async () => {
      const limiter = limiterWith({ algorithm, limits: [{ limit: 2, window: '1m' }], concurrency: 5 });
      const decisions = [await limiter.check('u'), await limiter.check('u'), await limiter.check('u')];
      expect(decisions.map((decision) => decision.allowed)).toEqual([true, true, false]);
      expect(decisions[2].concurrency).toEqual({ limit: 5, inProgress: 2, refused: false });
      expect(decisions[2].lease).toBeUndefined();
      expect(decisions[2].retryAfterMs).toBeGreaterThan(0);
      expect(decisions[2].retryAfterMs).toBeLessThan(Infinity);
      expect((await limiter.peek('u')).concurrency).toMatchObject({ inProgress: 2 });
    });

    test('refused by the bound: counted in no rate tier', async () => {
      const limiter = limiterWith({
        algorithm,
        limits: [
          { limit: 10, window: '1s' },
          { limit: 100, window: '1h' },
        ],
        concurrency: 1,
      });
      const first = await limiter.check('u', { cost: 3 });
      const refused = await limiter.check('u', { cost: 3 });
      expect(refused).toMatchObject({
        allowed: false,
        counted: false,
        retryAfterMs: Infinity,
        concurrency: { refused: true, inProgress: 1 },
      });
      const counts = (await limiter.peek('u', { cost: 0 })).tiers.map((tier) => tier.estimated);
      expect(counts).toEqual([3, 3]);
      await first.lease!.release();
      expect((await limiter.check('u', { cost: 3 })).allowed).toBe(true);
      expect((await limiter.peek('u', { cost: 0 })).tiers.map((tier) => tier.estimated)).toEqual([6, 6]);
    });
  });

  // Read through ioredis, whose commands route by key on a Cluster too.
  if (storeName.startsWith('RedisStore') && storeName.includes('ioredis')) {
    test('keys: the counts and the leases share one hash tag, so one script call reaches both on a Cluster', async () => {
      const prefix = uniquePrefix('layout');
      const limiter = limiterWith({ limit: 5, window: '1m', concurrency: 2 }, makeStore(), prefix);
      await limiter.check('u');
      const client = clientOf() as Cluster;
      expect(await client.exists(`{${prefix}:u}`)).toBe(1);
      expect(await client.exists(`{${prefix}:u}:leases`)).toBe(1);
      expect(limiter.keyFor('u')).toBe(`{${prefix}:u}`);
    });
  }
});
