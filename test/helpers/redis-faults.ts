/**
 * Redis helpers for the fault-injection tests: servers the test owns (with `DEBUG`
 * enabled, so a test can make Redis sleep), the client configurations under test (ioredis,
 * node-redis, iovalkey and Valkey GLIDE), and small polling utilities.
 */
import { performance } from 'node:perf_hooks';
import type { GlideClient } from '@valkey/valkey-glide';
import { type Cluster, Redis, type RedisOptions } from 'ioredis';
import { Redis as IoValkey } from 'iovalkey';
import { createClient, createCluster } from 'redis';
import type { RedisStoreClient } from '../../src';
import { readCounters } from '../../src/algorithms/shared';
import { type RedisCluster, type RedisProcess, startCluster, startRedis } from '../../support/redis-server';
import { addressOf, glide, isGlide, isReady, type LibraryName } from './redis';

/** A standalone redis-server owned by the test, with `DEBUG SLEEP` allowed. */
export function startFaultRedis(extraArgs: string[] = []): Promise<RedisProcess> {
  return startRedis(['--enable-debug-command', 'yes', ...extraArgs]);
}

/**
 * One fault server for the whole calling test file, started before its tests and stopped after
 * them, with an admin client for what the tests do to it (`DEBUG SLEEP`, `SCRIPT FLUSH`).
 */
export function faultRedisOfTestFile(): { readonly redis: RedisProcess; readonly admin: QuietClient } {
  let redis: RedisProcess | undefined;
  let admin: QuietClient | undefined;
  beforeAll(async () => {
    redis = await startFaultRedis();
    admin = quietClient(redis.url);
    await waitReady(admin);
  });
  afterAll(async () => {
    admin?.disconnect();
    await redis?.stop();
  });
  return {
    get redis() {
      return redis!;
    },
    get admin() {
      return admin!;
    },
  };
}

/**
 * Fault servers for the current test: the function starts one (with `extraArgs` for
 * redis-server), and every server it started is stopped after each test.
 */
export function faultServersOfEachTest(): (extraArgs?: string[]) => Promise<RedisProcess> {
  const servers: RedisProcess[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((server) => server.stop()));
  });
  return async (extraArgs = []) => {
    const started = await startFaultRedis(extraArgs);
    servers.push(started);
    return started;
  };
}

/**
 * Store clients for the current test, of the server at `url()`: the function makes one as
 * `config` says and waits until it is ready; every client it made is closed after each test.
 */
export function faultClientsOfEachTest(url: () => string): (config: ClientConfig) => Promise<FaultClient> {
  const clients: FaultClient[] = [];
  afterEach(() => {
    for (const client of clients.splice(0)) disconnect(client);
  });
  return async (config) => {
    const client = await faultClient(url(), config);
    clients.push(client);
    await waitReady(client);
    return client;
  };
}

/** What {@link faultRedisOfEachTest} gives the current test. */
export interface FaultRedisOfTest {
  /** The test's own server, to kill and restart. */
  readonly redis: RedisProcess;
  /** The store client under test, made as the block's configuration says (not waited for). */
  readonly client: FaultClient;
  /** A client that does not retry, for what the test does to Redis (`DEBUG SLEEP`). */
  readonly admin: QuietClient;
  /** A client that reads what Redis counted. */
  readonly inspect: QuietClient;
}

/**
 * A fault server of its own for each test of the calling block, with a store client made as
 * `config` says and two quiet clients (admin, inspect); all closed, and the server stopped,
 * after each test. Call it in a `describe`, before {@link watchEachTest}.
 */
export function faultRedisOfEachTest(config: ClientConfig): FaultRedisOfTest {
  let current: FaultRedisOfTest | undefined;
  beforeEach(async () => {
    const redis = await startFaultRedis();
    current = {
      redis,
      client: await faultClient(redis.url, config),
      admin: quietClient(redis.url, { maxRetriesPerRequest: 0 }),
      inspect: quietClient(redis.url),
    };
  });
  afterEach(async () => {
    if (current === undefined) return;
    const { redis, client, admin, inspect } = current;
    current = undefined;
    disconnect(client);
    admin.disconnect();
    inspect.disconnect();
    await redis.stop();
  });
  const get = (): FaultRedisOfTest => {
    if (current === undefined) throw new Error('faultRedisOfEachTest: read in a test only');
    return current;
  };
  return {
    get redis() {
      return get().redis;
    },
    get client() {
      return get().client;
    },
    get admin() {
      return get().admin;
    },
    get inspect() {
      return get().inspect;
    },
  };
}

/** A store client to make: which library, with which options. */
export interface ClientConfig {
  readonly library: LibraryName;
  readonly options: Record<string, unknown>;
}

/** The limiter's `timeoutMs` in the outage tests. */
export const FAULT_TIMEOUT_MS = 200;

/** The request timeout of GLIDE's recommended configuration here: 50 ms shorter than {@link FAULT_TIMEOUT_MS}, as docs/valkey.md recommends. */
export const GLIDE_FAULT_REQUEST_TIMEOUT_MS = FAULT_TIMEOUT_MS - 50;

/** GLIDE's `requestTimeout` when none is given. */
const GLIDE_DEFAULT_REQUEST_TIMEOUT_MS = 250;

/** How long a GLIDE client holds a command before it fails it (its `requestTimeout`); undefined for the other libraries. */
export function glideRequestTimeoutOf(config: ClientConfig): number | undefined {
  if (config.library !== 'glide') return undefined;
  const requestTimeout = config.options.requestTimeout;
  return typeof requestTimeout === 'number' ? requestTimeout : GLIDE_DEFAULT_REQUEST_TIMEOUT_MS;
}

/**
 * How long a check sent to a Redis that does not answer waits before it fails: the limiter's
 * `timeoutMs`, or a GLIDE client's `requestTimeout` when that is shorter (GLIDE answers first).
 */
export function waitBoundOf(config: ClientConfig, timeoutMs: number): number {
  return Math.min(timeoutMs, glideRequestTimeoutOf(config) ?? Infinity);
}

/**
 * The client configurations every outage test runs with: for ioredis, the README's
 * recommendation, ioredis' defaults (offline queue on, 20 retries per request) and the
 * recommendation with auto-pipelining; for node-redis, the README's recommendation and
 * node-redis' defaults (offline queue on, reconnection with back-off); for iovalkey (an ioredis
 * fork, the same adapter), the recommendation and its defaults; for GLIDE, the recommendation
 * (`requestTimeout` 50 ms shorter than the tests' `timeoutMs`) and its defaults (`requestTimeout` 250 ms).
 */
export const CLIENT_CONFIGS: readonly [string, ClientConfig][] = [
  [
    'ioredis recommended (enableOfflineQueue: false, maxRetriesPerRequest: 1)',
    { library: 'ioredis', options: { enableOfflineQueue: false, maxRetriesPerRequest: 1 } },
  ],
  ['ioredis defaults (offline queue, maxRetriesPerRequest: 20)', { library: 'ioredis', options: {} }],
  // The README's example client: the recommendation plus auto-pipelining (checks travel in pipelines).
  [
    'ioredis README (recommended + enableAutoPipelining)',
    { library: 'ioredis', options: { enableOfflineQueue: false, maxRetriesPerRequest: 1, enableAutoPipelining: true } },
  ],
  ['node-redis recommended (disableOfflineQueue: true)', { library: 'node-redis', options: { disableOfflineQueue: true } }],
  ['node-redis defaults (offline queue, reconnection back-off)', { library: 'node-redis', options: {} }],
  [
    'iovalkey recommended (enableOfflineQueue: false, maxRetriesPerRequest: 1)',
    { library: 'iovalkey', options: { enableOfflineQueue: false, maxRetriesPerRequest: 1 } },
  ],
  ['iovalkey defaults (offline queue, maxRetriesPerRequest: 20)', { library: 'iovalkey', options: {} }],
  [
    `glide recommended (requestTimeout: ${GLIDE_FAULT_REQUEST_TIMEOUT_MS}, 50 ms shorter than the limiter's timeoutMs)`,
    { library: 'glide', options: { requestTimeout: GLIDE_FAULT_REQUEST_TIMEOUT_MS } },
  ],
  [`glide defaults (requestTimeout ${GLIDE_DEFAULT_REQUEST_TIMEOUT_MS} ms)`, { library: 'glide', options: {} }],
];

/** The recommended configuration of each library, for the tests that do not vary the client. */
export const RECOMMENDED_CONFIGS: readonly [string, ClientConfig][] = CLIENT_CONFIGS.filter(([name, { library }]) =>
  name.startsWith(`${library} recommended`),
);

/** A store client whose `error` events (expected while Redis is down) are counted, not printed (GLIDE emits none: 0). */
export type FaultClient = RedisStoreClient & { errors: number };

/**
 * Makes a store client of `url` as `config` says, and starts connecting it (see {@link waitReady});
 * a GLIDE client is connected when this resolves (GLIDE's `createClient` connects).
 */
export async function faultClient(url: string, config: ClientConfig): Promise<FaultClient> {
  if (config.library === 'ioredis') return quietClient(url, config.options as RedisOptions);
  if (config.library === 'iovalkey') {
    const client = Object.assign(new IoValkey(url, config.options), { errors: 0 });
    client.on('error', () => {
      client.errors++;
    });
    return client;
  }
  if (config.library === 'glide') {
    const client = await glide().GlideClient.createClient({ addresses: [addressOf(url)], ...config.options });
    return Object.assign(client, { errors: 0 });
  }
  const client = Object.assign(createClient({ url, ...config.options }), { errors: 0 });
  client.on('error', () => {
    client.errors++;
  });
  // Errors before the first connection are counted above; waitReady reports a client that never connects.
  client.connect().catch(() => undefined);
  return client;
}

/**
 * When `client` is next ready (its `ready` event; for GLIDE, which has none, the answer of a
 * `PING` sent again at once after each failure: while GLIDE reconnects it holds each one up to its
 * request timeout), as `performance.now()`.
 */
export async function nextReady(client: RedisStoreClient): Promise<number> {
  if (!isGlide(client)) {
    const emitter = client as unknown as { once(event: 'ready', listener: () => void): unknown };
    return new Promise((resolve) => emitter.once('ready', () => resolve(performance.now())));
  }
  for (;;) {
    const sent = performance.now();
    const answered = await client.customCommand(['PING']).then(
      () => true,
      () => false,
    );
    if (answered) return performance.now();
    // A failure at once (no connection to wait for): do not spin.
    if (performance.now() - sent < 5) await sleep(5);
  }
}

/** A node-redis cluster client of `startupNodes`, with `defaults` for its node clients and other `options`; connected. */
export async function nodeRedisCluster(
  startupNodes: readonly { host: string; port: number }[],
  defaults: Record<string, unknown>,
  options: Record<string, unknown> = {},
): Promise<RedisStoreClient> {
  const cluster = createCluster({
    ...options,
    rootNodes: startupNodes.map(({ host, port }) => ({ url: `redis://${host}:${port}` })),
    defaults,
  });
  cluster.on('error', () => undefined);
  await cluster.connect();
  return cluster;
}

/** Closes a store client of any library at once, whatever state its connection is in. */
export function disconnect(client: RedisStoreClient): void {
  if (isGlide(client)) {
    (client as unknown as GlideClient).close();
    return;
  }
  if ('status' in client) {
    // disconnect() on an ended connection would arm a 2 s timer for a socket already gone.
    if (client.status !== 'end') (client as Redis | Cluster).disconnect();
    return;
  }
  if (client.isOpen) (client as unknown as { destroy(): void }).destroy();
}

/** An ioredis client whose `error` events (expected while Redis is down) are counted, not printed. */
export type QuietClient = Redis & { errors: number };

/** A client whose `error` events (expected while Redis is down) are counted, not printed. */
export function quietClient(url: string, options: RedisOptions = {}): QuietClient {
  const client = new Redis(url, options) as QuietClient;
  client.errors = 0;
  client.on('error', () => {
    client.errors++;
  });
  return client;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `predicate` every 10 ms until it holds, or throws after `timeoutMs`. */
export async function waitFor(predicate: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

export function waitReady(client: RedisStoreClient, timeoutMs = 10_000): Promise<void> {
  return waitFor(() => isReady(client), timeoutMs, 'the client to be ready');
}

/** Every key of a standalone server, by SCAN (never KEYS). */
export async function scanAll(client: Redis): Promise<string[]> {
  const keys: string[] = [];
  let cursor = '0';
  do {
    const [next, batch] = await client.scan(cursor, 'COUNT', 1000);
    keys.push(...batch);
    cursor = next;
  } while (cursor !== '0');
  return keys;
}

/**
 * Units counted in a sliding-window key (one tier): its value is `index:current:previous` (base 36),
 * and a server that has lived a few seconds holds at most one window boundary, so
 * `current + previous` is everything counted. 0 when the key does not exist.
 */
export async function slidingWindowCount(client: Redis, key: string): Promise<number> {
  const value = await client.get(key);
  if (value === null) return 0;
  const [, current, previous] = readCounters(value.split(' ')[0]);
  return current + previous;
}

/**
 * A three-master cluster in which losing one master leaves the others serving their slots, and
 * whose masters take `DEBUG` (to stall one).
 */
export async function startPartialCoverageCluster(): Promise<RedisCluster> {
  const cluster = await startCluster(3, ['--enable-debug-command', 'yes']);
  for (const node of cluster.nodes) {
    const admin = new Redis(node.port, '127.0.0.1');
    try {
      // By default a cluster missing any slot refuses every key (CLUSTERDOWN); the test is
      // about identifiers on the surviving masters, so let them keep serving.
      await admin.config('SET', 'cluster-require-full-coverage', 'no');
    } finally {
      admin.disconnect();
    }
  }
  return cluster;
}

export type { RedisCluster, RedisProcess };

/** Direct (non-cluster) admin connections to every node of a cluster, with node ids. */
export interface ClusterAdmin {
  readonly nodes: { readonly port: number; readonly id: string; readonly redis: Redis }[];
  /** CLUSTER KEYSLOT. */
  slotOf(key: string): Promise<number>;
  /** The port of the master serving `slot`, from CLUSTER SLOTS on a live node. */
  ownerOf(slot: number): Promise<number>;
  /** Moves `slot` and its keys from one master to another, as `redis-cli --cluster reshard` does. */
  migrateSlot(slot: number, fromPort: number, toPort: number, between?: () => Promise<void>): Promise<void>;
  disconnect(): void;
}

export async function clusterAdmin(cluster: RedisCluster): Promise<ClusterAdmin> {
  const nodes = await Promise.all(
    cluster.nodes.map(async (node) => {
      // No reconnection: a killed node's admin connection just ends.
      const redis = quietClient(`redis://127.0.0.1:${node.port}`, { maxRetriesPerRequest: 0, retryStrategy: () => null });
      const id = (await redis.call('CLUSTER', 'MYID')) as string;
      return { port: node.port, id, redis };
    }),
  );
  const byPort = (port: number) => {
    const node = nodes.find((candidate) => candidate.port === port);
    if (!node) throw new Error(`no node on port ${port}`);
    return node;
  };
  const live = () => {
    const node = nodes.find((candidate) => candidate.redis.status === 'ready');
    if (!node) throw new Error('no live node');
    return node.redis;
  };
  return {
    nodes,
    async slotOf(key) {
      return (await live().call('CLUSTER', 'KEYSLOT', key)) as number;
    },
    async ownerOf(slot) {
      const ranges = (await live().call('CLUSTER', 'SLOTS')) as [number, number, [string, number, string]][];
      const range = ranges.find(([start, end]) => slot >= start && slot <= end);
      if (!range) throw new Error(`slot ${slot} is not served`);
      return range[2][1];
    },
    async migrateSlot(slot, fromPort, toPort, between) {
      const from = byPort(fromPort);
      const to = byPort(toPort);
      await to.redis.call('CLUSTER', 'SETSLOT', slot, 'IMPORTING', from.id);
      await from.redis.call('CLUSTER', 'SETSLOT', slot, 'MIGRATING', to.id);
      await between?.();
      for (;;) {
        const keys = (await from.redis.call('CLUSTER', 'GETKEYSINSLOT', slot, 100)) as string[];
        if (keys.length === 0) break;
        await from.redis.call('MIGRATE', '127.0.0.1', to.port, '', 0, 5_000, 'KEYS', ...keys);
      }
      await between?.();
      for (const node of [to, from, ...nodes.filter((other) => other !== to && other !== from)]) {
        await node.redis.call('CLUSTER', 'SETSLOT', slot, 'NODE', to.id);
      }
    },
    disconnect() {
      // disconnect() on an ended connection would arm a 2 s timer for a socket already gone.
      for (const node of nodes) if (node.redis.status !== 'end') node.redis.disconnect();
    },
  };
}
