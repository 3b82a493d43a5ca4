/**
 * On a Redis Cluster, the checks of one event-loop turn go out as one call per node (a node batch)
 * or per slot: the slot computed here must be the one Redis computes, and a batch must answer each
 * check as a call of its own would, sending again alone the checks of keys its node does not serve.
 * Against the harness's three-master cluster, over every client library.
 */
import type { Cluster } from 'ioredis';
import { createLimiter, type Decision, RedisStore } from '../../../src';
import { ALGORITHMS } from '../../../src/algorithms';
import type { ClusterRouting } from '../../../src/stores/redis/batch';
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

/** EVALSHA and EVAL calls on every master so far. */
async function scriptCalls(cluster: Cluster): Promise<number> {
  let total = 0;
  for (const node of cluster.nodes('master')) {
    const stats = (await node.info('commandstats')).match(/cmdstat_(?:evalsha|eval):calls=(\d+)/g) ?? [];
    for (const line of stats) total += Number(line.split('=')[1]);
  }
  return total;
}

/** Error replies on every master so far, those of commands a script ran under `pcall` included. */
async function errorReplies(cluster: Cluster): Promise<number> {
  let total = 0;
  for (const node of cluster.nodes('master')) total += Number(/total_error_replies:(\d+)/.exec(await node.info('stats'))?.[1]);
  return total;
}

/** Loads the sliding window's check scripts on every master, so that no call of a test is answered NOSCRIPT. */
async function loadScripts(cluster: Cluster): Promise<void> {
  const { check } = ALGORITHMS['sliding-window'];
  for (const node of cluster.nodes('master')) {
    for (const lua of [check.lua, check.batchLua, check.nodeBatchLua]) await node.script('LOAD', lua);
  }
}

/**
 * Makes the slot map node batches go by say that the master of slot 0 serves every slot; returns
 * what puts it back. The client's own map (ioredis, iovalkey and node-redis keep a `slots` array);
 * on GLIDE, which shows none, the store adapter's map of its own.
 */
function oneNodeForEverySlot(name: string, client: StoreClient, store: RedisStore): () => void {
  if (name === 'glide') {
    const routing = (store as unknown as { redis: { routing: ClusterRouting } }).redis.routing;
    const { nodeOf } = routing;
    const first = nodeOf(0);
    routing.nodeOf = () => first;
    return () => {
      routing.nodeOf = nodeOf;
    };
  }
  const slots = (client as unknown as { slots: unknown[] }).slots;
  const saved = [...slots];
  const first = slots[0];
  for (let slot = 0; slot < slots.length; slot++) slots[slot] = first;
  return () => {
    for (let slot = 0; slot < slots.length; slot++) slots[slot] = saved[slot];
  };
}

describe.each(REDIS_CLIENTS)('over %s', (name) => {
  test('one turn of checks over many identifiers: one call per node, each check answered as alone', async () => {
    const cluster = clients.get('ioredis') as Cluster;
    const store = new RedisStore({ client: clients.get(name)! });
    const prefix = uniquePrefix(`slots-${name}`);
    const limiter = createLimiter({ store, limit: 3, window: '1h', prefix, denyCacheSize: 0 });
    // 40 identifiers, 5 checks each, interleaved; ten of them in one slot through a hash tag.
    const identifiers = Array.from({ length: 40 }, (_, i) => (i < 10 ? `{team}:${i}` : `user:${i}`));
    const order = Array.from({ length: 5 }, () => identifiers).flat();
    await loadScripts(cluster);
    const before = await scriptCalls(cluster);
    const decisions = await Promise.all(order.map((identifier) => limiter.check(identifier)));
    const used = (await scriptCalls(cluster)) - before;
    // Per identifier: three allowed, with remaining 2, 1 and 0, and two denied. Checks of one
    // identifier sent in different batches have no order between them on a cluster (nor from
    // different processes): a batch may go to its node directly while another waits on the
    // client's routing, as concurrent requests would.
    for (const identifier of identifiers) {
      const own = decisions.filter((_, i) => order[i] === identifier);
      const allowed = own.filter((decision) => decision.allowed);
      expect([identifier, allowed.length]).toEqual([identifier, 3]);
      expect(allowed.map((decision) => decision.remaining).sort()).toEqual([0, 1, 2]);
    }
    // 200 checks, flushed by 16: at most one call per node (3 masters) per flush, whatever the slots.
    expect(used).toBeLessThanOrEqual(3 * Math.ceil(order.length / 16));
    // And what Redis holds: three counted per identifier.
    const check = createLimiter({ store, limit: 3, window: '1h', prefix, denyCacheSize: 0 });
    for (const identifier of identifiers) expect([identifier, (await check.peek(identifier)).remaining]).toEqual([identifier, 0]);
  });

  test('a node batch whose keys a node does not serve (a stale slot map) sends those checks again alone, counted once', async () => {
    const cluster = clients.get('ioredis') as Cluster;
    const client = clients.get(name)!;
    const store = new RedisStore({ client });
    const prefix = uniquePrefix(`stale-${name}`);
    const limiter = createLimiter({ store, limit: 2, window: '1h', prefix, denyCacheSize: 0 });
    // The map says every slot is on one node: its node batches hold keys of all three.
    const restore = oneNodeForEverySlot(name, client, store);
    await loadScripts(cluster);
    const errorsBefore = await errorReplies(cluster);
    const identifiers = Array.from({ length: 12 }, (_, i) => `user:${i}`);
    let decisions: Decision[];
    try {
      decisions = await Promise.all([...identifiers, ...identifiers, ...identifiers].map((identifier) => limiter.check(identifier)));
    } finally {
      restore();
    }
    // The node refused the keys of the two others, each in its own script run (nothing written for them).
    expect((await errorReplies(cluster)) - errorsBefore).toBeGreaterThanOrEqual(8);
    for (const [i, identifier] of identifiers.entries()) {
      const own = [decisions[i], decisions[i + 12], decisions[i + 24]];
      expect([identifier, own.filter((decision) => decision.allowed).length]).toEqual([identifier, 2]);
    }
    const peek = createLimiter({ store, limit: 2, window: '1h', prefix, denyCacheSize: 0 });
    for (const identifier of identifiers) expect([identifier, (await peek.peek(identifier)).remaining]).toEqual([identifier, 0]);
  });
});
