import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import type * as NodeRedis from 'redis';
import { createLimiter, type Limiter, type LimiterOptions, RedisStore, type RedisStoreClient } from '../../src';
import { REDIS_CLUSTER_NODES_VARIABLE, REDIS_URL_VARIABLE, runsStores } from './projects';

/**
 * node-redis (the `redis` package), loaded on first use: loading it takes about 0.2 s, which
 * every test file of the `unit` project (no Redis) would otherwise pay for nothing.
 */
function nodeRedis(): typeof NodeRedis {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require('redis') as typeof NodeRedis;
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

/** How the tests make (and close) the clients of one Redis client library. */
export interface RedisClientKind {
  readonly name: 'ioredis' | 'node-redis';
  /** A connected client of `url` (default: the run's standalone server), with this library's defaults and `options`. */
  standalone(url?: string, options?: Record<string, unknown>): Promise<StoreClient>;
  /** A connected client of the run's three-master cluster. */
  cluster(): Promise<StoreClient>;
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
};

/**
 * Both Redis client libraries a RedisStore takes, for `describe.each`: ioredis and node-redis
 * (the `redis` package), each for the standalone server and the cluster.
 */
export const REDIS_CLIENTS: readonly [string, RedisClientKind][] = [
  ['ioredis', IOREDIS],
  ['node-redis', NODE_REDIS],
];

/** Whether `client` is connected and ready for commands, whichever library made it. */
export function isReady(client: StoreClient): boolean {
  return 'status' in client ? client.status === 'ready' : (client.isReady ?? client.isOpen);
}

/** Closes a client of either library (in afterAll), without waiting for a server that may be gone. */
export async function closeClient(client: StoreClient): Promise<void> {
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
