import { startCluster, startRedis } from '../../support/redis-server';

/**
 * Starts one standalone redis-server and one three-master cluster for the whole run,
 * unless REDIS_URL / REDIS_CLUSTER_NODES name existing ones. Tests isolate themselves
 * with unique key prefixes. Environment variables set here reach the test workers.
 */
export default async function globalSetup(): Promise<void> {
  const stops: (() => Promise<void>)[] = [];
  if (!process.env.REDIS_URL) {
    const server = await startRedis();
    process.env.REDIS_URL = server.url;
    stops.push(() => server.stop());
  }
  if (!process.env.REDIS_CLUSTER_NODES) {
    const cluster = await startCluster(3);
    process.env.REDIS_CLUSTER_NODES = cluster.startupNodes.map((node) => `${node.host}:${node.port}`).join(',');
    stops.push(() => cluster.stop());
  }
  (globalThis as { __redisStops?: (() => Promise<void>)[] }).__redisStops = stops;
}
