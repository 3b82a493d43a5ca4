import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type * as Glide from '@valkey/valkey-glide';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type * as IoValkey from 'iovalkey';
import type * as NodeRedis from 'redis';
import {
  createLimiter,
  type GlideClient,
  type GlideClusterClient,
  type Limiter,
  type LimiterOptions,
  RedisStore,
  type RedisStoreClient,
} from '../../src';
import { REDIS_CLUSTER_NODES_VARIABLE, REDIS_URL_VARIABLE, runsStores } from './projects';

/**
 * node-redis (the `redis` package), loaded on first use: loading it takes about 0.2 s, which
 * every test file of the `unit` project (no Redis) would otherwise pay for nothing.
 */
function nodeRedis(): typeof NodeRedis {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require('redis') as typeof NodeRedis;
}

/** iovalkey, loaded on first use (as node-redis is). */
function iovalkey(): typeof IoValkey {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require('iovalkey') as typeof IoValkey;
}

/**
 * Valkey GLIDE, loaded on first use (its native core takes a while to load). Its Rust core logs
 * every error reply as a warning on the console by default (a `NOSCRIPT` the store recovers from
 * too): the tests turn that off.
 */
export function glide(): typeof Glide {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const library = require('@valkey/valkey-glide') as typeof Glide;
  library.Logger.setLoggerConfig('off');
  return library;
}

/** The request timeout the tests give GLIDE clients: the limiter's default `timeoutMs`, as docs/valkey.md recommends. */
export const GLIDE_REQUEST_TIMEOUT_MS = 500;

/** `{ host, port }` of a `redis://host:port` URL, as GLIDE takes its addresses. */
export function addressOf(url: string): { host: string; port: number } {
  const { hostname, port } = new URL(url);
  return { host: hostname, port: Number(port) };
}

/** The address global-setup.ts handed over in `variable`; never a server the developer runs. */
function harnessAddress(variable: string): string {
  const value = process.env[variable];
  if (value) return value;
  if (!runsStores('redis')) {
    throw new Error(
      `${variable} is not set: this test file runs in a jest project without Redis (unit); put what needs Redis under onRedis (test/helpers/stores.ts), or the file in the redis project (test/helpers/projects.ts)`,
    );
  }
  throw new Error(
    `${variable} is not set: run the tests through jest (npm test, npm run test:redis), whose global setup starts redis-server`,
  );
}

/** The URL of the run's standalone server (started by global-setup.ts). */
export function redisUrl(): string {
  return harnessAddress(REDIS_URL_VARIABLE);
}

/** A client of the run's standalone server (see global-setup). Close it in afterAll. */
export function redisClient(options: RedisOptions = {}): Redis {
  return new Redis(redisUrl(), options);
}

/** A client of the run's three-master cluster. */
export function clusterClient(): Cluster {
  return new Cluster(clusterNodes());
}

/** A key prefix no other test uses, so test files can share one server. */
export function uniquePrefix(name = 't'): string {
  return `${name}-${randomBytes(5).toString('hex')}`;
}

/**
 * A limiter on a RedisStore over `client`, counting under a prefix no other test uses
 * (`name-<random>`, read it as `limiter.prefix`); the other options as `createLimiter` takes them.
 */
export function redisLimiter(client: RedisStoreClient, name: string, options: Omit<LimiterOptions, 'store' | 'prefix'>): Limiter {
  return createLimiter({ store: new RedisStore({ client }), prefix: uniquePrefix(name), ...options });
}

/** A settable clock for `clock:` options. */
export function manualClock(start = 1_700_000_000_000): { now: () => number; set(ms: number): void; advance(ms: number): void } {
  let time = start;
  return {
    now: () => time,
    set(ms: number) {
      time = ms;
    },
    advance(ms: number) {
      time += ms;
    },
  };
}

/** A client a RedisStore runs on, as the tests make them: ioredis or node-redis, standalone or cluster. */
export type StoreClient = RedisStoreClient;

/** The Redis client libraries the tests run the store on. */
export type LibraryName = 'ioredis' | 'node-redis' | 'iovalkey' | 'glide';

/** How the tests make (and close) the clients of one Redis client library. */
export interface RedisClientKind {
  readonly name: LibraryName;
  /** A connected client of `url` (default: the run's standalone server), with this library's defaults and `options`. */
  standalone(url?: string, options?: Record<string, unknown>): Promise<StoreClient>;
  /** A connected client of the run's three-master cluster. */
  cluster(): Promise<StoreClient>;
  /** Options of `standalone` for a client that tries to reconnect every 20 ms or so, with no back-off. */
  readonly reconnectingFast: Record<string, unknown>;
}

/** The run's three-master cluster (started by global-setup.ts). */
function clusterNodes(): { host: string; port: number }[] {
  return harnessAddress(REDIS_CLUSTER_NODES_VARIABLE)
    .split(',')
    .map((address) => {
      const [host, port] = address.split(':');
      return { host, port: Number(port) };
    });
}

const IOREDIS: RedisClientKind = {
  name: 'ioredis',
  async standalone(url = redisUrl(), options = {}) {
    const client = new Redis(url, options as RedisOptions);
    // Expected while a test has Redis down; counted by the fault helpers, ignored here.
    client.on('error', () => undefined);
    await client.ping();
    return client;
  },
  async cluster() {
    const cluster = clusterClient();
    await cluster.ping();
    return cluster;
  },
  reconnectingFast: { maxRetriesPerRequest: 1, retryStrategy: () => 20 },
};

const IOVALKEY: RedisClientKind = {
  name: 'iovalkey',
  async standalone(url = redisUrl(), options = {}) {
    const client = new (iovalkey().Redis)(url, options);
    client.on('error', () => undefined);
    await client.ping();
    return client;
  },
  async cluster() {
    const cluster = new (iovalkey().Cluster)(clusterNodes());
    await cluster.ping();
    return cluster;
  },
  reconnectingFast: { maxRetriesPerRequest: 1, retryStrategy: () => 20 },
};

const GLIDE: RedisClientKind = {
  name: 'glide',
  standalone(url = redisUrl(), options = {}) {
    return glide().GlideClient.createClient({ addresses: [addressOf(url)], requestTimeout: GLIDE_REQUEST_TIMEOUT_MS, ...options });
  },
  cluster() {
    return glide().GlideClusterClient.createClient({ addresses: clusterNodes(), requestTimeout: GLIDE_REQUEST_TIMEOUT_MS });
  },
  // GLIDE waits factor * exponentBase ^ attempt ms (±20 %) before each attempt, at most numberOfRetries times larger.
  reconnectingFast: { connectionBackoff: { numberOfRetries: 1, factor: 20, exponentBase: 1 } },
};

const NODE_REDIS: RedisClientKind = {
  name: 'node-redis',
  async standalone(url = redisUrl(), options = {}) {
    const client = nodeRedis().createClient({ url, ...options });
    client.on('error', () => undefined);
    await client.connect();
    return client;
  },
  async cluster() {
    const cluster = nodeRedis().createCluster({ rootNodes: clusterNodes().map(({ host, port }) => ({ url: `redis://${host}:${port}` })) });
    cluster.on('error', () => undefined);
    await cluster.connect();
    return cluster;
  },
  reconnectingFast: { socket: { reconnectStrategy: 20 } },
};

/**
 * The Redis client libraries a RedisStore takes, for `describe.each`: ioredis, node-redis (the
 * `redis` package), iovalkey and Valkey GLIDE, each for the standalone server and the cluster.
 */
export const REDIS_CLIENTS: readonly [string, RedisClientKind][] = [
  ['ioredis', IOREDIS],
  ['node-redis', NODE_REDIS],
  ['iovalkey', IOVALKEY],
  ['glide', GLIDE],
];

/**
 * One library per store adapter (src/stores/redis/): ioredis, node-redis and GLIDE. iovalkey, an
 * ioredis fork, runs on the ioredis adapter: the suites about the limiter rather than the client
 * (`everyStore()`, `redisStoresPerClient()`) run on these three; the store, differential and
 * fault suites run on every library of {@link REDIS_CLIENTS}.
 */
export const ONE_CLIENT_PER_ADAPTER: readonly [string, RedisClientKind][] = REDIS_CLIENTS.filter(([name]) => name !== 'iovalkey');

/** A GLIDE client (standalone or cluster): it has `customCommand`. */
export function isGlide(client: unknown): client is GlideClient | GlideClusterClient {
  return typeof (client as { customCommand?: unknown }).customCommand === 'function';
}

/**
 * Whether `client` is connected and ready for commands, whichever library made it. A GLIDE
 * client tells nothing of its connection: it is ready when it answers a `PING` (while it
 * reconnects, the `PING` fails at its request timeout).
 */
export async function isReady(client: StoreClient): Promise<boolean> {
  if (isGlide(client))
    return client.customCommand(['PING']).then(
      () => true,
      () => false,
    );
  return 'status' in client ? client.status === 'ready' : (client.isReady ?? client.isOpen);
}

/** Closes a client of any library (in afterAll), without waiting for a server that may be gone. */
export async function closeClient(client: StoreClient): Promise<void> {
  if (isGlide(client)) {
    (client as unknown as Glide.GlideClient).close();
    return;
  }
  if ('status' in client) {
    (client as Redis | Cluster).disconnect();
    return;
  }
  (client as unknown as { destroy(): void }).destroy();
}

/** The major version of the node-redis (`redis`) package the tests load, found from its entry point (so a jest module mapping is honoured). */
export function nodeRedisMajor(): number {
  for (let dir = dirname(require.resolve('redis')); dir !== dirname(dir); dir = dirname(dir)) {
    try {
      const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { name?: string; version: string };
      if (manifest.name === 'redis') return Number(manifest.version.split('.')[0]);
    } catch {
      // no package.json here
    }
  }
  throw new Error('no package.json of redis above its entry point');
}

/**
 * Every key matching the glob `pattern`, by SCAN (never KEYS), as raw bytes: on the standalone
 * server, or on every master of a cluster.
 */
export async function keyBytesMatching(redis: Redis | Cluster, pattern: string): Promise<Buffer[]> {
  const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis];
  const keys: Buffer[] = [];
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, batch] = await node.scanBuffer(cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next.toString();
      keys.push(...batch);
    } while (cursor !== '0');
  }
  return keys;
}

/** Every key matching the glob `pattern` (see {@link keyBytesMatching}), as strings. */
export async function keysMatching(redis: Redis | Cluster, pattern: string): Promise<string[]> {
  return (await keyBytesMatching(redis, pattern)).map((key) => key.toString());
}

/** Every key a limiter with `prefix` may have written (`${prefix}:*`), on the server or every master of a cluster. */
export function keysUnder(redis: Redis | Cluster, prefix: string): Promise<string[]> {
  return keysMatching(redis, `${prefix}:*`);
}
