/**
 * CPU cost of one check in this process, without HTTP: `npx ts-node --transpile-only bench/micro.ts`.
 *
 * Starts its own redis-server and measures CPU microseconds (user + system of this process)
 * per operation for: a plain GET of the client, `RedisStore.check`, `Limiter.check`, the
 * adapters' shared `HttpLimiter.handle` with header writing, and a denial answered from the
 * deny cache; each with an ioredis client with and without auto-pipelining, a node-redis
 * client (`disableOfflineQueue: true`), whose GET is also measured without node-redis 6's
 * per-command timer (`timeout: 0`, as the store sends its checks), a Valkey GLIDE client (its
 * Rust core's threads run in this process, and their CPU is counted) and an iovalkey client; the
 * check script sent once per check, without the store's batching; and the CPU redis-server
 * itself spends per `RedisStore.check` (from /proc, Linux). 64 checks are kept in
 * flight, as 64 HTTP connections would. Each figure is the lowest of 7 repetitions, which
 * load from other processes disturbs least. Run through ts-node, it compiles itself and runs
 * as plain JavaScript in a child process (ts-node turns on `domain`, which slows EventEmitters).
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { GlideClient, Logger } from '@valkey/valkey-glide';
import Redis from 'ioredis';
import { Redis as IoValkey } from 'iovalkey';
import { createClient } from 'redis';
import { ALGORITHMS } from '../src/algorithms';
import { createLimiter } from '../src/core/limiter';
import { HttpLimiter } from '../src/http/handler';
import { scriptArgv } from '../src/protocol';
import type { RedisClientAdapter } from '../src/stores/redis/redis-client';
import { RedisStore, type RedisStoreClient } from '../src/stores/redis/redis-store';
import { processCpu } from '../support/process-cpu';
import { startRedis } from '../support/redis-server';
import { sinkPort } from './sink-port';

const OPERATIONS = Number(process.env.BENCH_OPERATIONS ?? 50_000);
const IN_FLIGHT = 64;
const REPETITIONS = 7;

/** CPU microseconds this process has used. */
function ownCpu(): number {
  const { user, system } = process.cpuUsage();
  return user + system;
}

/** CPU µs per operation of `operation`, as `cpu` (a clock of CPU µs: this process's by default) counts them. */
async function cpuPerOperation(operation: () => unknown, count: number, inFlight: number, cpu: () => number = ownCpu): Promise<number> {
  const results: number[] = [];
  for (let repetition = 0; repetition < REPETITIONS; repetition++) {
    let started = 0;
    const before = cpu();
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (started++ < count) {
          const result = operation();
          if (result instanceof Promise) await result;
        }
      }),
    );
    results.push((cpu() - before) / count);
  }
  return Math.min(...results);
}

/** A client under test, and its plain GET (`bare`: node-redis without its per-command timer). */
interface Measured {
  readonly client: RedisStoreClient;
  get(key: string): Promise<unknown>;
  bareGet?(key: string): Promise<unknown>;
  close(): void;
}

const CLIENTS: readonly { name: string; connect(port: number): Promise<Measured> }[] = [true, false]
  .map((enableAutoPipelining) => ({
    name: `ioredis, auto-pipelining ${enableAutoPipelining ? 'on' : 'off'}`,
    async connect(port: number): Promise<Measured> {
      const client = new Redis({
        host: '127.0.0.1',
        port,
        enableAutoPipelining,
        enableOfflineQueue: false,
        maxRetriesPerRequest: 1,
        lazyConnect: true,
      });
      await client.connect();
      return { client, get: (key) => client.get(key), close: () => client.disconnect() };
    },
  }))
  .concat({
    name: 'node-redis',
    async connect(port: number): Promise<Measured> {
      const client = createClient({ socket: { host: '127.0.0.1', port }, disableOfflineQueue: true });
      await client.connect();
      return {
        client,
        get: (key) => client.get(key),
        bareGet: (key) => client.sendCommand(['GET', key], { timeout: 0 }),
        close: () => client.destroy(),
      };
    },
  })
  .concat({
    name: 'Valkey GLIDE',
    async connect(port: number): Promise<Measured> {
      Logger.setLoggerConfig('off');
      const client = await GlideClient.createClient({ addresses: [{ host: '127.0.0.1', port }], requestTimeout: 450 });
      return { client, get: (key) => client.get(key), close: () => client.close() };
    },
  })
  .concat({
    name: 'iovalkey',
    async connect(port: number): Promise<Measured> {
      const client = new IoValkey({ host: '127.0.0.1', port, enableOfflineQueue: false, maxRetriesPerRequest: 1, lazyConnect: true });
      await client.connect();
      return { client: client as unknown as RedisStoreClient, get: (key) => client.get(key), close: () => client.disconnect() };
    },
  });

async function main(): Promise<void> {
  const redis = await startRedis();
  const admin = new Redis({ host: '127.0.0.1', port: redis.port });
  const redisPid = Number(/process_id:(\d+)/.exec(await admin.info('server'))?.[1]);
  admin.disconnect();
  const redisCpu = (): number => processCpu(redisPid) * 1e6;
  const keepAlive = setInterval(() => undefined, 1000);
  const rows: [string, ...(number | undefined)[]][] = [];
  try {
    const measured: Record<string, number>[] = [];
    for (const [index, kind] of CLIENTS.entries()) {
      const { client, get, bareGet, close } = await kind.connect(redis.port);
      const store = new RedisStore({ client });
      const run = `c${index}-${Date.now()}`;
      const limiter = createLimiter({ store, limit: 1e9, window: '1m', prefix: `${run}-limiter` });
      const identify = (request: { headers: Record<string, string> }): string => request.headers['x-id'];
      const headers: Record<string, string> = {};
      const port = sinkPort<typeof request>();
      const allow = new HttpLimiter({ store, limit: 1e9, window: '1m', prefix: `${run}-allow`, identify }, port);
      const deny = new HttpLimiter({ store, limit: 1, window: '1m', prefix: `${run}-deny`, identify }, port);
      const requestHeaders = { 'x-id': 'user:1' };
      const request = { headers: requestHeaders };
      // A request object per operation, as HTTP gives: the limiter records what it counted on it.
      const http = (limiter: typeof allow) => (): Promise<void> =>
        new Promise<void>((resolve) => limiter.handle({ headers: requestHeaders }, headers, () => resolve()));
      const check = {
        now: undefined,
        cost: 1,
        dryRun: false,
        blockFor: 0,
        countedAt: 0,
        actualCost: 0,
        tiers: limiter.tiers,
        precision: limiter.precision,
      };
      // Two checks: the second is denied and cached.
      await http(deny)();
      await http(deny)();
      const figures: Record<string, number> = {};
      figures['client GET'] = await cpuPerOperation(() => get(`${run}-get`), OPERATIONS, IN_FLIGHT);
      if (bareGet) figures['client GET, no per-command timer'] = await cpuPerOperation(() => bareGet(`${run}-get`), OPERATIONS, IN_FLIGHT);
      figures['RedisStore.check'] = await cpuPerOperation(
        () => store.check(ALGORITHMS['sliding-window'], `${run}-store:user:1`, check),
        OPERATIONS,
        IN_FLIGHT,
      );
      // The check script sent once per check, through the store's client adapter: no batching.
      const adapter = (store as unknown as { redis: RedisClientAdapter }).redis;
      const argv = scriptArgv(check);
      const { lua } = ALGORITHMS['sliding-window'].check;
      figures['check script, one EVALSHA per check (no batching)'] = await cpuPerOperation(
        () => adapter.run(lua, [`${run}-store:user:1`], argv),
        OPERATIONS,
        IN_FLIGHT,
      );
      // The same checks as Redis sees them: its CPU per check (one at a time, or batched by the store).
      figures['RedisStore.check: redis-server CPU'] = await cpuPerOperation(
        () => store.check(ALGORITHMS['sliding-window'], `${run}-store:user:1`, check),
        OPERATIONS,
        IN_FLIGHT,
        redisCpu,
      );
      figures['Limiter.check'] = await cpuPerOperation(() => limiter.check('user:1'), OPERATIONS, IN_FLIGHT);
      figures['HttpLimiter.handle + headers, allowed'] = await cpuPerOperation(http(allow), OPERATIONS, IN_FLIGHT);
      figures['HttpLimiter.handle + headers, denied from the deny cache'] = await cpuPerOperation(http(deny), OPERATIONS * 4, 1);
      measured.push(figures);
      close();
    }
    const names = [...new Set(measured.flatMap((figures) => Object.keys(figures)))];
    for (const name of names) rows.push([name, ...measured.map((figures) => figures[name])]);
  } finally {
    await redis.stop();
    clearInterval(keepAlive);
  }
  const lines = [
    `CPU µs per operation (lowest of ${REPETITIONS} repetitions of ${OPERATIONS.toLocaleString('en-US')}, ${IN_FLIGHT} in flight; node ${process.version})`,
    '',
    `| operation | ${CLIENTS.map((kind) => kind.name).join(' | ')} |`,
    `| --- |${CLIENTS.map(() => ' ---: |').join('')}`,
    ...rows.map(
      ([name, ...figures]) => `| ${name} | ${figures.map((figure) => (figure === undefined ? '' : figure.toFixed(2))).join(' | ')} |`,
    ),
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

/** Under ts-node (which loads `domain`): compile and run this file as plain JavaScript instead. */
function relaunchCompiled(): boolean {
  if (!(require('node:events') as { usingDomains?: boolean }).usingDomains) return false;
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { compileForBench } = require('./compile') as typeof import('./compile');
  const build = compileForBench(['micro.ts', 'sink-port.ts'], undefined, ['support/redis-server.ts', 'support/process-cpu.ts']);
  const result = spawnSync(process.execPath, [join(build, 'bench', 'micro.js')], { stdio: 'inherit' });
  process.exitCode = result.status ?? 1;
  return true;
}

if (!relaunchCompiled())
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
