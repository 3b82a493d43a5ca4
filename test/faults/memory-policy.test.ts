/**
 * Redis memory policies, on servers the test starts. Under `allkeys-lru` pressure, exhausted
 * identifiers lose their counters and get their quota back in silence; so the store reads each
 * node's policy (`INFO`) once its connection is up and warns, once per client and Redis server
 * process however many stores share the client (`SWL_EVICTING_MEMORY`), when the node can evict: `maxmemory` set and any policy but
 * `noeviction` (every key has a TTL, so `volatile-*` policies evict them too).
 */
import { createLimiter, RedisStore } from '../../src';
import {
  disconnect,
  faultClient,
  faultServersOfEachTest,
  quietClient,
  RECOMMENDED_CONFIGS,
  waitFor,
  waitReady,
} from '../helpers/redis-faults';
import { captureWarnings } from '../helpers/warnings';

const warnings = captureWarnings();
const server = faultServersOfEachTest();

const evictionWarnings = () => warnings.list.filter((warning) => warning.code === 'SWL_EVICTING_MEMORY');

test('allkeys-lru under pressure gives exhausted identifiers their quota back: why the warning exists', async () => {
  // Full eviction tenacity: Redis evicts until it is under maxmemory on each command, rather than in
  // slices of time that a slow machine can stretch past the wait below.
  const redis = await server(['--maxmemory', '64mb', '--maxmemory-policy', 'allkeys-lru', '--maxmemory-eviction-tenacity', '100']);
  const client = await faultClient(redis.url, RECOMMENDED_CONFIGS[0][1]);
  const admin = quietClient(redis.url);
  try {
    await waitReady(client);
    const limiter = createLimiter({ store: new RedisStore({ client }), limit: 5, window: '1h', denyCacheSize: 0 });
    const ids = Array.from({ length: 200 }, (_, i) => `user-${i}`);
    for (const id of ids) for (let i = 0; i < 5; i++) await limiter.check(id);
    expect((await Promise.all(ids.map((id) => limiter.peek(id)))).every((decision) => !decision.allowed)).toBe(true);
    // Other data fills the memory: the least recently used keys go, rate limits first.
    await admin.call('DEBUG', 'POPULATE', '1000000', 'filler', '128');
    // Redis evicts on the next commands, in slices of time, until memory is back under maxmemory.
    // Only writes of another key meanwhile: reading the rate-limit keys would keep them recently used.
    await waitFor(
      async () => {
        await admin.set('nudge', '1');
        const info = (await admin.info('memory')) as string;
        return Number(/used_memory:(\d+)/.exec(info)?.[1]) <= 64 * 1024 * 1024;
      },
      30_000,
      'eviction to bring memory under maxmemory',
    );
    const reset = (await Promise.all(ids.map((id) => limiter.peek(id)))).filter((decision) => decision.allowed).length;
    expect(reset).toBeGreaterThan(100);
    await waitFor(() => evictionWarnings().length === 1, 2_000, 'the eviction warning');
    expect(evictionWarnings()[0].message).toMatch(/maxmemory-policy allkeys-lru.*noeviction/);
  } finally {
    disconnect(client);
    admin.disconnect();
  }
});

describe.each(RECOMMENDED_CONFIGS)('%s', (_name, config) => {
  test.each([
    ['allkeys-lru', '64mb', 1],
    ['volatile-lru', '64mb', 1],
    ['volatile-ttl', '64mb', 1],
    ['noeviction', '64mb', 0],
    ['allkeys-lru', '0', 0],
  ] as const)(
    'maxmemory-policy %s, maxmemory %s: %s warning(s) per client, however many stores share it',
    async (policy, maxmemory, expected) => {
      const redis = await server(['--maxmemory', maxmemory, '--maxmemory-policy', policy]);
      const clients = [await faultClient(redis.url, config), await faultClient(redis.url, config)];
      try {
        for (const client of clients) {
          await waitReady(client);
          // Two stores on one client: the client's policy is read, and warned about, once.
          for (const prefix of ['one', 'two']) {
            const limiter = createLimiter({ store: new RedisStore({ client }), limit: 5, window: '1m', prefix });
            expect((await limiter.check('a')).allowed).toBe(true);
          }
        }
        // INFO is answered well within the time of a few more round trips.
        const probe = quietClient(redis.url);
        await probe.ping();
        probe.disconnect();
        if (expected > 0) await waitFor(() => evictionWarnings().length >= clients.length, 2_000, 'the eviction warnings');
        expect(evictionWarnings().map((warning) => warning.message.includes(`maxmemory-policy ${policy}`))).toEqual(
          new Array(expected * clients.length).fill(true),
        );
      } finally {
        for (const client of clients) disconnect(client);
      }
    },
  );
});
