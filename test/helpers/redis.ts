import { randomBytes } from 'node:crypto';
import { Cluster, Redis, type RedisOptions } from 'ioredis';

/** A client of the run's standalone server (see global-setup). Close it in afterAll. */
export function redisClient(options: RedisOptions = {}): Redis {
  const url = process.env.REDIS_URL;
  if (!url) throw new Error('REDIS_URL is not set: run the tests through jest so global-setup starts redis-server');
  return new Redis(url, options);
}

/** A client of the run's three-master cluster. */
export function clusterClient(): Cluster {
  const nodes = process.env.REDIS_CLUSTER_NODES;
  if (!nodes) throw new Error('REDIS_CLUSTER_NODES is not set');
  return new Cluster(
    nodes.split(',').map((address) => {
      const [host, port] = address.split(':');
      return { host, port: Number(port) };
    }),
  );
}

/** A key prefix no other test uses, so test files can share one server. */
export function uniquePrefix(name = 't'): string {
  return `${name}-${randomBytes(5).toString('hex')}`;
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
