/**
 * On a Redis Cluster, the checks of one event-loop turn go out as one batch call per slot: the
 * slot computed here must be the one Redis computes, and a batch must answer each check as a
 * call of its own would. Against the harness's three-master cluster, over ioredis and node-redis.
 */
import type { Cluster } from 'ioredis';
import { createLimiter, RedisStore } from '../../../src';
import { slotOf } from '../../../src/stores/redis/cluster-slot';
import { mulberry32 } from '../../../support/random';
import { closeClient, REDIS_CLIENTS, type StoreClient, uniquePrefix } from '../../helpers/redis';

const clients = new Map<string, StoreClient>();
beforeAll(async () => {
  for (const [name, kind] of REDIS_CLIENTS) clients.set(name, await kind.cluster());
});
afterAll(() => Promise.all([...clients.values()].map(closeClient)));

test('slotOf agrees with CLUSTER KEYSLOT, hash tags and UTF-8 included', async () => {
  const cluster = clients.get('ioredis') as Cluster;
  const random = mulberry32(0x5107);
  const pieces = ['rl:', 'user:', '{', '}', '{}', 'ip:203.0.113.7', 'é', '日本', '😀', ':', 'a', '{x}', '\u0000'];
  const keys = ['', '{}', '{}x', 'x{}', '{a}{b}', 'a{b', 'a}b{c}', '{user1000}.following', 'foo{}{bar}', 'foo{{bar}}zap', 'foo{bar}{zap}'];
  for (let i = 0; i < 300; i++) {
    const length = 1 + Math.floor(random() * 6);
    keys.push(Array.from({ length }, () => pieces[Math.floor(random() * pieces.length)]).join(''));
  }
  for (const key of keys) {
    expect([key, slotOf(key)]).toEqual([key, await cluster.cluster('KEYSLOT', key)]);
  }
});

describe.each(REDIS_CLIENTS)('over %s', (name) => {
  test('one turn of checks over many identifiers, some sharing a slot: each answered as alone, in fewer calls', async () => {
    const cluster = clients.get('ioredis') as Cluster;
    const store = new RedisStore({ client: clients.get(name)! });
    const prefix = uniquePrefix(`slots-${name}`);
    const limiter = createLimiter({ store, limit: 3, window: '1h', prefix, denyCacheSize: 0 });
    // 40 identifiers, 5 checks each, interleaved; ten of them in one slot through a hash tag.
    const identifiers = Array.from({ length: 40 }, (_, i) => (i < 10 ? `{team}:${i}` : `user:${i}`));
    const order = Array.from({ length: 5 }, () => identifiers).flat();
    const calls = async () => {
      let total = 0;
      for (const node of cluster.nodes('master')) {
        const stats = (await node.info('commandstats')).match(/cmdstat_(?:evalsha|eval):calls=(\d+)/g) ?? [];
        for (const line of stats) total += Number(line.split('=')[1]);
      }
      return total;
    };
    // A first turn loads the scripts on every master: a batch sent before a node holds its script
    // costs an EVALSHA answered NOSCRIPT, then an EVAL.
    const warmUp = createLimiter({ store, limit: 3, window: '1h', prefix: `${prefix}-warm`, denyCacheSize: 0 });
    await Promise.all(order.map((identifier) => warmUp.check(identifier)));
    const before = await calls();
    const decisions = await Promise.all(order.map((identifier) => limiter.check(identifier)));
    const used = (await calls()) - before;
    // Per identifier: allowed, allowed, allowed, denied, denied (in call order), with remaining 2, 1, 0.
    for (const identifier of identifiers) {
      const own = decisions.filter((_, i) => order[i] === identifier);
      expect([identifier, own.map((decision) => decision.allowed)]).toEqual([identifier, [true, true, true, false, false]]);
      expect(own.slice(0, 3).map((decision) => decision.remaining)).toEqual([2, 1, 0]);
    }
    // 200 checks: batches of up to 16 per flush, split by slot; far fewer calls than checks.
    expect(used).toBeLessThan(order.length);
  });
});
