/**
 * Redis Cluster faults, on three-master clusters the tests start and stop themselves,
 * through an ioredis `Cluster` client, a node-redis cluster client, an iovalkey `Cluster` and a
 * GLIDE `GlideClusterClient`, each configured as docs/redis.md and docs/valkey.md recommend.
 *
 * Proves: an identifier's state is one key, so one slot; when that slot is migrated to
 * another master (SETSLOT MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE) the limiter follows
 * the ASK and MOVED redirections by itself and its decisions continue exactly, counts
 * preserved. When one master is SIGKILLed, identifiers on the two others keep being
 * limited exactly (right after the kill, and after the cluster marked the node failed),
 * while the dead master's identifiers fail open or closed within timeoutMs, over HTTP too.
 * When one master stalls (`DEBUG SLEEP`), the checks held behind its node batch leave 10 ms
 * later at most, are never sent once their caller timed out, and the other masters' checks are
 * not held back.
 */
import { performance } from 'node:perf_hooks';
import { Cluster } from 'ioredis';
import { Cluster as IoValkeyCluster } from 'iovalkey';
import { createLimiter, type Decision, type Limiter, RedisStore, type RedisStoreClient } from '../../src';
import { type App, closeAgent, get, startApp } from '../helpers/http-load';
import { watchEachTest } from '../helpers/process';
import { glide, nodeRedisMajor } from '../helpers/redis';
import {
  type ClusterAdmin,
  clusterAdmin,
  disconnect,
  FAULT_TIMEOUT_MS,
  GLIDE_FAULT_REQUEST_TIMEOUT_MS,
  nodeRedisCluster,
  type RedisCluster,
  sleep,
  startPartialCoverageCluster,
  waitReady,
} from '../helpers/redis-faults';
import { figuresPrintedAfterAll } from '../helpers/report';

const TIMEOUT_MS = FAULT_TIMEOUT_MS;
/**
 * Allowed above a bound for the HTTP round trip, plus the longest event-loop stall measured in
 * the same test (monitorEventLoopDelay): the clients share the loop, on two busy cores.
 */
const MARGIN_MS = 150;

const CLUSTER_CLIENTS: [string, (startupNodes: { host: string; port: number }[]) => Promise<RedisStoreClient>][] = [
  [
    'ioredis',
    async (startupNodes) => {
      // disconnectTimeout: disconnecting from the killed node arms a timer for its dead socket (2 s by default).
      const ioredis = new Cluster(startupNodes, {
        enableOfflineQueue: false,
        redisOptions: { maxRetriesPerRequest: 1, disconnectTimeout: 100 },
      });
      ioredis.on('error', () => undefined);
      ioredis.on('node error', () => undefined);
      await waitReady(ioredis);
      return ioredis;
    },
  ],
  ['node-redis', (startupNodes) => nodeRedisCluster(startupNodes, { disableOfflineQueue: true })],
  [
    'iovalkey',
    async (startupNodes) => {
      const iovalkey = new IoValkeyCluster(startupNodes, {
        enableOfflineQueue: false,
        redisOptions: { maxRetriesPerRequest: 1, disconnectTimeout: 100 },
      });
      iovalkey.on('error', () => undefined);
      iovalkey.on('node error', () => undefined);
      await waitReady(iovalkey as unknown as RedisStoreClient);
      return iovalkey as unknown as RedisStoreClient;
    },
  ],
  // As docs/valkey.md recommends: requestTimeout 50 ms shorter than the limiter's timeoutMs (of
  // the kill test; the migration tests allow more).
  [
    'glide',
    (startupNodes) => glide().GlideClusterClient.createClient({ addresses: startupNodes, requestTimeout: GLIDE_FAULT_REQUEST_TIMEOUT_MS }),
  ],
];

let cluster: RedisCluster;
let admin: ClusterAdmin;
let client: RedisStoreClient;
const figures = figuresPrintedAfterAll(`Redis Cluster (timeoutMs ${TIMEOUT_MS})`);
afterAll(closeAgent);

/**
 * A three-master cluster for each test of the calling block (one master may be lost: the others
 * keep serving), its admin connections, and a store client that `connect` makes; all closed, and
 * the cluster stopped, after each test.
 */
function clusterOfEachTest(connect: (startupNodes: { host: string; port: number }[]) => Promise<RedisStoreClient>): void {
  beforeEach(async () => {
    cluster = await startPartialCoverageCluster();
    admin = await clusterAdmin(cluster);
    client = await connect(cluster.startupNodes);
  });
  afterEach(async () => {
    disconnect(client);
    admin.disconnect();
    await cluster.stop();
  });
}

/** A limiter on the test's cluster client: `limit` per hour under `prefix`, every check to Redis (no deny cache). */
function clusterLimiter(prefix: string, limit: number, timeoutMs: number): Limiter {
  return createLimiter({ store: new RedisStore({ client }), limit, window: '1h', prefix, denyCacheSize: 0, timeoutMs });
}

/** `perNode` identifiers whose key `${prefix}:${id}` lives on each master, by port. */
async function identifiersByNode(prefix: string, perNode: number): Promise<Map<number, string[]>> {
  const byNode = new Map<number, string[]>(cluster.nodes.map((node) => [node.port, []]));
  for (let i = 0; [...byNode.values()].some((ids) => ids.length < perNode); i++) {
    const id = `user-${i}`;
    const ids = byNode.get(await admin.ownerOf(await admin.slotOf(`${prefix}:${id}`)))!;
    if (ids.length < perNode) ids.push(id);
  }
  return byNode;
}

/** One turn of checks, one per identifier: what each got, an allowed or denied decision or an error's code and reply. */
function oneTurn(limiter: Limiter, ids: readonly string[]): Promise<string[]> {
  return Promise.all(
    ids.map((id) =>
      limiter.check(id).then(
        (decision) => (decision.allowed ? 'allowed' : 'denied'),
        (error: { code?: string; reply?: string }) => `${error.code} ${error.reply}`,
      ),
    ),
  );
}

async function timed(limiter: Limiter, id: string): Promise<{ decision?: Decision; error?: string; ms: number }> {
  const started = performance.now();
  try {
    const decision = await limiter.check(id);
    return { decision, ms: performance.now() - started };
  } catch (error) {
    return { error: (error as Error).name, ms: performance.now() - started };
  }
}

describe.each(CLUSTER_CLIENTS)('%s', (clientName, connect) => {
  clusterOfEachTest(connect);
  const { rejections, loopDelay } = watchEachTest();

  test('a migrated slot (ASK during the migration, MOVED after it) is followed: decisions continue exactly, counts preserved', async () => {
    const limiter = clusterLimiter('migrate', 10, 2_000);
    const id = 'user-7';
    const key = limiter.keyFor(id);
    const slot = await admin.slotOf(key);
    const from = await admin.ownerOf(slot);
    const to = admin.nodes.find((node) => node.port !== from)!.port;
    // Another identifier on the target master, to see it is not disturbed.
    const [neighbour] = (await identifiersByNode('migrate', 1)).get(to)!;

    const decisions: Decision[] = [];
    for (let i = 0; i < 5; i++) decisions.push(await limiter.check(id));
    expect((await limiter.check(neighbour)).remaining).toBe(9);
    let phase = 0;
    await admin.migrateSlot(slot, from, to, async () => {
      // 1st call: slot MIGRATING on the source, key still there. 2nd: key moved, source answers ASK.
      phase++;
      decisions.push(await limiter.check(id));
    });
    expect(phase).toBe(2);
    expect(await admin.ownerOf(slot)).toBe(to);
    // The client still maps the slot to the source: the next check is answered MOVED and followed.
    for (let i = 0; i < 10; i++) decisions.push(await limiter.check(id));

    expect(decisions.map((decision) => decision.allowed)).toEqual([...new Array(10).fill(true), ...new Array(7).fill(false)]);
    expect(decisions.map((decision) => decision.remaining)).toEqual([9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    // The key lives on the target master now, holding all 10.
    const target = admin.nodes.find((node) => node.port === to)!.redis;
    expect(await target.exists(key)).toBe(1);
    expect((await limiter.peek(id, { cost: 0 })).estimated).toBe(10);
    expect((await limiter.check(neighbour)).remaining).toBe(8);
    expect(rejections.reasons).toEqual([]);
  });

  test('a batch of one slot through a migration (partly moved: TRYAGAIN; moved: ASK; after: MOVED) answers each of its checks, and counts exactly', async () => {
    const limiter = clusterLimiter('batch', 100, 3_000);
    // Five identifiers under one hash tag: one slot, so the checks of a turn share one batch call.
    const ids = ['a', 'b', 'c', 'd', 'e'].map((name) => `{team}:${name}`);
    const keys = ids.map((id) => limiter.keyFor(id));
    const slot = await admin.slotOf(keys[0]);
    const source = await admin.ownerOf(slot);
    const to = admin.nodes.find((node) => node.port !== source)!;
    const sourceNode = admin.nodes.find((node) => node.port === source)!;
    const turn = () => oneTurn(limiter, ids);
    const answers: string[][] = [await turn()];
    await to.redis.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', sourceNode.id);
    await sourceNode.redis.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', to.id);
    answers.push(await turn()); // every key still on the source: served there
    await sourceNode.redis.call('MIGRATE', '127.0.0.1', to.port, '', 0, 5_000, 'KEYS', keys[0], keys[1]);
    answers.push(await turn()); // some keys moved: TRYAGAIN, retried by ioredis, or reported on every check of the batch
    await sourceNode.redis.call('MIGRATE', '127.0.0.1', to.port, '', 0, 5_000, 'KEYS', ...keys.slice(2));
    answers.push(await turn()); // every key moved: ASK, followed to the target
    for (const node of admin.nodes) await node.redis.call('CLUSTER', 'SETSLOT', slot, 'NODE', to.id);
    answers.push(await turn()); // the client's map is stale: MOVED, followed
    // Each turn's checks were answered alike: a batch is one command, redirected or refused as one.
    for (const answer of answers) expect(new Set(answer).size).toBe(1);
    const allowedTurns = answers.filter((answer) => answer[0] === 'allowed').length;
    // The turn while the slot's keys were split: retried by the client until it gave up, and
    // reported with its code; never counted in part.
    // (ioredis gives up after following redirections, and names the last reply: TRYAGAIN, or MOVED
    // when it went on to ask another node. GLIDE retries TRYAGAIN until its requestTimeout, here
    // the limiter's timeoutMs: the turn times out, and nothing is sent after.)
    const refused = answers.map((answer) => answer[0]).filter((answer) => answer !== 'allowed');
    expect(refused.length).toBe(answers.length - allowedTurns);
    const refusal = clientName === 'glide' ? /^SWL_TIMEOUT undefined$/ : /^SWL_STORE_ERROR (TRYAGAIN|MOVED|ASK)$/;
    for (const answer of refused) expect(answer).toMatch(refusal);
    expect(refused.length).toBeLessThanOrEqual(1);
    expect(allowedTurns).toBeGreaterThanOrEqual(4);
    // Exactly what was allowed is counted, on the target master.
    for (const id of ids) expect((await limiter.peek(id, { cost: 0 })).estimated).toBe(allowedTurns);
    expect(await to.redis.exists(...keys)).toBe(keys.length);
    expect(rejections.reasons).toEqual([]);
  });

  test('a node batch through a migration of one of its slots: each check served where its key is, none refused, counts exact', async () => {
    const limiter = clusterLimiter('spread', 100, 3_000);
    // Five identifiers in the slot that moves (a hash tag), five in other slots of its master:
    // the checks of a turn share one node batch, keys of several slots.
    const moving = ['a', 'b', 'c', 'd', 'e'].map((name) => `{team}:${name}`);
    const slot = await admin.slotOf(limiter.keyFor(moving[0]));
    const source = await admin.ownerOf(slot);
    const staying: string[] = [];
    for (let i = 0; staying.length < 5; i++) {
      const keySlot = await admin.slotOf(limiter.keyFor(`user-${i}`));
      if (keySlot !== slot && (await admin.ownerOf(keySlot)) === source) staying.push(`user-${i}`);
    }
    const ids = [...moving, ...staying];
    const movingKeys = moving.map((id) => limiter.keyFor(id));
    const to = admin.nodes.find((node) => node.port !== source)!;
    const sourceNode = admin.nodes.find((node) => node.port === source)!;
    const turn = () => oneTurn(limiter, ids);
    const scriptErrors = async () => Number(/total_error_replies:(\d+)/.exec(await sourceNode.redis.info('stats'))?.[1]);
    const answers: string[][] = [await turn()];
    await to.redis.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', sourceNode.id);
    await sourceNode.redis.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', to.id);
    answers.push(await turn()); // every key still on the source: the node batch is served there whole
    const errorsBefore = await scriptErrors();
    await sourceNode.redis.call('MIGRATE', '127.0.0.1', to.port, '', 0, 5_000, 'KEYS', movingKeys[0], movingKeys[1]);
    // Two keys moved: the source serves the rest, refuses those two in its node batch; sent again, ASK to the target.
    answers.push(await turn());
    expect((await scriptErrors()) - errorsBefore).toBeGreaterThanOrEqual(2);
    await sourceNode.redis.call('MIGRATE', '127.0.0.1', to.port, '', 0, 5_000, 'KEYS', ...movingKeys.slice(2));
    answers.push(await turn()); // every moving key on the target: ASK
    for (const node of admin.nodes) await node.redis.call('CLUSTER', 'SETSLOT', slot, 'NODE', to.id);
    answers.push(await turn()); // the client's map is stale: the source refuses, MOVED is followed
    answers.push(await turn()); // and the map is current again
    for (const answer of answers) expect(answer).toEqual(ids.map(() => 'allowed'));
    for (const id of ids) expect([id, (await limiter.peek(id, { cost: 0 })).estimated]).toEqual([id, answers.length]);
    expect(await to.redis.exists(...movingKeys)).toBe(movingKeys.length);
    expect(rejections.reasons).toEqual([]);
  });

  test('a master that stalls: checks held behind its node batch wait 10 ms at most, are never sent once their caller timed out, and hold back no other master', async () => {
    // Each on a store of its own: a store holds back only checks behind its own calls.
    const shortLived = clusterLimiter('stall-short', 1000, 5);
    const usual = clusterLimiter('stall-usual', 1000, TIMEOUT_MS);
    const stalled = cluster.nodes[0].port;
    const other = cluster.nodes[1].port;
    const idsOf = async (prefix: string) => {
      const byNode = await identifiersByNode(prefix, 4);
      return { stalledIds: byNode.get(stalled)!, otherIds: byNode.get(other)! };
    };
    const shortIds = await idsOf('stall-short');
    const usualIds = await idsOf('stall-usual');
    const stores = [
      { limiter: shortLived, ids: shortIds.stalledIds },
      { limiter: usual, ids: usualIds.stalledIds },
    ];
    // Loads the node batch script on every master (a check of shortLived may not be answered within 5 ms on a busy machine).
    await oneTurn(
      usual,
      Array.from({ length: 30 }, (_, i) => `warm-${i}`),
    );

    const awake = admin.nodes.find((node) => node.port === stalled)!.redis.call('DEBUG', 'SLEEP', '1');
    // Let the DEBUG reach the master before anything else does.
    await sleep(20);
    // On each store, the stalled master's first two checks leave at the end of their turn and wait
    // in Redis; the next two, started a turn later, wait for their answer.
    const endOfTurn = () => new Promise((resolve) => setImmediate(resolve));
    const firstTurn = stores.map(({ limiter, ids }) => oneTurn(limiter, ids.slice(0, 2)));
    await endOfTurn();
    const secondTurn = stores.map(({ limiter, ids }) => oneTurn(limiter, ids.slice(2)));
    // The other master's checks, started meanwhile, are answered as usual.
    const started = performance.now();
    expect(await oneTurn(usual, usualIds.otherIds)).toEqual(['allowed', 'allowed', 'allowed', 'allowed']);
    const otherMs = performance.now() - started;
    expect(otherMs).toBeLessThan(TIMEOUT_MS);
    for (const answers of [...(await Promise.all(firstTurn)), ...(await Promise.all(secondTurn))]) {
      expect(answers).toEqual(['SWL_TIMEOUT undefined', 'SWL_TIMEOUT undefined']);
    }
    await awake;
    const counted = async (limiter: Limiter, ids: readonly string[]) =>
      Promise.all(ids.map(async (id) => (await limiter.peek(id, { cost: 0 })).estimated));
    // Timed out at 5 ms, before they had waited 10: never sent. (Read with the usual timeout: a
    // peek may take more than 5 ms on a busy machine.)
    expect(await counted(clusterLimiter('stall-short', 1000, TIMEOUT_MS), shortIds.stalledIds)).toEqual([1, 1, 0, 0]);
    // Sent after 10 ms, and counted when the master woke up, like every check written to it.
    expect(await counted(usual, usualIds.stalledIds)).toEqual([1, 1, 1, 1]);
    expect(rejections.reasons).toEqual([]);
    figures.push(`  ${clientName}, one master stalled 1 s: another master's four checks answered in ${otherMs.toFixed(0)} ms`);
  });

  test("one master SIGKILLed: the others' identifiers stay exactly limited, the dead one's fail open or closed within timeoutMs", async () => {
    const apps: App[] = [];
    try {
      const store = new RedisStore({ client });
      const common = { store, limit: 5, window: '1h', timeoutMs: TIMEOUT_MS, denyCacheSize: 0, prefix: 'kill' } as const;
      const limiter = createLimiter(common);
      const identify = (request: { headers: Record<string, string | string[] | undefined> }) =>
        request.headers['x-id'] as string | undefined;
      // What the apps' onError hears of the dead master: coded failures only.
      const failures: unknown[] = [];
      const onError = (error: unknown) => failures.push(error);
      const open = await startApp('express', { ...common, identify, failMode: 'open', onError });
      const closed = await startApp('fastify', { ...common, identify, failMode: 'closed', onError });
      apps.push(open, closed);

      const victim = cluster.nodes[2];
      const byNode = await identifiersByNode('kill', 6);
      const doomed = byNode.get(victim.port)!;
      const surviving = cluster.nodes.filter((node) => node !== victim).flatMap((node) => byNode.get(node.port)!);
      // Two counted for everyone before the kill.
      for (const id of [...doomed, ...surviving]) {
        for (let i = 0; i < 2; i++) expect((await limiter.check(id)).allowed).toBe(true);
      }

      await victim.kill();
      const survivorTimes: number[] = [];
      const doomedTimes: number[] = [];

      /** Survivors: 3 more allowed, then denied. Doomed: every check fails, within the bound. */
      async function verify(survivors: string[], doomedIds: string[]): Promise<void> {
        for (const id of survivors) {
          const results = [];
          for (let i = 0; i < 4; i++) results.push(await timed(limiter, id));
          expect(results.map((result) => result.error ?? result.decision!.allowed)).toEqual([true, true, true, false]);
          survivorTimes.push(...results.map((result) => result.ms));
        }
        for (const id of doomedIds) {
          const result = await timed(limiter, id);
          expect(result.decision).toBeUndefined();
          expect(result.ms).toBeLessThanOrEqual(TIMEOUT_MS + MARGIN_MS + loopDelay.maxMs());
          doomedTimes.push(result.ms);
          const [viaOpen, viaClosed] = await Promise.all([get(open.port, { 'x-id': id }), get(closed.port, { 'x-id': id })]);
          expect({ status: viaOpen.status, limited: viaOpen.limited }).toEqual({ status: 200, limited: false });
          expect({ status: viaClosed.status, limited: viaClosed.limited }).toEqual({ status: 503, limited: false });
          expect(Math.max(viaOpen.ms, viaClosed.ms)).toBeLessThanOrEqual(TIMEOUT_MS + MARGIN_MS + loopDelay.maxMs());
          doomedTimes.push(viaOpen.ms, viaClosed.ms);
        }
      }

      // Right after the kill, while the other masters still think it may come back...
      await verify(
        surviving.filter((_, i) => i % 2 === 0),
        doomed.slice(0, 3),
      );
      // ...and once they have marked it failed (cluster-node-timeout is 2 s).
      await sleep(2_500);
      await verify(
        surviving.filter((_, i) => i % 2 === 1),
        doomed.slice(3),
      );
      // Surviving identifiers over HTTP: exactly at their limit (5 counted), so denied.
      for (const id of surviving.slice(0, 2)) {
        expect(await get(open.port, { 'x-id': id })).toMatchObject({ status: 429, limited: true });
        expect(await get(closed.port, { 'x-id': id })).toMatchObject({ status: 429, limited: true });
      }
      expect(rejections.reasons).toEqual([]);
      expect(failures.length).toBeGreaterThan(0);
      for (const failure of failures) expect((failure as { code?: string }).code).toMatch(/^SWL_(TIMEOUT|STORE_UNAVAILABLE|STORE_ERROR)$/);
      figures.push(
        `  ${clientName}, master killed: ${surviving.length} surviving identifiers exact, checks ${Math.max(...survivorTimes).toFixed(0)} ms at most; ` +
          `dead master's identifiers failed after ${Math.min(...doomedTimes).toFixed(0)}-${Math.max(...doomedTimes).toFixed(0)} ms`,
      );
    } finally {
      for (const app of apps) await app.close();
    }
  });
});

/**
 * node-redis with its defaults (offline queue on in every node client): checks for a master that
 * is down wait in that node's queue, the limiter fails them at timeoutMs, and node-redis would
 * write them to the node once it is back. The store aborts them when the node connects again
 * (`node-connect`, which node-redis 6 emits for every connection of a node): after the restart,
 * the (emptied) keys hold only what is counted after it.
 */
describe('node-redis cluster with its defaults (offline queue on)', () => {
  const supported = nodeRedisMajor() >= 6;
  // node-redis's defaults but for a fixed 3.5 s reconnection delay and a 20 s command timeout:
  // a restarted master answers CLUSTERDOWN for its first 2 s or so (it lets the cluster
  // reconfigure it first), which would reject a queued check and prove nothing; by 3.5 s it
  // runs what it is sent, and the checks are still queued.
  clusterOfEachTest((startupNodes) =>
    nodeRedisCluster(startupNodes, { socket: { reconnectStrategy: 3_500 } }, { commandOptions: { timeout: 20_000 } }),
  );
  const { rejections } = watchEachTest();

  (supported ? test : test.skip)('checks failed while a master is down are not counted when it comes back', async () => {
    const limiter = clusterLimiter('back', 5, TIMEOUT_MS);
    const victim = cluster.nodes[1];
    const doomed = (await identifiersByNode('back', 3)).get(victim.port)!;
    for (const id of doomed) expect((await limiter.check(id)).remaining).toBe(4);
    await victim.kill();
    await sleep(100);
    const failed = await Promise.all(doomed.map((id) => timed(limiter, id)));
    expect(failed.map((result) => result.error)).toEqual(doomed.map(() => 'RateLimitTimeoutError'));
    await victim.restart();
    const deadline = Date.now() + 10_000;
    let first: Awaited<ReturnType<typeof timed>>;
    do {
      await sleep(100);
      first = await timed(limiter, doomed[0]);
    } while (first.decision === undefined && Date.now() < deadline);
    await sleep(300);
    // The restarted master lost its data: each key holds this check alone, not the failed ones too.
    expect(first.decision?.remaining).toBe(4);
    for (const id of doomed.slice(1)) expect((await limiter.check(id)).remaining).toBe(4);
    expect(rejections.reasons).toEqual([]);
    figures.push(
      `  node-redis defaults, master killed and restarted: ${doomed.length} checks failed at ${failed.map((r) => r.ms.toFixed(0)).join(', ')} ms, none counted after the restart`,
    );
  });
});
