/**
 * The half of a test file that the running jest project runs (see test/helpers/projects.ts):
 * the `unit` project runs the MemoryStore half of a file that runs its scenarios on both
 * stores (`*.each-store.test.ts`), with every test that needs no Redis; the `redis` project
 * runs the RedisStore half.
 * A file run whole (faults, or any other file of the redis project) runs both.
 *
 * - `selectStores(rows)` keeps the rows of the stores run here, told by their names: a name
 *   starting with `MemoryStore` or with `RedisStore`.
 * - `onRedis.describe(...)`, `onRedis.test(...)`, `onRedis.beforeAll(...)`...: the parts that
 *   need Redis. `withoutRedis.*`: the parts that need none (MemoryStore, no store at all).
 *   Elsewhere they register nothing, so a test is never counted (nor skipped) twice.
 * - `storesOfTestFile()`, `redisStoresPerClient()`, `everyStore()`: the store rows a file runs
 *   its scenarios on, for `describe.each`, with their clients opened and closed for it.
 */
import type { Cluster, Redis } from 'ioredis';
import { MemoryStore, RedisStore, type Store } from '../../src';
import { runsStores, type StoreKind } from './projects';
import { closeClient, clusterClient, ONE_CLIENT_PER_ADAPTER, redisClient, type StoreClient } from './redis';

function kindOfStore(name: string): StoreKind {
  if (name.startsWith('MemoryStore')) return 'memory';
  if (name.startsWith('RedisStore')) return 'redis';
  throw new Error(`selectStores: the name of a store row starts with MemoryStore or RedisStore, got '${name}'`);
}

type StoreRow = string | readonly [string, ...unknown[]] | { readonly name: string };

function nameOf(row: StoreRow): string {
  if (typeof row === 'string') return row;
  return 'name' in row ? row.name : row[0];
}

/** The rows of `rows` (store names, `[name, ...]` rows, or `{ name }` objects) of the stores run here. */
export function selectStores<Row extends StoreRow>(rows: readonly Row[]): Row[] {
  return rows.filter((row) => runsStores(kindOfStore(nameOf(row))));
}

/** The jest functions that register tests and hooks. */
export interface TestPart {
  readonly describe: jest.Describe;
  readonly test: jest.It;
  readonly beforeAll: jest.Lifecycle;
  readonly afterAll: jest.Lifecycle;
  readonly beforeEach: jest.Lifecycle;
  readonly afterEach: jest.Lifecycle;
}

/** Stands for any of them where a part is not run: callable, any property of it (`.each`, `.only`...) is itself, it registers nothing. */
const nothing: unknown = new Proxy(() => undefined, {
  apply: () => nothing,
  get: (_target, property) => (property === 'then' ? undefined : nothing),
});

function part(kind: StoreKind): TestPart {
  if (runsStores(kind)) return { describe, test, beforeAll, afterAll, beforeEach, afterEach };
  const none = nothing as never;
  return { describe: none, test: none, beforeAll: none, afterAll: none, beforeEach: none, afterEach: none };
}

/** Tests and hooks that need Redis (a RedisStore, a client of the run's servers). */
export const onRedis: TestPart = part('redis');

/** Tests and hooks that need no Redis (a MemoryStore, or no store): run with the MemoryStore half. */
export const withoutRedis: TestPart = part('memory');

/**
 * The stores a test file runs its scenarios on, `[name, make]`: a RedisStore on the run's
 * standalone server and a MemoryStore; of these, the ones the running jest project runs. The
 * RedisStore's client is `client()` when given (a client the file opened itself, to inspect
 * keys), else one opened before the file's Redis tests and quit after them. Call once, at the
 * top level of a test file.
 */
export function storesOfTestFile(client?: () => Redis): [string, () => Store][] {
  let opened: Redis | undefined;
  if (client === undefined) {
    onRedis.beforeAll(() => {
      opened = redisClient();
    });
    onRedis.afterAll(() => opened?.quit());
  }
  const storeClient = client ?? (() => opened!);
  return selectStores<[string, () => Store]>([
    ['RedisStore', () => new RedisStore({ client: storeClient() })],
    ['MemoryStore', () => new MemoryStore({ sweepIntervalMs: 0 })],
  ]);
}

/** A store a test file runs on, with the ioredis client behind it (none for the MemoryStore) to inspect its keys. */
export interface StoreWithClient {
  readonly name: string;
  readonly make: () => Store;
  readonly redis: () => Redis | Cluster | undefined;
}

/**
 * A MemoryStore, a RedisStore on the run's standalone server and one on its cluster (`RedisStore
 * on Cluster`), each with its client; of these, the ones the running jest project runs. The
 * clients are opened before the file's Redis tests and quit after them. Call once, at the top
 * level of a test file.
 */
export function storesWithClusterOfTestFile(): StoreWithClient[] {
  let client: Redis | undefined;
  let cluster: Cluster | undefined;
  onRedis.beforeAll(async () => {
    client = redisClient();
    cluster = clusterClient();
    await cluster.ping();
  });
  onRedis.afterAll(() => Promise.all([client?.quit(), cluster?.quit()]));
  return selectStores<StoreWithClient>([
    { name: 'MemoryStore', make: () => new MemoryStore({ sweepIntervalMs: 0 }), redis: () => undefined },
    { name: 'RedisStore', make: () => new RedisStore({ client: client! }), redis: () => client },
    { name: 'RedisStore on Cluster', make: () => new RedisStore({ client: cluster! }), redis: () => cluster },
  ]);
}

/**
 * For suites that list the stores they run on: one `RedisStore` factory per client adapter
 * (named `RedisStore (ioredis)`, `RedisStore (node-redis)`, `RedisStore (glide)`), over standalone clients opened in
 * `beforeAll` and closed in `afterAll` of the calling file. None, and no client, in a jest
 * project that does not run the file's Redis half.
 */
export function redisStoresPerClient(): [string, () => RedisStore][] {
  if (!runsStores('redis')) return [];
  const clients = new Map<string, StoreClient>();
  beforeAll(async () => {
    for (const [name, kind] of ONE_CLIENT_PER_ADAPTER) clients.set(name, await kind.standalone());
  });
  afterAll(() => Promise.all([...clients.values()].map(closeClient)));
  return ONE_CLIENT_PER_ADAPTER.map(([name]) => [`RedisStore (${name})`, () => new RedisStore({ client: clients.get(name)! })]);
}

/**
 * Every store a feature must work on, for `describe.each`: `[name, make, client]` for the
 * MemoryStore (no client) and a RedisStore over each client adapter (`ONE_CLIENT_PER_ADAPTER`) on the
 * standalone server and on the cluster (`RedisStore (ioredis)`, `RedisStore on Cluster (glide)`...); of these, the
 * rows the running jest project runs. The clients are opened before the file's tests and closed
 * after them. Call once, at the top level of a test file.
 */
export function everyStore(): [string, () => Store, () => StoreClient | undefined][] {
  const clients = new Map<string, StoreClient>();
  onRedis.beforeAll(async () => {
    for (const [name, kind] of ONE_CLIENT_PER_ADAPTER) {
      clients.set(`RedisStore (${name})`, await kind.standalone());
      clients.set(`RedisStore on Cluster (${name})`, await kind.cluster());
    }
  });
  onRedis.afterAll(() => Promise.all([...clients.values()].map(closeClient)));
  const redisRows = ONE_CLIENT_PER_ADAPTER.flatMap(([name]) => [`RedisStore (${name})`, `RedisStore on Cluster (${name})`]).map(
    (storeName): [string, () => Store, () => StoreClient | undefined] => [
      storeName,
      () => new RedisStore({ client: clients.get(storeName)! }),
      () => clients.get(storeName),
    ],
  );
  return selectStores([['MemoryStore', () => new MemoryStore({ sweepIntervalMs: 0 }), () => undefined], ...redisRows]);
}
