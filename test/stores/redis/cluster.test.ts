/**
 * Redis Cluster: every algorithm works through the cluster client of each library (ioredis,
 * node-redis, iovalkey, GLIDE), one identifier is one key (so one slot, whatever the tiers), and identifiers with
 * braces, which Cluster reads as hash tags, still work and keep their own counters. An ioredis
 * Cluster inspects the nodes in every case.
 */
import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import { ALGORITHM_NAMES, ALGORITHMS as SCRIPTS } from '../../../src/algorithms';
import type { AlgorithmName } from '../../../src/algorithms/types';
import { closeClient, clusterClient, keysUnder, manualClock, REDIS_CLIENTS, redisLimiter, type StoreClient } from '../../helpers/redis';

// ioredis' own slot function (a dependency of ioredis, without type declarations).
// eslint-disable-next-line @typescript-eslint/no-require-imports
const calculateSlot = require('cluster-key-slot') as (key: string) => number;

const ALGORITHMS: readonly AlgorithmName[] = ALGORITHM_NAMES;
const HOUR = 3_600_000;
const START = 1_700_000_000_000 - (1_700_000_000_000 % HOUR);

let cluster: Cluster;
beforeAll(async () => {
  cluster = clusterClient();
  await cluster.ping();
});
afterAll(() => cluster.quit());

function sha1(text: string): string {
  return createHash('sha1').update(text).digest('hex');
}

describe.each(REDIS_CLIENTS)('%s', (_name, kind) => {
  let client: StoreClient;
  beforeAll(async () => {
    client = await kind.cluster();
  });
  afterAll(() => closeClient(client));

  describe.each(ALGORITHMS)('%s on Redis Cluster', (algorithm) => {
    function setup(limits: { limit: number; window: string | number }[]) {
      const clock = manualClock(START);
      const limiter = redisLimiter(client, 'cl', { limits, algorithm, clock: clock.now, denyCacheSize: 0 });
      return { clock, limiter };
    }

    test('counts, denies with an exact wait, and allows again', async () => {
      const { clock, limiter } = setup([{ limit: 3, window: '1m' }]);
      for (let i = 1; i <= 3; i++) expect(await limiter.check('u')).toMatchObject({ allowed: true, estimated: i });
      const denied = await limiter.check('u');
      expect(denied.allowed).toBe(false);
      clock.advance(denied.retryAfterMs - 1);
      expect((await limiter.peek('u')).allowed).toBe(false);
      clock.advance(1);
      expect((await limiter.check('u')).allowed).toBe(true);
      await limiter.reset('u');
      expect((await limiter.peek('u', { cost: 0 })).estimated).toBe(0);
    });

    test('tiers are all-or-nothing on Cluster too', async () => {
      const { limiter } = setup([
        { limit: 3, window: '1s' },
        { limit: 5, window: '1h' },
      ]);
      for (let i = 0; i < 3; i++) await limiter.check('t');
      for (let i = 0; i < 5; i++) {
        const denied = await limiter.check('t');
        expect(denied).toMatchObject({ allowed: false, tier: 0 });
        expect(denied.tiers[1].estimated).toBe(3);
      }
      expect((await limiter.peek('t', { cost: 0 })).tiers.map((tier) => tier.estimated)).toEqual([3, 3]);
    });

    test('one identifier is one key, whatever the tiers: one slot per check', async () => {
      const { clock, limiter } = setup([
        { limit: 5, window: '1s' },
        { limit: 50, window: '1m' },
        { limit: 500, window: '1h' },
      ]);
      const ids = Array.from({ length: 20 }, (_, i) => `user-${i}`);
      for (const id of ids) {
        await limiter.check(id);
        clock.advance(1_500);
        await limiter.check(id, { cost: 2 });
      }
      const keys = await keysUnder(cluster, limiter.prefix);
      expect(keys.sort()).toEqual(ids.map((id) => limiter.keyFor(id)).sort());
      const slots = new Set<number>();
      for (const id of ids) {
        const key = limiter.keyFor(id);
        const slot = (await cluster.cluster('KEYSLOT', key)) as number;
        expect(calculateSlot(key)).toBe(slot);
        slots.add(slot);
      }
      // Different identifiers spread over the cluster: keys are not all pinned to one slot.
      expect(slots.size).toBeGreaterThan(10);
    });

    test('identifiers with braces (hash tags) work and keep their own counters', async () => {
      const { limiter } = setup([{ limit: 2, window: '1m' }]);
      const ids = ['{', '}', '{}', '}{', 'a{tag}', 'b{tag}', '{tag}', 'x{}y', '{a}{b}', 'user:{42}:*', 'new\nline'];
      for (const id of ids) {
        expect((await limiter.check(id)).allowed).toBe(true);
        expect((await limiter.check(id)).allowed).toBe(true);
      }
      for (const id of ids) expect((await limiter.check(id)).allowed).toBe(false);
      expect((await keysUnder(cluster, limiter.prefix)).sort()).toEqual(ids.map((id) => limiter.keyFor(id)).sort());
      // 'a{tag}' and 'b{tag}' share a slot (the hash tag) but not a key.
      expect(calculateSlot(limiter.keyFor('a{tag}'))).toBe(calculateSlot(limiter.keyFor('b{tag}')));
      expect(limiter.keyFor('a{tag}')).not.toBe(limiter.keyFor('b{tag}'));
    });
  });

  describe('Redis Cluster with the Redis clock', () => {
    test.each(ALGORITHMS)('%s: 200 parallel checks on a limit of 100 allow exactly 100', async (algorithm) => {
      const limiter = redisLimiter(client, 'clconc', { limit: 100, window: '1h', algorithm });
      const decisions = await Promise.all(Array.from({ length: 200 }, () => limiter.check('hot')));
      expect(decisions.filter((decision) => decision.allowed)).toHaveLength(100);
    });

    test('after SCRIPT FLUSH on every master, checks recover', async () => {
      const limiters = ALGORITHMS.map((algorithm) =>
        redisLimiter(client, 'clflush', { limit: 10, window: '1h', algorithm, denyCacheSize: 0 }),
      );
      const ids = Array.from({ length: 12 }, (_, i) => `id${i}`); // spread over the masters
      for (const limiter of limiters) for (const id of ids) await limiter.check(id);
      // The keys do live on several masters, so every master's flush matters.
      let mastersWithKeys = 0;
      for (const node of cluster.nodes('master')) {
        const [, keys] = await (node as Redis).scan('0', 'MATCH', `${limiters[0].prefix}:*`, 'COUNT', 10_000);
        if (keys.length > 0) mastersWithKeys++;
      }
      expect(mastersWithKeys).toBeGreaterThanOrEqual(2);
      await Promise.all(cluster.nodes('master').map((node) => (node as Redis).script('FLUSH')));
      for (const node of cluster.nodes('master')) {
        expect(await (node as Redis).script('EXISTS', ...ALGORITHMS.map((name) => sha1(SCRIPTS[name].check.lua)))).toEqual(
          ALGORITHMS.map(() => 0),
        );
      }
      for (const limiter of limiters) {
        for (const id of ids) {
          const decision = await limiter.check(id);
          expect(decision.allowed).toBe(true);
          // Two counted (a token bucket on Redis's real clock has drained a sliver since the first, more
          // on a loaded machine: 1.9993 after a second).
          expect(decision.estimated).toBeCloseTo(2, 2);
        }
      }
    });
  });
});
