/**
 * Young-generation garbage per allowed request on the shared HTTP path:
 * `npx ts-node --transpile-only bench/allocations.ts` (BENCH_SRC=<dir> runs another copy of
 * `src/`, for an A/B comparison of a change).
 *
 * Starts its own redis-server, then runs `HttpLimiter.handle` for allowed requests, 64 in
 * flight, in a child process whose young generation is fixed at 1 MB semi-spaces, and counts
 * the scavenges: each one follows about 1 MB of allocation, so scavenges per 100,000 requests
 * times 10 is roughly the bytes each request allocates (the Redis client's included). Unlike
 * CPU time, the count barely moves from run to run, so small changes show.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import Redis from 'ioredis';
import { startRedis } from '../support/redis-server';
import { isScavenge } from './gc';
import { sinkPort } from './sink-port';

const REQUESTS = 400_000;
const IN_FLIGHT = 64;

type Request = { id: string };
type Response = Record<string, string>;

/** The measuring child: compiled `src/` and this file, under `--max-semi-space-size=1`. */
async function measure(port: number): Promise<void> {
  const { HttpLimiter } = require('../src/http/handler') as typeof import('../src/http/handler');
  const { RedisStore } = require('../src/stores/redis/redis-store') as typeof import('../src/stores/redis/redis-store');
  const client = new Redis({ host: '127.0.0.1', port, enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  await new Promise((resolve) => client.once('ready', resolve));
  const http = new HttpLimiter<Request, Response>(
    { store: new RedisStore({ client }), limit: 1e9, window: '1m', prefix: `alloc-${Date.now()}`, identify: (request) => request.id },
    sinkPort<Request>(),
  );
  const response: Response = {};
  const run = (count: number): Promise<void> =>
    new Promise((resolve) => {
      let started = 0;
      let answered = 0;
      const next = (): void => {
        if (started === count) {
          if (answered === count) resolve();
          return;
        }
        started++;
        http.handle({ id: 'user:1' }, response, () => {
          answered++;
          next();
        });
      };
      for (let i = 0; i < IN_FLIGHT; i++) next();
    });
  await run(REQUESTS / 4); // warm-up: optimized code, and the young generation at its size
  let scavenges = 0;
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) if (isScavenge(entry)) scavenges++;
  });
  observer.observe({ entryTypes: ['gc'] });
  const before = process.cpuUsage();
  await run(REQUESTS);
  const cpu = process.cpuUsage(before);
  await new Promise((resolve) => setTimeout(resolve, 50));
  observer.disconnect();
  client.disconnect();
  process.stdout.write(
    `${((scavenges * 100_000) / REQUESTS).toFixed(0)} scavenges per 100,000 allowed requests (≈ ${(((scavenges * 1024) / REQUESTS) * 1024).toFixed(0)} bytes each); CPU ${((cpu.user + cpu.system) / REQUESTS).toFixed(2)} µs each (1 MB semi-spaces, not comparable with bench/micro.ts)\n`,
  );
}

async function main(): Promise<void> {
  const { compileForBench } = require('./compile') as typeof import('./compile');
  const build = compileForBench(['allocations.ts', 'gc.ts', 'sink-port.ts'], undefined, ['support/redis-server.ts']);
  const redis = await startRedis();
  try {
    const result = spawnSync(process.execPath, ['--max-semi-space-size=1', join(build, 'bench', 'allocations.js'), String(redis.port)], {
      stdio: 'inherit',
    });
    process.exitCode = result.status ?? 1;
  } finally {
    await redis.stop();
  }
}

const measuringPort = process.argv[2];
(measuringPort === undefined ? main() : measure(Number(measuringPort))).catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
