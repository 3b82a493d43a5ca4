/**
 * Which jest project runs which test file (jest.config.ts), and what a project tells the test
 * files it runs (its setup file calls `prepareTestFile`). A file's name and place say it:
 *
 * - `*.unit.test.ts`: needs no Redis at all; the `unit` project runs it, whole. No global setup:
 *   no redis-server is started, and none is needed (`npm run test:unit`).
 * - `*.each-store.test.ts`: the same scenarios on a MemoryStore and on RedisStores; the `unit`
 *   project runs its MemoryStore half (and its tests that need no store or no Redis), the
 *   `redis` project its RedisStore half. The helpers of test/helpers/stores.ts pick the half.
 * - any other `*.test.ts`: the `redis` project runs it, whole (both stores), against the
 *   standalone server and the three-master cluster that global-setup.ts starts.
 * - under test/faults/: the `faults` project (jest.faults.config.ts), each file starting its
 *   own servers; under test/package/: the `package` project, the packed tarball installed in
 *   temporary apps (no Redis, but about 35 s, too slow for the unit loop);
 * - under test/runtimes/: the `runtimes` project (jest.runtimes.config.ts), the package run by Bun,
 *   Deno and Node against a redis-server the file starts, kills and restarts itself.
 */
import { basename } from 'node:path';

/** The `testMatch` globs of the unit project's files: whole, and their MemoryStore half. */
export const UNIT_PATTERNS: readonly string[] = ['**/*.unit.test.ts', '**/*.each-store.test.ts'];
/** What the redis project leaves out of every test file: the unit project's whole files, faults, the tarball tests, the runtime suite (patterns of paths). */
export const NOT_REDIS_PATTERNS: readonly string[] = ['\\.unit\\.test\\.ts$', '/test/faults/', '/test/package/', '/test/runtimes/'];

export type ProjectName = 'unit' | 'redis' | 'faults';

/** The variables through which global-setup.ts hands its servers to the test files. */
export const REDIS_URL_VARIABLE = 'RATEWARDEN_TEST_REDIS_URL';
export const REDIS_CLUSTER_NODES_VARIABLE = 'RATEWARDEN_TEST_REDIS_CLUSTER_NODES';
/** What a test file runs here: `memory`, `redis`, or `memory,redis` (read by `runsStores`). */
const STORES_VARIABLE = 'RATEWARDEN_TEST_STORES';

export type StoreKind = 'memory' | 'redis';

/** Whether the test file runs the stores of `kind` in this project (both, when no project said). */
export function runsStores(kind: StoreKind): boolean {
  const stores = process.env[STORES_VARIABLE];
  return stores === undefined || stores.split(',').includes(kind);
}

/**
 * Run by each project's setup file, in the environment of every test file before it loads
 * (each test file has its own copy of `process.env`). A server the developer runs is never
 * used: the code under test and the examples read REDIS_URL, so it is dropped.
 */
export function prepareTestFile(project: ProjectName): void {
  delete process.env.REDIS_URL;
  delete process.env.REDIS_CLUSTER_NODES;
  if (project === 'unit') {
    // `npm test` runs both projects in the same workers: the redis project's servers must
    // stay out of reach of the unit project, as they are under `npm run test:unit`.
    delete process.env[REDIS_URL_VARIABLE];
    delete process.env[REDIS_CLUSTER_NODES_VARIABLE];
    process.env[STORES_VARIABLE] = 'memory';
  } else if (project === 'redis') {
    const file = basename(expect.getState().testPath ?? '');
    process.env[STORES_VARIABLE] = file.endsWith('.each-store.test.ts') ? 'redis' : 'memory,redis';
  } else {
    process.env[STORES_VARIABLE] = 'memory,redis';
  }
}
