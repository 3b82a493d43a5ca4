/**
 * One benchmark server, run as a child process by `bench/run.ts` so that the load
 * generator and the orchestrator never share its event loop.
 *
 * Configured by environment:
 * - BENCH_FRAMEWORK: `express` | `fastify`
 * - BENCH_LIMITER:   `bare` | `swl` (this package) | `swlap` (this package, client with auto-pipelining)
 *                    | `swlnr` (this package over node-redis, the `redis` package, as the README recommends it)
 *                    | `incr` (no limiter: one auto-pipelined INCR + PEXPIRE per request, the floor of allowed traffic)
 *                    | `swlgl` (this package over Valkey GLIDE), `swliv` (this package over iovalkey), as docs/valkey.md recommends them
 *                    | `swlfw`, `swltb`, `swlsl`, `swlpw` (this package with the fixed window, token bucket, sliding log or precise window algorithm)
 *                    | `floor` (no limiter: a hook that answers every request with the 429 this package sends) | `erl` (express-rate-limit + rate-limit-redis)
 *                    | `rlf` (rate-limiter-flexible RateLimiterRedis) | `frl` (@fastify/rate-limit)
 * - BENCH_LIMIT, BENCH_WINDOW_MS: the same limit for every limiter
 * - BENCH_REDIS_PORT: the redis-server on loopback
 * - BENCH_REDIS_CLUSTER: comma-separated ports of a Redis Cluster's masters on loopback: when set,
 *   every limiter's client is a cluster client of it (ioredis `Cluster`, node-redis `createCluster`,
 *   GLIDE `GlideClusterClient`, iovalkey `Cluster`)
 * - BENCH_PEER_CLIENT: `default` (peers get `new Redis(port)`, as their docs show) or `same`
 *   (peers get the same client options as this package)
 * - BENCH_TRACE: `1` to keep the server's GC pauses and event-loop delay; each SIGUSR2 prints
 *   those since the last one as `TRACE <json>` on stdout (a {@link GcTrace})
 *
 * Every limiter identifies a request by its `x-id` header, and the route answers a short
 * text. Prints `READY <port>` on stdout once Redis is connected and the server listens.
 */
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import Redis, { Cluster, type RedisOptions } from 'ioredis';
import { Redis as IoValkey, Cluster as IoValkeyCluster } from 'iovalkey';
import { createClient, createCluster } from 'redis';
import type { RedisStoreClient } from '../src';
import { isScavenge } from './gc';

const framework = process.env.BENCH_FRAMEWORK ?? 'express';
const limiterName = process.env.BENCH_LIMITER ?? 'bare';
const limit = Number(process.env.BENCH_LIMIT ?? 1_000_000_000);
const windowMs = Number(process.env.BENCH_WINDOW_MS ?? 60_000);
const redisPort = Number(process.env.BENCH_REDIS_PORT ?? 6379);
const clusterPorts = (process.env.BENCH_REDIS_CLUSTER ?? '').split(',').filter(Boolean).map(Number);
const peerClient = process.env.BENCH_PEER_CLIENT ?? 'default';
/** The algorithm of this package's limiter: the sliding window unless the limiter's name says another. */
const algorithm =
  ({ swlfw: 'fixed-window', swltb: 'token-bucket', swlsl: 'sliding-log', swlpw: 'precise-window' } as const)[limiterName] ??
  'sliding-window';
/** Each server counts under its own key prefix, so no two share (or clobber) a key. */
const prefix = process.env.BENCH_PREFIX ?? `${framework}-${limiterName}`;

/** The client options the README recommends for this package's limiter (auto-pipelining left off). */
export const RECOMMENDED_CLIENT: RedisOptions = { enableOfflineQueue: false, maxRetriesPerRequest: 1 };
/** The same with auto-pipelining (limiter `swlap`), which the README advised at first, for comparison. */
const WITH_AUTOPIPELINING: RedisOptions = { ...RECOMMENDED_CLIENT, enableAutoPipelining: true };

const BODY = 'ok';

/**
 * The floor of allowed traffic (limiter `incr`): no limiter, one INCR and one PEXPIRE per request
 * on an auto-pipelined client with this package's options, the least any Redis-backed limiter that
 * counts a request can send. No limiter can beat it.
 */
async function incrementer(): Promise<(id: string) => Promise<unknown>> {
  const client = await connect(WITH_AUTOPIPELINING);
  return (id) => {
    const key = `${prefix}:${id}`;
    return Promise.all([client.incr(key), client.pexpire(key, windowMs)]);
  };
}

async function connect(options: RedisOptions): Promise<Redis> {
  if (clusterPorts.length > 0) {
    // The same options on a Cluster: the offline queue and auto-pipelining are the cluster's own,
    // the rest go to each node's connection.
    const { enableOfflineQueue, enableAutoPipelining, ...redisOptions } = options;
    const cluster = new Cluster(
      clusterPorts.map((port) => ({ host: '127.0.0.1', port })),
      { lazyConnect: true, redisOptions, ...(enableOfflineQueue === undefined ? {} : { enableOfflineQueue }), enableAutoPipelining },
    );
    await cluster.connect();
    // The peers' types ask for a `Redis`; a `Cluster` offers the same commands.
    return cluster as unknown as Redis;
  }
  const client = new Redis({ host: '127.0.0.1', port: redisPort, lazyConnect: true, ...options });
  await client.connect();
  return client;
}

/** The GLIDE client docs/valkey.md recommends: requestTimeout 50 ms shorter than the limiter's timeoutMs (its default, 500 ms). */
async function glideClient(): Promise<RedisStoreClient> {
  const { GlideClient, GlideClusterClient, Logger } = await import('@valkey/valkey-glide');
  // Its Rust core logs every error reply (the first NOSCRIPT too) on stdout, where READY is read.
  Logger.setLoggerConfig('off');
  const requestTimeout = 450;
  if (clusterPorts.length > 0) {
    return GlideClusterClient.createClient({ addresses: clusterPorts.map((port) => ({ host: '127.0.0.1', port })), requestTimeout });
  }
  return GlideClient.createClient({ addresses: [{ host: '127.0.0.1', port: redisPort }], requestTimeout });
}

/** An iovalkey client with the options recommended for ioredis (iovalkey is its fork). */
async function iovalkeyClient(): Promise<RedisStoreClient> {
  // RECOMMENDED_CLIENT's values, typed with iovalkey's own options.
  const { enableOfflineQueue, maxRetriesPerRequest } = RECOMMENDED_CLIENT;
  if (clusterPorts.length > 0) {
    const cluster = new IoValkeyCluster(
      clusterPorts.map((port) => ({ host: '127.0.0.1', port })),
      { lazyConnect: true, redisOptions: { maxRetriesPerRequest }, enableOfflineQueue },
    );
    await cluster.connect();
    return cluster as unknown as RedisStoreClient;
  }
  const client = new IoValkey({ host: '127.0.0.1', port: redisPort, lazyConnect: true, enableOfflineQueue, maxRetriesPerRequest });
  await client.connect();
  return client as unknown as RedisStoreClient;
}

/** This package's client for limiter `swl`, `swlap`, `swlnr`, `swlgl`, `swliv` or another algorithm's. */
async function storeClient(): Promise<RedisStoreClient> {
  if (limiterName === 'swlgl') return glideClient();
  if (limiterName === 'swliv') return iovalkeyClient();
  if (limiterName === 'swlnr' && clusterPorts.length > 0) {
    const cluster = createCluster({
      rootNodes: clusterPorts.map((port) => ({ url: `redis://127.0.0.1:${port}` })),
      defaults: { disableOfflineQueue: true },
    });
    cluster.on('error', (error: Error) => process.stderr.write(`node-redis: ${error.message}\n`));
    await cluster.connect();
    return cluster;
  }
  if (limiterName === 'swlnr') {
    // The node-redis client the README recommends for the limiter.
    const client = createClient({ socket: { host: '127.0.0.1', port: redisPort }, disableOfflineQueue: true });
    client.on('error', (error: Error) => process.stderr.write(`node-redis: ${error.message}\n`));
    await client.connect();
    return client;
  }
  return connect(limiterName === 'swlap' ? WITH_AUTOPIPELINING : RECOMMENDED_CLIENT);
}

function peerOptions(): RedisOptions {
  return peerClient === 'same' ? RECOMMENDED_CLIENT : {};
}

function idOf(headers: Record<string, string | string[] | undefined>): string {
  const id = headers['x-id'];
  return typeof id === 'string' ? id : 'anonymous';
}

/** The three legacy headers, as this package and the other libraries send by default. */
function legacyHeaders(set: (name: string, value: string) => void, remaining: number, msBeforeNext: number): void {
  set('X-RateLimit-Limit', String(limit));
  set('X-RateLimit-Remaining', String(remaining));
  set('X-RateLimit-Reset', String(Math.ceil((Date.now() + msBeforeNext) / 1000)));
}

/**
 * What this package's default 429 carries: legacy headers, Retry-After and a JSON body, sent as
 * ready JSON text as this package sends it. No limiter, no Redis.
 */
function denial(set: (name: string, value: string) => void): string {
  const retryAfter = 42;
  set('X-RateLimit-Limit', String(limit));
  set('X-RateLimit-Remaining', '0');
  set('X-RateLimit-Reset', String(Math.ceil(Date.now() / 1000) + retryAfter));
  set('Retry-After', String(retryAfter));
  set('Content-Type', 'application/json; charset=utf-8');
  return `{"error":"Too Many Requests","retryAfter":${retryAfter}}`;
}

async function rateLimiterFlexible() {
  const { RateLimiterRedis, RateLimiterRes } = await import('rate-limiter-flexible');
  const client = await connect(peerOptions());
  const limiter = new RateLimiterRedis({ storeClient: client, points: limit, duration: Math.round(windowMs / 1000), keyPrefix: prefix });
  return { limiter, RateLimiterRes };
}

async function express(): Promise<(port: number) => Promise<number>> {
  const { default: createApp } = await import('express');
  const app = createApp();
  switch (limiterName) {
    case 'bare':
      break;
    case 'swl':
    case 'swlap':
    case 'swlnr':
    case 'swlpw': {
      const { rateLimit, RedisStore } = await import('../src/express');
      const client = await storeClient();
      app.use(
        rateLimit({
          store: new RedisStore({ client }),
          algorithm,
          limit,
          window: windowMs,
          prefix,
          identify: (request) => idOf(request.headers),
        }),
      );
      break;
    }
    case 'incr': {
      const count = await incrementer();
      app.use((request, _response, next) => {
        count(idOf(request.headers)).then(() => next(), next);
      });
      break;
    }
    case 'floor':
      // Written as this package's middleware writes it: past Express's send.
      app.use((_request, response) => {
        const body = denial((name, value) => response.setHeader(name, value));
        response.status(429).end(body);
      });
      break;
    case 'erl': {
      const { rateLimit } = await import('express-rate-limit');
      const { RedisStore } = await import('rate-limit-redis');
      const client = await connect(peerOptions());
      app.use(
        rateLimit({
          windowMs,
          limit,
          keyGenerator: (request) => idOf(request.headers),
          store: new RedisStore({
            prefix: `${prefix}:`,
            // The call the rate-limit-redis README gives for ioredis.
            sendCommand: (command: string, ...args: string[]) => client.call(command, ...args) as never,
          }),
        }),
      );
      break;
    }
    case 'rlf': {
      const { limiter, RateLimiterRes } = await rateLimiterFlexible();
      // rate-limiter-flexible has no Express middleware: this is the one its README sketches.
      app.use((request, response, next) => {
        limiter.consume(idOf(request.headers)).then(
          (result) => {
            legacyHeaders((name, value) => response.setHeader(name, value), result.remainingPoints, result.msBeforeNext);
            next();
          },
          (rejection: unknown) => {
            if (!(rejection instanceof RateLimiterRes)) return next(rejection);
            legacyHeaders((name, value) => response.setHeader(name, value), rejection.remainingPoints, rejection.msBeforeNext);
            response.setHeader('Retry-After', String(Math.ceil(rejection.msBeforeNext / 1000)));
            response.status(429).send('Too Many Requests');
          },
        );
      });
      break;
    }
    default:
      throw new Error(`no ${limiterName} limiter for express`);
  }
  app.get('/', (_request, response) => {
    response.send(BODY);
  });
  return (port) =>
    new Promise((resolve, reject) => {
      const server = app.listen(port, '127.0.0.1', (error?: Error) =>
        error ? reject(error) : resolve((server.address() as { port: number }).port),
      );
    });
}

async function fastify(): Promise<(port: number) => Promise<number>> {
  const { default: createApp } = await import('fastify');
  const app = createApp({ logger: false });
  switch (limiterName) {
    case 'bare':
      break;
    case 'swl':
    case 'swlap':
    case 'swlnr':
    case 'swlgl':
    case 'swliv':
    case 'swlfw':
    case 'swltb':
    case 'swlsl':
    case 'swlpw': {
      const { rateLimitPlugin, RedisStore } = await import('../src/fastify');
      const client = await storeClient();
      await app.register(rateLimitPlugin, {
        store: new RedisStore({ client }),
        algorithm,
        limit,
        window: windowMs,
        prefix,
        identify: (request) => idOf(request.headers),
      });
      break;
    }
    case 'incr': {
      const count = await incrementer();
      app.addHook('onRequest', (request, _reply, done) => {
        count(idOf(request.headers)).then(() => done(), done);
      });
      break;
    }
    case 'floor':
      // Answering from the hook, as this package's plugin does for a denial (done() is not called then).
      app.addHook('onRequest', (_request, reply, _done) => {
        const body = denial((name, value) => reply.header(name, value));
        reply.code(429).send(body);
      });
      break;
    case 'frl': {
      const { default: plugin } = await import('@fastify/rate-limit');
      const client = await connect(peerOptions());
      await app.register(plugin, {
        max: limit,
        timeWindow: windowMs,
        redis: client,
        nameSpace: `${prefix}:`,
        keyGenerator: (request) => idOf(request.headers),
      });
      break;
    }
    case 'rlf': {
      const { limiter, RateLimiterRes } = await rateLimiterFlexible();
      app.addHook('onRequest', (request, reply, done) => {
        limiter.consume(idOf(request.headers)).then(
          (result) => {
            legacyHeaders((name, value) => reply.header(name, value), result.remainingPoints, result.msBeforeNext);
            done();
          },
          (rejection: unknown) => {
            if (!(rejection instanceof RateLimiterRes)) return done(rejection as Error);
            legacyHeaders((name, value) => reply.header(name, value), rejection.remainingPoints, rejection.msBeforeNext);
            reply.header('Retry-After', String(Math.ceil(rejection.msBeforeNext / 1000)));
            reply.code(429).send('Too Many Requests');
          },
        );
      });
      break;
    }
    default:
      throw new Error(`no ${limiterName} limiter for fastify`);
  }
  app.get('/', (_request, reply) => {
    reply.send(BODY);
  });
  return async (port) => {
    await app.listen({ port, host: '127.0.0.1' });
    return (app.server.address() as { port: number }).port;
  };
}

async function main(): Promise<void> {
  const listen = framework === 'fastify' ? await fastify() : await express();
  const port = await listen(0);
  process.stdout.write(`READY ${port}\n`);
}

/** What the server's garbage collector and event loop did between two SIGUSR2 (BENCH_TRACE). */
export interface GcTrace {
  /** Young-generation collections (scavenges), their pauses summed. */
  scavengeMs: number;
  /** Every other collection (mark-compact and its incremental steps), their pauses summed. */
  otherGcMs: number;
  longestGcMs: number;
  /** The event loop's delay (`monitorEventLoopDelay`, 1 ms resolution): 99th percentile and longest. */
  loopP99Ms: number;
  loopMaxMs: number;
}

function traceOnSignal(): void {
  let scavengeMs = 0;
  let otherGcMs = 0;
  let longestGcMs = 0;
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      if (isScavenge(entry)) scavengeMs += entry.duration;
      else otherGcMs += entry.duration;
      longestGcMs = Math.max(longestGcMs, entry.duration);
    }
  }).observe({ entryTypes: ['gc'] });
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  process.on('SIGUSR2', () => {
    const trace: GcTrace = { scavengeMs, otherGcMs, longestGcMs, loopP99Ms: delay.percentile(99) / 1e6, loopMaxMs: delay.max / 1e6 };
    scavengeMs = 0;
    otherGcMs = 0;
    longestGcMs = 0;
    delay.reset();
    process.stdout.write(`TRACE ${JSON.stringify(trace)}\n`);
  });
}

if (process.env.BENCH_TRACE === '1') traceOnSignal();

// SIGTERM/SIGINT: exit at once, so --cpu-prof writes its profile.
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));

main().catch((error: unknown) => {
  process.stderr.write(`bench server (${framework}/${limiterName}) failed: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
