import { missingRedisBinaries, startCluster, startRedis } from '../../support/redis-server';
import { REDIS_CLUSTER_NODES_VARIABLE, REDIS_URL_VARIABLE } from './projects';

/** Ends the run with one line saying what to install when redis-server or redis-cli is missing, rather than a spawn error's stack. */
export function exitUnlessRedisInstalled(): void {
  const missing = missingRedisBinaries();
  if (missing === undefined) return;
  process.stderr.write(`\n${missing}\n`);
  process.exit(1);
}

/**
 * Global setup of the `redis` project: starts one standalone redis-server and one
 * three-master cluster for the whole run, on free ports, always: the tests never use a
 * server the developer already runs (REDIS_URL and REDIS_CLUSTER_NODES are ignored, and
 * dropped from the environment the workers inherit). The addresses reach the test workers
 * in RATEWARDEN_TEST_REDIS_URL and RATEWARDEN_TEST_REDIS_CLUSTER_NODES (read by
 * test/helpers/redis.ts). Tests isolate themselves with unique key prefixes.
 */
export default async function globalSetup(): Promise<void> {
  delete process.env.REDIS_URL;
  delete process.env.REDIS_CLUSTER_NODES;
  const stops: (() => Promise<void>)[] = [];
  (globalThis as { __redisStops?: (() => Promise<void>)[] }).__redisStops = stops;
  exitUnlessRedisInstalled();
  const server = await startRedis();
  stops.push(() => server.stop());
  process.env[REDIS_URL_VARIABLE] = server.url;
  let cluster: Awaited<ReturnType<typeof startCluster>>;
  try {
    cluster = await startCluster(3);
  } catch (error) {
    // Jest runs no global teardown after a failed setup: nothing may be left running.
    await server.stop();
    throw error;
  }
  stops.push(() => cluster.stop());
  process.env[REDIS_CLUSTER_NODES_VARIABLE] = cluster.startupNodes.map((node) => `${node.host}:${node.port}`).join(',');
}
