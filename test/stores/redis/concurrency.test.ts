/**
 * Concurrency on Redis with its own clock (no injected clock): the check-and-count is
 * one atomic script, so parallel checks never overshoot, from one connection or many,
 * through every client library alike.
 */
import { createLimiter, RedisStore } from '../../../src';
import { ALGORITHM_NAMES } from '../../../src/algorithms';
import type { AlgorithmName } from '../../../src/algorithms/types';
import { expectCounted } from '../../helpers/decisions';
import { closeClient, REDIS_CLIENTS, redisLimiter, type StoreClient, uniquePrefix } from '../../helpers/redis';

const ALGORITHMS: readonly AlgorithmName[] = ALGORITHM_NAMES;

describe.each(REDIS_CLIENTS)('%s', (_name, kind) => {
  const clients: StoreClient[] = [];
  let client: StoreClient;
  beforeAll(async () => {
    client = await kind.standalone();
    for (let i = 0; i < 4; i++) clients.push(await kind.standalone());
  });
  afterAll(() => Promise.all([client, ...clients].map(closeClient)));

  describe.each(ALGORITHMS)('%s under concurrency', (algorithm) => {
    test('200 parallel checks on a limit of 100 allow exactly 100', async () => {
      const limiter = redisLimiter(client, 'conc', { limit: 100, window: '1h', algorithm });
      const decisions = await Promise.all(Array.from({ length: 200 }, () => limiter.check('hot')));
      expect(decisions.filter((decision) => decision.allowed)).toHaveLength(100);
      // Every allowed decision saw a distinct count: 1..100.
      const counts = decisions.filter((decision) => decision.allowed).map((decision) => Math.round(decision.estimated));
      expect(new Set(counts).size).toBe(100);
      expectCounted(algorithm, (await limiter.peek('hot', { cost: 0 })).estimated, 100);
    });

    test('1,000 parallel checks from 4 limiter instances on 4 connections allow exactly 100', async () => {
      const prefix = uniquePrefix('conc4');
      const limiters = clients.map((c) =>
        createLimiter({ store: new RedisStore({ client: c }), limit: 100, window: '1h', algorithm, prefix }),
      );
      const decisions = await Promise.all(Array.from({ length: 1_000 }, (_, i) => limiters[i % 4].check('shared')));
      expect(decisions.filter((decision) => decision.allowed)).toHaveLength(100);
      for (const limiter of limiters) expectCounted(algorithm, (await limiter.peek('shared', { cost: 0 })).estimated, 100);
    });

    test('parallel checks with costs never overshoot the limit', async () => {
      const limiter = redisLimiter(client, 'concost', { limit: 100, window: '1h', algorithm, denyCacheSize: 0 });
      const costs = Array.from({ length: 120 }, (_, i) => 1 + (i % 7));
      const decisions = await Promise.all(costs.map((cost) => limiter.check('c', { cost })));
      const spent = decisions.reduce((sum, decision, i) => sum + (decision.allowed ? costs[i] : 0), 0);
      expect(spent).toBeLessThanOrEqual(100);
      expect(spent).toBeGreaterThan(93); // denied only once fewer than 7 units were left
      expectCounted(algorithm, (await limiter.peek('c', { cost: 0 })).estimated, spent);
    });
  });
});
