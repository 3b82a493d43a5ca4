/**
 * Which jest project runs which test file (jest.config.ts), and what a project tells the test
 * files it runs (its setup file calls `prepareTestFile`).
 *
 * - `unit`: the files that need no Redis, and the MemoryStore half of the SPLIT files. No global
 *   setup: no redis-server is started, and none is needed (`npm run test:unit`).
 * - `redis`: every other file under test/ (but faults/, package/ and types/), against the
 *   standalone server and the three-master cluster that global-setup.ts starts; of the SPLIT
 *   files, their Redis half only.
 * - `package`: test/package/, the packed tarball installed in temporary apps: no Redis, but
 *   about 35 s, too slow for the unit loop.
 * - `faults` (jest.faults.config.ts): test/faults/, each file starting its own servers.
 *
 * A test file listed nowhere runs in the `redis` project, whole (both stores), as every file
 * did before the split. Paths are relative to the repository.
 */
import { relative, resolve } from 'node:path';

/** Files that need no Redis at all: the `unit` project runs them, whole. */
export const UNIT_FILES: readonly string[] = [
  'test/async.test.ts',
  'test/bench/accuracy.test.ts',
  'test/core/breaker.test.ts',
  'test/core/deadlines.test.ts',
  'test/docs.test.ts',
  'test/express/async-handler.test.ts',
  // Its RedisStores' clients point at a port nothing listens on: Redis down, no server needed.
  'test/express/failure.test.ts',
  'test/hono/middleware.test.ts',
  'test/http/misconfiguration.test.ts',
  'test/http/trust-all-proxies.test.ts',
  'test/nestjs/storage.test.ts',
  'test/stores/memory.test.ts',
  'test/stores/redis/batch.test.ts',
  'test/structure.test.ts',
];

/**
 * Files that run the same scenarios on a MemoryStore and on RedisStores: both projects run
 * them, `unit` the MemoryStore half (and the tests that need no store or no Redis), `redis`
 * the RedisStore half. The helpers of test/helpers/stores.ts pick the half.
 */
export const SPLIT_FILES: readonly string[] = [
  'test/algorithms/boundary-burst.test.ts',
  'test/algorithms/expiry.test.ts',
  'test/algorithms/retry-after.test.ts',
  'test/algorithms/sliding-log.test.ts',
  'test/algorithms/sliding-window.test.ts',
  'test/core/block.test.ts',
  'test/core/call-limits.test.ts',
  'test/core/concurrency.test.ts',
  'test/core/deny-cache.test.ts',
  'test/core/keys.test.ts',
  'test/core/limiter-options.test.ts',
  'test/core/refund.test.ts',
  'test/core/settle.test.ts',
  'test/core/tiers.test.ts',
  'test/core/wait.test.ts',
  'test/http/async-hooks.test.ts',
  'test/http/block-and-shadow.test.ts',
  'test/http/concurrency.test.ts',
  'test/http/cost-after.test.ts',
  'test/http/dynamic-limits.test.ts',
  'test/http/handler.test.ts',
  'test/http/skip-requests.test.ts',
  'test/http/untrusted-proxy.test.ts',
];

export type ProjectName = 'unit' | 'redis' | 'faults';

/** The variables through which global-setup.ts hands its servers to the test files. */
export const REDIS_URL_VARIABLE = 'RATEWARDEN_TEST_REDIS_URL';
export const REDIS_CLUSTER_NODES_VARIABLE = 'RATEWARDEN_TEST_REDIS_CLUSTER_NODES';
/** What a test file runs here: `memory`, `redis`, or `memory,redis` (read by test/helpers/stores.ts). */
export const STORES_VARIABLE = 'RATEWARDEN_TEST_STORES';

const root = resolve(__dirname, '../..');
const split = new Set(SPLIT_FILES);

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
    const file = relative(root, expect.getState().testPath ?? '');
    process.env[STORES_VARIABLE] = split.has(file) ? 'redis' : 'memory,redis';
  } else {
    process.env[STORES_VARIABLE] = 'memory,redis';
  }
}
