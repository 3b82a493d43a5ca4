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
 */
import { STORES_VARIABLE } from './projects';

export type StoreKind = 'memory' | 'redis';

/** Whether the test file runs the stores of `kind` in this project (both, when no project said). */
export function runsStores(kind: StoreKind): boolean {
  const stores = process.env[STORES_VARIABLE];
  return stores === undefined || stores.split(',').includes(kind);
}

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
