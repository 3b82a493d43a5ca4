/**
 * Races between processes: 1,000 checks at once from 4 limiter instances, each with its
 * own connection (as 4 app servers would be: ioredis, and node-redis), against one limit of
 * 100. Proves that the check-and-count is atomic for every algorithm: exactly 100 are
 * allowed, and Redis holds exactly 100, with the deny cache on and off, with cost 1 and
 * cost 3, on standalone Redis.
 */
import { type AlgorithmName, createLimiter, type Limiter, RedisStore, type RedisStoreClient } from '../../src';
import { ALGORITHM_NAMES } from '../../src/algorithms';
import { expectCounted } from '../helpers/decisions';
import { disconnect, faultClient, RECOMMENDED_CONFIGS, type RedisProcess, startFaultRedis, waitReady } from '../helpers/redis-faults';

const ALGORITHMS: readonly AlgorithmName[] = ALGORITHM_NAMES;
const INSTANCES = 4;
const CHECKS = 1_000;
const LIMIT = 100;

let redis: RedisProcess;
let run = 0;

beforeAll(async () => {
  redis = await startFaultRedis();
});
afterAll(() => redis.stop());

describe.each(RECOMMENDED_CONFIGS)('clients: %s', (_configName, clientConfig) => {
  let clients: RedisStoreClient[];
  beforeAll(async () => {
    clients = await Promise.all(Array.from({ length: INSTANCES }, () => faultClient(redis.url, clientConfig)));
    await Promise.all(clients.map((client) => waitReady(client)));
  });
  afterAll(() => {
    for (const client of clients) disconnect(client);
  });

  function instances(algorithm: AlgorithmName, denyCacheSize: number): Limiter[] {
    const prefix = `race-${algorithm}-${++run}`;
    return clients.map((client) =>
      createLimiter({ store: new RedisStore({ client }), algorithm, limit: LIMIT, window: '1h', prefix, denyCacheSize, timeoutMs: 5_000 }),
    );
  }

  describe.each(ALGORITHMS)('%s', (algorithm) => {
    test.each([
      ['deny cache off', 0],
      ['deny cache on', 10_000],
    ])(
      `${CHECKS} parallel checks from ${INSTANCES} instances against a limit of ${LIMIT} allow exactly ${LIMIT} (%s)`,
      async (_name, denyCacheSize) => {
        const limiters = instances(algorithm, denyCacheSize);
        const decisions = await Promise.all(Array.from({ length: CHECKS }, (_, i) => limiters[i % INSTANCES].check('shared')));
        expect(decisions.filter((decision) => decision.allowed)).toHaveLength(LIMIT);
        // Which instance wins is not asserted: each instance's 250 checks of one event-loop turn
        // go to Redis as one batch script run, so the first batch Redis runs takes all 100.
        // Remaining values of the allowed ones are each of 99..0 exactly once: no two saw the same count.
        const remaining = decisions
          .filter((decision) => decision.allowed)
          .map((decision) => decision.remaining)
          .sort((a, b) => a - b);
        expect(remaining).toEqual(Array.from({ length: LIMIT }, (_, i) => i));
        const stored = await limiters[0].peek('shared', { cost: 0 });
        expectCounted(algorithm, stored.estimated, LIMIT);
      },
    );

    test(`${CHECKS} parallel checks of cost 3 allow exactly floor(${LIMIT} / 3)`, async () => {
      const limiters = instances(algorithm, 0);
      const decisions = await Promise.all(Array.from({ length: CHECKS }, (_, i) => limiters[i % INSTANCES].check('shared', { cost: 3 })));
      expect(decisions.filter((decision) => decision.allowed)).toHaveLength(Math.floor(LIMIT / 3));
      expectCounted(algorithm, (await limiters[0].peek('shared', { cost: 0 })).estimated, Math.floor(LIMIT / 3) * 3);
    });
  });
});
