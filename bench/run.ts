/**
 * `npm run bench`: throughput and latency of this package against the bare frameworks
 * and the usual alternatives, each backed by Redis on loopback.
 *
 * One command: starts its own redis-server on a free port and its own three-master Redis
 * Cluster, one server child process per framework/limiter (bench/server.ts), and drives each
 * with wrk (bench/wrk.ts). Writes bench/results.md.
 *
 * Environment:
 * - BENCH_DURATION  seconds measured per cell (default 4)
 * - BENCH_WARMUP    seconds of load before each measurement, on the round's fresh server, not counted (default 2)
 * - BENCH_ROUNDS    measurements per cell, interleaved (default 5); figures are the median of the rounds, ratios the median of per-round ratios, with their range
 * - BENCH_CONNECTIONS  wrk connections (default 64)
 * - BENCH_PIN       `1` (default): server on CPU 0, wrk and redis-server on CPU 1 (when there are 2+ CPUs); `0`: no pinning
 * - BENCH_ONLY      comma-separated filter of cells, e.g. `fastify:swl,fastify:bare`, `c`, or `ca,cb` (the cluster's)
 * - BENCH_PROFILE   comma-separated `framework:limiter` servers to run under `node --cpu-prof` (profiles in bench/.tmp/profiles)
 * - BENCH_PEER_CLIENT  `default` (peers get a default ioredis client, as their READMEs show) or `same` (this package's options)
 * - BENCH_OUT       where to write the markdown (default bench/results.md; `-` for none)
 * - BENCH_SRC       a directory to run instead of src/ (an A/B test of a change, without touching the working tree)
 * - BENCH_TRACE     `1`: each server keeps its GC pauses and event-loop delay, printed in the log line of each round
 * - BENCH_WAIT_IDLE seconds to wait, at most, for other processes to leave the CPUs alone before starting (default 0)
 *
 * Each measurement also records the CPU time (from /proc) of the server, redis-server (every
 * master, on the cluster) and wrk, and what the rest of the machine used meanwhile ("other"), so a
 * loaded machine shows; Redis CPU per request is what the limiter costs the Redis nodes.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import Redis from 'ioredis';
import { CLOCK_TICKS, processCpu } from '../support/process-cpu';
import { type RedisCluster, startCluster, startRedis } from '../support/redis-server';
import { commandTotals } from './commandstats';
import { compileForBench } from './compile';
import type { GcTrace } from './server';
import { describeWrk, runWrk, type Traffic, type WrkResult } from './wrk';

const ROOT = resolve(__dirname, '..');
const DURATION = Number(process.env.BENCH_DURATION ?? 4);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 2);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const CPU_COUNT = cpus().length;
const PIN = process.env.BENCH_PIN !== '0' && CPU_COUNT >= 2;
const SERVER_CPUS = PIN ? '0' : undefined;
const LOAD_CPUS = PIN ? '1' : undefined;
const ONLY = (process.env.BENCH_ONLY ?? '').split(',').filter(Boolean);
const TRACE = process.env.BENCH_TRACE === '1';
const PROFILE = new Set((process.env.BENCH_PROFILE ?? '').split(',').filter(Boolean));
const PEER_CLIENT = process.env.BENCH_PEER_CLIENT ?? 'default';
const OUT = process.env.BENCH_OUT ?? join(ROOT, 'bench', 'results.md');
const PROFILE_DIR = join(ROOT, 'bench', '.tmp', 'profiles');

/** A high limit never reached in (a) and (b); a low one the flood of (c) is far over. */
const HIGH_LIMIT = 1_000_000_000;
const LOW_LIMIT = 100;
const WINDOW_MS = 60_000;
const IDS = 100_000;

type Framework = 'express' | 'fastify';
type LimiterName =
  | 'bare'
  | 'floor'
  | 'incr'
  | 'swl'
  | 'swlap'
  | 'swlnr'
  | 'swlgl'
  | 'swliv'
  | 'swlfw'
  | 'swltb'
  | 'swlsl'
  | 'swlpw'
  | 'erl'
  | 'rlf'
  | 'frl';

const LIMITER_LABELS: Record<LimiterName, string> = {
  bare: 'bare (no limiter)',
  floor: 'floor: no limiter, every request answered with the same 429 as this package (headers + JSON body, sent as ready JSON text)',
  incr: 'floor of allowed traffic: no limiter, one auto-pipelined INCR + PEXPIRE per request',
  swl: '**ratewarden** (this package)',
  swlap: 'ratewarden, client with auto-pipelining',
  swlnr: 'ratewarden over node-redis (the `redis` package)',
  swlgl: 'ratewarden over Valkey GLIDE (`@valkey/valkey-glide`)',
  swliv: 'ratewarden over iovalkey',
  swlfw: 'ratewarden, fixed window',
  swltb: 'ratewarden, token bucket',
  swlsl: 'ratewarden, sliding log',
  swlpw: 'ratewarden, precise window',
  erl: 'express-rate-limit + rate-limit-redis',
  rlf: 'rate-limiter-flexible (RateLimiterRedis, middleware in bench/server.ts)',
  frl: '@fastify/rate-limit (redis)',
};

const CONFIGS: readonly { framework: Framework; limiters: readonly LimiterName[] }[] = [
  { framework: 'express', limiters: ['bare', 'floor', 'incr', 'swl', 'swlnr', 'swlap', 'swlpw', 'erl', 'rlf'] },
  {
    framework: 'fastify',
    limiters: ['bare', 'floor', 'incr', 'swl', 'swlnr', 'swlgl', 'swliv', 'swlap', 'swlfw', 'swltb', 'swlsl', 'swlpw', 'frl', 'rlf'],
  },
];

interface Scenario {
  id: 'a' | 'b' | 'c' | 'ca' | 'cb';
  /** Run against the three-master cluster rather than the standalone server. */
  cluster: boolean;
  title: string;
  limit: number;
  traffic: Traffic;
  /** Count statuses per response in wrk's Lua (only where the mix matters). */
  countStatuses: boolean;
}

const SCENARIOS: readonly Scenario[] = [
  {
    id: 'a',
    title: '(a) allowed traffic, one identifier',
    limit: HIGH_LIMIT,
    traffic: { kind: 'one', id: 'user:1' },
    countStatuses: false,
    cluster: false,
  },
  {
    id: 'b',
    title: `(b) allowed traffic over ${IDS.toLocaleString('en-US')} identifiers`,
    limit: HIGH_LIMIT,
    traffic: { kind: 'many', count: IDS },
    countStatuses: false,
    cluster: false,
  },
  {
    id: 'c',
    title: `(c) flood from one identifier over its limit (${LOW_LIMIT} per ${WINDOW_MS / 1000} s)`,
    limit: LOW_LIMIT,
    traffic: { kind: 'one', id: 'user:flood' },
    countStatuses: true,
    cluster: false,
  },
  {
    id: 'ca',
    title: '(ca) on a 3-master Redis Cluster: allowed traffic, one identifier',
    limit: HIGH_LIMIT,
    traffic: { kind: 'one', id: 'user:1' },
    countStatuses: false,
    cluster: true,
  },
  {
    id: 'cb',
    title: `(cb) on a 3-master Redis Cluster: allowed traffic over ${IDS.toLocaleString('en-US')} identifiers`,
    limit: HIGH_LIMIT,
    traffic: { kind: 'many', count: IDS },
    countStatuses: false,
    cluster: true,
  },
];

/** CPU used during one measurement, in cores (CPU seconds per wall second). */
interface CpuShare {
  server: number;
  redis: number;
  wrk: number;
  /** Everything else on the machine: other engineers' processes, idle servers, the kernel's share not charged to ours. */
  other: number;
  /** Server CPU microseconds per request answered. */
  serverUsPerRequest: number;
  /** redis-server CPU microseconds per request answered (every master summed, on the cluster). */
  redisUsPerRequest: number;
  /** Redis commands per request answered (`INFO commandstats`, every master summed), of which script calls (`EVALSHA`, `EVAL`, `FCALL`). */
  commandsPerRequest: number;
  scriptCallsPerRequest: number;
  /** Microseconds inside one script call (`commandstats`), averaged over the round's calls; 0 without calls. */
  usPerScriptCall: number;
}

interface Run extends WrkResult {
  cpu: CpuShare;
}

interface Cell {
  scenario: Scenario;
  framework: Framework;
  limiter: LimiterName;
  runs: Run[];
}

interface Server {
  framework: Framework;
  limiter: LimiterName;
  port: number;
  child: ChildProcess;
}

/**
 * The floor (a bare 429) only means something where the limiter denies. The other algorithms
 * (the default is the sliding window) are measured on Fastify's allowed traffic over many
 * identifiers, for their CPU and Redis CPU per request.
 */
const ONLY_IN: Partial<Record<LimiterName, readonly Scenario['id'][]>> = {
  floor: ['c'],
  incr: ['a', 'b', 'ca', 'cb'],
  swlfw: ['b', 'cb'],
  swltb: ['b', 'cb'],
  swlsl: ['b', 'cb'],
  swlpw: ['a', 'b', 'cb'],
};

const selected = (framework: Framework, limiter: LimiterName, scenario: Scenario['id']): boolean =>
  (ONLY_IN[limiter]?.includes(scenario) ?? true) &&
  (ONLY.length === 0 ||
    ONLY.some(
      (filter) =>
        filter === scenario ||
        filter === framework ||
        filter === `${framework}:${limiter}` ||
        filter === `${framework}:${limiter}:${scenario}`,
    ));

function log(message: string): void {
  process.stderr.write(`${message}\n`);
}

let buildDir = '';

/** Where a server finds Redis: the standalone server's port, and the cluster's masters for a cluster scenario. */
interface RedisTarget {
  port: number;
  clusterPorts?: number[];
}

function startServer(framework: Framework, limiter: LimiterName, limit: number, redis: RedisTarget): Promise<Server> {
  const profile = PROFILE.has(`${framework}:${limiter}`);
  if (profile) mkdirSync(PROFILE_DIR, { recursive: true });
  const nodeArgs = [
    ...(profile
      ? ['--cpu-prof', '--cpu-prof-dir', PROFILE_DIR, '--cpu-prof-name', `${framework}-${limiter}-limit${limit}-${Date.now()}.cpuprofile`]
      : []),
    join(buildDir, 'bench', 'server.js'),
  ];
  const [command, args] =
    SERVER_CPUS === undefined ? [process.execPath, nodeArgs] : ['taskset', ['-c', SERVER_CPUS, process.execPath, ...nodeArgs]];
  const child = spawn(command, args, {
    cwd: ROOT,
    env: {
      ...process.env,
      NODE_ENV: 'production',
      BENCH_FRAMEWORK: framework,
      BENCH_LIMITER: limiter,
      BENCH_LIMIT: String(limit),
      BENCH_WINDOW_MS: String(WINDOW_MS),
      BENCH_REDIS_PORT: String(redis.port),
      BENCH_REDIS_CLUSTER: (redis.clusterPorts ?? []).join(','),
      BENCH_PEER_CLIENT: PEER_CLIENT,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    // Keep only the start: a failing limiter can log on every request.
    if (stderr.length < 4000) stderr += chunk.toString();
  });
  return new Promise((resolvePort, reject) => {
    let stdout = '';
    const timer = setTimeout(() => reject(new Error(`${framework}/${limiter} server did not start: ${stderr}`)), 30_000);
    child.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      const match = /READY (\d+)/.exec(stdout);
      if (match) {
        clearTimeout(timer);
        resolvePort({ framework, limiter, port: Number(match[1]), child });
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${framework}/${limiter} server exited (${code}): ${stderr}`));
    });
  });
}

function stopServer(server: Server): Promise<void> {
  if (server.child.exitCode !== null || server.child.signalCode !== null) return Promise.resolve();
  return new Promise((done) => {
    server.child.once('exit', () => done());
    server.child.kill('SIGTERM');
  });
}

/** BENCH_TRACE: what the server's GC and event loop did since the last call; undefined if it does not answer within 5 s. */
function readTrace(server: Server): Promise<GcTrace | undefined> {
  const stdout = server.child.stdout!;
  return new Promise((done) => {
    let text = '';
    const finish = (trace: GcTrace | undefined): void => {
      clearTimeout(timer);
      stdout.off('data', onData);
      done(trace);
    };
    const onData = (chunk: Buffer): void => {
      text += chunk.toString();
      const match = /TRACE (\{.*\})\n/.exec(text);
      if (match) finish(JSON.parse(match[1]) as GcTrace);
    };
    const timer = setTimeout(() => finish(undefined), 5_000);
    stdout.on('data', onData);
    server.child.kill('SIGUSR2');
  });
}

const fmtTrace = (trace: GcTrace | undefined): string =>
  trace === undefined
    ? ''
    : `  GC ${trace.scavengeMs.toFixed(0)} + ${trace.otherGcMs.toFixed(0)} ms (longest ${trace.longestGcMs.toFixed(1)}), loop delay p99 ${trace.loopP99Ms.toFixed(1)} max ${trace.loopMaxMs.toFixed(1)} ms`;

function pinRedis(pid: number): void {
  if (LOAD_CPUS === undefined) return;
  execFileSync('taskset', ['-a', '-p', '-c', LOAD_CPUS, String(pid)], { stdio: 'ignore' });
}

/** CPU seconds the whole machine has been busy (user, nice, system, irq, softirq). */
function machineBusy(): number {
  const [, user, nice, system, , , irq, softirq] = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).map(Number);
  return (user + nice + system + irq + softirq) / CLOCK_TICKS;
}

/** Cores used by everything but this bench's own processes, over `seconds`. */
async function foreignLoad(seconds: number, own: () => number): Promise<number> {
  const busy = machineBusy();
  const mine = own() + process.cpuUsage().user / 1e6 + process.cpuUsage().system / 1e6;
  await new Promise((done) => setTimeout(done, seconds * 1000));
  const mineAfter = own() + process.cpuUsage().user / 1e6 + process.cpuUsage().system / 1e6;
  return Math.max(0, machineBusy() - busy - (mineAfter - mine)) / seconds;
}

function cpuModel(): string {
  const line = readFileSync('/proc/cpuinfo', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('model name'));
  return line ? line.split(':')[1].trim() : (cpus()[0]?.model ?? 'unknown');
}

function version(pkg: string): string {
  return (JSON.parse(readFileSync(join(ROOT, 'node_modules', pkg, 'package.json'), 'utf8')) as { version: string }).version;
}

/** The median of `values`: the middle one, or the mean of the middle two. */
function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

/** A median and the range of the values it was taken from. */
interface Spread {
  median: number;
  min: number;
  max: number;
}

function spreadOf(values: readonly number[]): Spread {
  return { median: median(values), min: Math.min(...values), max: Math.max(...values) };
}

const fmtSpread = (spread: Spread | undefined, digits = 2): string =>
  spread === undefined ? '' : `${spread.median.toFixed(digits)} (${spread.min.toFixed(digits)}–${spread.max.toFixed(digits)})`;

/** The round of a cell whose requests/s is the median (the lower middle one for an even count): its latencies, status mix and CPU shares stand for the cell. */
function medianRun(runs: readonly Run[]): Run {
  const sorted = [...runs].sort((a, b) => a.requestsPerSecond - b.requestsPerSecond);
  return sorted[(sorted.length - 1) >> 1];
}

/**
 * `pick(cell's round r) ÷ pick(reference's round r)` for every round both ran. Rounds are
 * interleaved (every cell of a scenario in turn, then the next round), so the two figures of one
 * round were measured minutes apart at most, under the same conditions: a per-round ratio cancels
 * most of the machine's drift, which a ratio of two medians would not.
 */
function perRoundRatios(cell: Cell, reference: Cell, pick: (run: Run) => number): number[] {
  const rounds = Math.min(cell.runs.length, reference.runs.length);
  return Array.from({ length: rounds }, (_, r) => pick(cell.runs[r]) / pick(reference.runs[r]));
}

const medianOf = (cell: Cell, pick: (run: Run) => number): number => median(cell.runs.map(pick));

const fmtRps = (n: number): string => Math.round(n).toLocaleString('en-US');
const fmtMs = (us: number): string => (us / 1000).toFixed(2);

const fmtCpu = (cpu: CpuShare): string =>
  `${cpu.server.toFixed(2)} / ${cpu.redis.toFixed(2)} / ${cpu.wrk.toFixed(2)} / ${cpu.other.toFixed(2)}`;

/** Requests answered per script call (median of the rounds): how full this package's batches were; blank without script calls. */
function requestsPerScriptCall(cell: Cell): string {
  const calls = medianOf(cell, (r) => r.cpu.scriptCallsPerRequest);
  return calls > 0 ? (1 / calls).toFixed(1) : '';
}

/** Redis commands per request, and script calls per request with the time inside each (`commandstats`). */
const fmtScriptCalls = (cpu: CpuShare): string =>
  `commands ${cpu.commandsPerRequest.toFixed(2)}/req, scripts ${cpu.scriptCallsPerRequest.toFixed(3)}/req at ${cpu.usPerScriptCall.toFixed(1)} µs`;

function statusMix(result: WrkResult): string {
  if (result.statuses === undefined) {
    return result.errorStatus === 0 ? 'all 2xx' : `${result.errorStatus} ≥ 400 of ${result.requests}`;
  }
  const total = Object.values(result.statuses).reduce((a, b) => a + b, 0);
  return Object.entries(result.statuses)
    .sort(([a], [b]) => Number(a) - Number(b))
    .map(([status, n]) => `${status}: ${((100 * n) / total).toFixed(status === '429' || n / total > 0.01 ? 2 : 3)}%`)
    .join(', ');
}

/**
 * What this package should reach against the bare framework (`minRatio`) and against the
 * fastest peer library of the same framework and scenario in the same run (`minOverBestPeer`).
 */
interface Target {
  framework: Framework;
  scenario: Scenario['id'];
  minRatio?: number;
  minOverBestPeer?: number;
  /** Redis CPU per request at most this many times the thriftiest peer's. */
  maxRedisCpuOverBestPeer?: number;
}

const REDIS_CPU = 0.7;
const TARGETS: readonly Target[] = [
  { framework: 'fastify', scenario: 'a', minRatio: 0.55, minOverBestPeer: 1.3, maxRedisCpuOverBestPeer: REDIS_CPU },
  { framework: 'fastify', scenario: 'b', minRatio: 0.55, minOverBestPeer: 1.3, maxRedisCpuOverBestPeer: REDIS_CPU },
  { framework: 'fastify', scenario: 'c', minRatio: 0.8 },
  { framework: 'fastify', scenario: 'ca', minOverBestPeer: 1.3, maxRedisCpuOverBestPeer: REDIS_CPU },
  { framework: 'fastify', scenario: 'cb', minOverBestPeer: 1.3, maxRedisCpuOverBestPeer: REDIS_CPU },
  // Ahead of every peer: more requests/s than the fastest one.
  { framework: 'express', scenario: 'a', minOverBestPeer: 1, maxRedisCpuOverBestPeer: REDIS_CPU },
  { framework: 'express', scenario: 'b', minOverBestPeer: 1, maxRedisCpuOverBestPeer: REDIS_CPU },
  { framework: 'express', scenario: 'c', minOverBestPeer: 1 },
  { framework: 'express', scenario: 'ca', minOverBestPeer: 1, maxRedisCpuOverBestPeer: REDIS_CPU },
  { framework: 'express', scenario: 'cb', minOverBestPeer: 1, maxRedisCpuOverBestPeer: REDIS_CPU },
];

const PEERS: readonly LimiterName[] = ['erl', 'rlf', 'frl'];

function cellOf(cells: readonly Cell[], framework: Framework, limiter: LimiterName, scenario: Scenario['id']): Cell | undefined {
  return cells.find((c) => c.framework === framework && c.limiter === limiter && c.scenario.id === scenario && c.runs.length > 0);
}

const rps = (run: Run): number => run.requestsPerSecond;

/** The peer library with the most requests/s (median of its rounds) in a framework and scenario. */
function bestPeer(cells: readonly Cell[], framework: Framework, scenario: Scenario['id']): LimiterName | undefined {
  const peers = PEERS.map((peer) => cellOf(cells, framework, peer, scenario)).filter((cell) => cell !== undefined);
  if (peers.length === 0) return undefined;
  return peers.reduce((a, b) => (medianOf(b, rps) > medianOf(a, rps) ? b : a)).limiter;
}

function ratioOf(cells: readonly Cell[], framework: Framework, limiter: LimiterName, scenario: Scenario['id']): Spread | undefined {
  return ratioBetween(cells, framework, limiter, 'bare', scenario);
}

/** Requests/s of `limiter` ÷ those of `reference`, same framework and scenario: the median of per-round ratios, with their range. */
function ratioBetween(
  cells: readonly Cell[],
  framework: Framework,
  limiter: LimiterName,
  reference: LimiterName,
  scenario: Scenario['id'],
): Spread | undefined {
  const cell = cellOf(cells, framework, limiter, scenario);
  const base = cellOf(cells, framework, reference, scenario);
  if (cell === undefined || base === undefined) return undefined;
  return spreadOf(perRoundRatios(cell, base, rps));
}

/** Redis CPU per request of `limiter` ÷ the thriftiest peer's (lowest median), per round; and that peer. */
function redisCpuOverBestPeer(
  cells: readonly Cell[],
  framework: Framework,
  limiter: LimiterName,
  scenario: Scenario['id'],
): { ratio: Spread; peer: LimiterName } | undefined {
  const redisCpu = (run: Run): number => run.cpu.redisUsPerRequest;
  const mine = cellOf(cells, framework, limiter, scenario);
  const peers = PEERS.map((peer) => cellOf(cells, framework, peer, scenario)).filter((cell) => cell !== undefined);
  if (mine === undefined || peers.length === 0) return undefined;
  const thriftiest = peers.reduce((a, b) => (medianOf(b, redisCpu) < medianOf(a, redisCpu) ? b : a));
  return { ratio: spreadOf(perRoundRatios(mine, thriftiest, redisCpu)), peer: thriftiest.limiter };
}

/** p99 latency of `limiter` ÷ that of the peer `peer`, per round. */
function p99OverPeer(
  cells: readonly Cell[],
  framework: Framework,
  limiter: LimiterName,
  peer: LimiterName,
  scenario: Scenario['id'],
): Spread | undefined {
  const mine = cellOf(cells, framework, limiter, scenario);
  const theirs = cellOf(cells, framework, peer, scenario);
  if (mine === undefined || theirs === undefined) return undefined;
  return spreadOf(perRoundRatios(mine, theirs, (run) => run.p99Us));
}

/** Bare server CPU per request ÷ this limiter's, per round. */
function cpuRatioOf(cells: readonly Cell[], framework: Framework, limiter: LimiterName, scenario: Scenario['id']): Spread | undefined {
  const cell = cellOf(cells, framework, limiter, scenario);
  const bare = cellOf(cells, framework, 'bare', scenario);
  if (cell === undefined || bare === undefined) return undefined;
  return spreadOf(perRoundRatios(bare, cell, (run) => run.cpu.serverUsPerRequest));
}

function report(cells: readonly Cell[], meta: { started: Date; seconds: number; loadBefore: number[]; redisVersion: string }): string {
  const lines: string[] = [];
  const wrkLine = describeWrk({ threads: 1, connections: CONNECTIONS, durationSeconds: DURATION, cpus: LOAD_CPUS });
  const others = cells.flatMap((c) => c.runs.map((r) => r.cpu.other));
  const meanOther = others.reduce((a, b) => a + b, 0) / Math.max(1, others.length);
  const maxOther = Math.max(0, ...others);
  const loaded = meanOther > 0.1 || maxOther > 0.3;
  lines.push('# Benchmark results', '');
  lines.push(`Generated by \`npm run bench\` (bench/run.ts) on ${meta.started.toISOString()}, in ${Math.round(meta.seconds)} s.`, '');
  lines.push('| | |', '| --- | --- |');
  lines.push(`| machine | ${CPU_COUNT} CPUs (\`nproc\`), ${cpuModel()} |`);
  lines.push(`| source | ${gitState()} |`);
  lines.push(`| node | ${process.version} |`);
  lines.push(
    `| redis | redis-server ${meta.redisVersion}, loopback, no persistence, started by the bench: a standalone server, and for the (ca) and (cb) cells a cluster of three masters (no replicas); clients of the cluster: ioredis \`Cluster\` (node-redis \`createCluster\` in the "over node-redis" rows) with the same options as on the standalone server |`,
  );
  lines.push(`| frameworks | express ${version('express')}, fastify ${version('fastify')} |`);
  lines.push(
    `| libraries | ioredis ${version('ioredis')}, node-redis (\`redis\`) ${version('redis')}, Valkey GLIDE (\`@valkey/valkey-glide\`) ${version('@valkey/valkey-glide')}, iovalkey ${version('iovalkey')}, express-rate-limit ${version('express-rate-limit')}, rate-limit-redis ${version('rate-limit-redis')}, rate-limiter-flexible ${version('rate-limiter-flexible')}, @fastify/rate-limit ${version('@fastify/rate-limit')} |`,
  );
  lines.push(
    `| load generator | wrk ${wrkVersion()}, a separate C process (not in the server's event loop): \`${wrkLine}\`; before each round, ${WARMUP} s of unmeasured warm-up load on the round's fresh server. (b): each request's \`x-id\` drawn at random from ${IDS.toLocaleString('en-US')} ids by a Lua \`request()\`; (c): a Lua \`response()\` counts the statuses, in every cell of (c), bare included |`,
  );
  lines.push(`| pinning | ${PIN ? 'server process on CPU 0 (`taskset -c 0`); wrk and redis-server on CPU 1' : 'none'} |`);
  lines.push(
    `| method | ${ROUNDS} round(s) of ${DURATION} s per cell; each round runs every cell of a scenario in turn (order reversed every other round), each in a server process of its own (started, warmed up, measured, stopped: a long-lived server's speed depends on its history, see the notes), and every figure of a cell is the median of its rounds (latencies, status mix and CPU shares: those of its median round). Every ratio is the median of per-round ratios (round r of one cell against round r of the other, measured minutes apart at most), with their range in brackets. Server CPU µs/request = the server process's CPU time (from /proc) ÷ requests answered |`,
  );
  lines.push(
    `| other load | other processes used ${meanOther.toFixed(2)} cores on average during the measurements (at most ${maxOther.toFixed(2)}), measured from /proc/stat minus the CPU time of the bench's own server, redis-server and wrk; load average ${meta.loadBefore.map((n) => n.toFixed(2)).join(' / ')} before the run |`,
  );
  lines.push(
    `| same for all | route \`GET /\` answering \`ok\` (text); identifier: the \`x-id\` request header, for every limiter; limit ${HIGH_LIMIT.toLocaleString('en-US')} per ${WINDOW_MS / 1000} s in (a) and (b) (never reached), ${LOW_LIMIT} per ${WINDOW_MS / 1000} s in (c); each limiter sends its default (legacy \`X-RateLimit-*\`) headers |`,
  );
  lines.push(
    `| Redis clients | this package: ioredis \`{ enableOfflineQueue: false, maxRetriesPerRequest: 1 }\` (the README's recommendation, auto-pipelining off), and the same with \`enableAutoPipelining: true\` in the "with auto-pipelining" rows; node-redis \`createClient({ disableOfflineQueue: true })\` (the README's recommendation) in the "over node-redis" rows; GLIDE \`GlideClient.createClient({ requestTimeout: 450 })\` (50 ms shorter than the limiter's \`timeoutMs\`, as docs/valkey.md recommends; its Rust core's threads run in the server process, on its CPU) and iovalkey with ioredis's options in their rows, and the same on the cluster (\`GlideClusterClient\`, iovalkey \`Cluster\`); peers: ${PEER_CLIENT === 'same' ? 'the same options as this package' : 'a default ioredis client, as their READMEs show (no auto-pipelining)'} |`,
  );
  lines.push('');
  if (loaded) {
    lines.push(
      `> **The machine was loaded** during this run: other processes (other engineers' test runs) used ${meanOther.toFixed(2)} cores on average and up to ${maxOther.toFixed(2)} during a measurement, out of ${CPU_COUNT}. Absolute figures are noisy; look at the "other" CPU figure of each cell to see which were hit, and at the server CPU per request, which load disturbs less than requests/s.`,
      '',
    );
  }
  for (const { framework, limiters } of CONFIGS) {
    const rows = cells.filter((c) => c.framework === framework && c.runs.length > 0);
    if (rows.length === 0) continue;
    lines.push(`## ${framework === 'express' ? 'Express' : 'Fastify'}`, '');
    lines.push(
      '| scenario | limiter | requests/s | p50 ms | p99 ms | ratio to bare | status mix | requests/s per round | server CPU µs/request | Redis CPU µs/request | requests per script call | CPU cores: server / redis / wrk / other |',
    );
    lines.push('| --- | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | --- |');
    for (const scenario of SCENARIOS) {
      for (const limiter of limiters) {
        const cell = rows.find((c) => c.limiter === limiter && c.scenario.id === scenario.id);
        if (cell === undefined) continue;
        const middle = medianRun(cell.runs);
        const ratio = ratioOf(cells, framework, limiter, scenario.id);
        lines.push(
          `| ${scenario.title} | ${LIMITER_LABELS[limiter]} | ${fmtRps(medianOf(cell, rps))} | ${fmtMs(medianOf(cell, (r) => r.p50Us))} | ${fmtMs(medianOf(cell, (r) => r.p99Us))} | ${fmtSpread(ratio)} | ${statusMix(middle)}${middle.socketErrors ? `, ${middle.socketErrors} socket errors` : ''} | ${cell.runs.map((r) => fmtRps(r.requestsPerSecond)).join(', ')} | ${medianOf(cell, (r) => r.cpu.serverUsPerRequest).toFixed(1)} | ${medianOf(cell, (r) => r.cpu.redisUsPerRequest).toFixed(1)} | ${requestsPerScriptCall(cell)} | ${fmtCpu(middle.cpu)} |`,
        );
      }
    }
    lines.push('');
  }
  lines.push('## Targets (this package against the bare framework, the fastest peer and the floor)', '');
  lines.push(
    "Every figure is the median of per-round ratios, with their range in brackets. Ratio to bare = requests/s of this package (ioredis client as the README recommends, without auto-pipelining) ÷ the bare framework's; " +
      '× best peer = its requests/s ÷ those of the fastest peer library (highest median) in the same framework and scenario; ' +
      "p99 × best peer = this package's p99 latency ÷ that peer's (at most 1: a tail no worse than the peer's). " +
      "Redis CPU × thriftiest peer = this package's redis-server CPU µs per request (every master summed on the cluster) ÷ that of the peer library with the lowest. " +
      'Of floor = this package ÷ the floor row of the scenario: in (c), no limiter and the same 429 for every request; elsewhere, no limiter and one auto-pipelined INCR + PEXPIRE per request, which no Redis-backed limiter that counts can beat. ' +
      "Also: the ratio to bare over node-redis (client as the README recommends), over Valkey GLIDE and iovalkey (Fastify), with auto-pipelining, and with the precise window; and, for reading through noise, the CPU ratio = bare server CPU µs per request ÷ the limited server's (the throughput ratio a CPU-bound server would show; it leaves out redis-server's own CPU).",
    '',
  );
  lines.push(
    '| framework | scenario | target | ratio to bare | best peer (its ratio) | × best peer | p99 × best peer | Redis CPU × thriftiest peer | | of floor | over node-redis | node-redis of floor | over GLIDE | over iovalkey | with auto-pipelining | precise window | CPU ratio |',
    '| --- | --- | --- | ---: | --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  );
  for (const target of TARGETS) {
    const { framework, scenario, minRatio, minOverBestPeer, maxRedisCpuOverBestPeer } = target;
    const ratio = ratioOf(cells, framework, 'swl', scenario);
    if (ratio === undefined) continue;
    const peer = bestPeer(cells, framework, scenario);
    const overPeer = peer === undefined ? undefined : ratioBetween(cells, framework, 'swl', peer, scenario);
    const allowed = scenario !== 'c';
    const p99 = peer === undefined || !allowed ? undefined : p99OverPeer(cells, framework, 'swl', peer, scenario);
    const floor: LimiterName = allowed ? 'incr' : 'floor';
    const wanted = [
      minRatio === undefined ? '' : `ratio ≥ ${minRatio.toFixed(2)}`,
      minOverBestPeer === undefined ? '' : minOverBestPeer === 1 ? 'ahead of every peer' : `≥ ${minOverBestPeer.toFixed(2)} × best peer`,
      allowed ? 'p99 ≤ best peer' : '',
      maxRedisCpuOverBestPeer === undefined ? '' : `Redis CPU ≤ ${maxRedisCpuOverBestPeer.toFixed(1)} × thriftiest peer`,
    ].filter(Boolean);
    const redisCpu = redisCpuOverBestPeer(cells, framework, 'swl', scenario);
    const met =
      (minRatio === undefined || ratio.median >= minRatio) &&
      (minOverBestPeer === undefined ||
        (overPeer !== undefined && (minOverBestPeer === 1 ? overPeer.median > 1 : overPeer.median >= minOverBestPeer))) &&
      (!allowed || (p99 !== undefined && p99.median <= 1)) &&
      (maxRedisCpuOverBestPeer === undefined || (redisCpu !== undefined && redisCpu.ratio.median <= maxRedisCpuOverBestPeer));
    const peerRatio = peer === undefined ? undefined : ratioOf(cells, framework, peer, scenario);
    const peerText =
      peer === undefined ? '' : `${LIMITER_LABELS[peer].split(' (')[0]} (${peerRatio === undefined ? '' : peerRatio.median.toFixed(2)})`;
    lines.push(
      `| ${framework} | (${scenario}) | ${wanted.join(', ')} | ${fmtSpread(ratio)} | ${peerText} | ${fmtSpread(overPeer)} | ${fmtSpread(p99)} | ${redisCpu === undefined ? '' : `${fmtSpread(redisCpu.ratio)} (${redisCpu.peer})`} | ${met ? 'met' : '**missed**'} | ${fmtSpread(ratioBetween(cells, framework, 'swl', floor, scenario))} | ${fmtSpread(ratioOf(cells, framework, 'swlnr', scenario))} | ${fmtSpread(ratioBetween(cells, framework, 'swlnr', floor, scenario))} | ${fmtSpread(ratioOf(cells, framework, 'swlgl', scenario))} | ${fmtSpread(ratioOf(cells, framework, 'swliv', scenario))} | ${fmtSpread(ratioOf(cells, framework, 'swlap', scenario))} | ${fmtSpread(ratioOf(cells, framework, 'swlpw', scenario))} | ${fmtSpread(cpuRatioOf(cells, framework, 'swl', scenario))} |`,
    );
  }
  lines.push('');
  return lines.join('\n');
}

/** The commit the bench ran on, and any uncommitted changes under src/ (the servers run the working tree). */
function gitState(): string {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src'], { cwd: ROOT, encoding: 'utf8' })
      .split('\n')
      .filter(Boolean)
      .map((line) => line.slice(3));
    return `commit ${commit}${dirty.length ? `, with uncommitted changes in ${dirty.map((f) => `\`${f}\``).join(', ')} (the servers run the working tree)` : ', no uncommitted changes in src/'}`;
  } catch {
    return 'unknown (not a git checkout?)';
  }
}

/** Hand-written notes below this marker in an existing results file are kept when it is rewritten. */
const NOTES_MARKER = '<!-- notes: kept when the bench rewrites this file -->';

function existingNotes(): string {
  try {
    const text = readFileSync(OUT, 'utf8');
    const at = text.indexOf(NOTES_MARKER);
    return at === -1 ? '' : text.slice(at);
  } catch {
    return '';
  }
}

function wrkVersion(): string {
  try {
    execFileSync('wrk', ['-v'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (error) {
    // wrk -v prints its version and exits non-zero.
    const out = String((error as { stdout?: string }).stdout ?? '');
    const match = /wrk (\S+)/.exec(out);
    if (match) return match[1];
  }
  return 'unknown';
}

async function main(): Promise<void> {
  const started = new Date();
  buildDir = compileForBench(['server.ts', 'gc.ts']);
  const loadBefore = loadavg();
  const redis = await startRedis();
  const admin = new Redis({ port: redis.port, host: '127.0.0.1', lazyConnect: true });
  await admin.connect();
  const info = await admin.info('server');
  const redisVersion = /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown';
  const redisPid = Number(/process_id:(\d+)/.exec(info)?.[1]);
  pinRedis(redisPid);
  // The cluster only when a cluster scenario is selected: it takes a few seconds to form.
  const wantsCluster = SCENARIOS.some(
    (s) => s.cluster && CONFIGS.some(({ framework, limiters }) => limiters.some((l) => selected(framework, l, s.id))),
  );
  const cluster: RedisCluster | undefined = wantsCluster ? await startCluster(3) : undefined;
  const clusterAdmins = (cluster?.nodes ?? []).map((node) => new Redis({ port: node.port, host: '127.0.0.1', lazyConnect: true }));
  const clusterPids: number[] = [];
  for (const node of clusterAdmins) {
    await node.connect();
    const pid = Number(/process_id:(\d+)/.exec(await node.info('server'))?.[1]);
    pinRedis(pid);
    clusterPids.push(pid);
  }
  const waitIdle = Number(process.env.BENCH_WAIT_IDLE ?? 0);
  if (waitIdle > 0) {
    const deadline = Date.now() + waitIdle * 1000;
    for (;;) {
      const load = await foreignLoad(3, () => processCpu(redisPid) + clusterPids.reduce((sum, pid) => sum + processCpu(pid), 0));
      if (load < 0.15 || Date.now() > deadline) {
        log(`other processes: ${load.toFixed(2)} cores over 3 s; starting`);
        break;
      }
      log(`other processes: ${load.toFixed(2)} cores over 3 s; waiting for a quieter machine`);
    }
  }
  log(
    `redis-server ${redisVersion} on port ${redis.port}${PIN ? ' (CPU 1)' : ''}; wrk: ${describeWrk({ threads: 1, connections: CONNECTIONS, durationSeconds: DURATION, cpus: LOAD_CPUS })}, warm-up ${WARMUP} s, ${ROUNDS} round(s), a fresh server per round`,
  );

  const cells: Cell[] = [];
  const servers: Server[] = [];
  const stopAll = async (): Promise<void> => {
    await Promise.all(servers.splice(0).map(stopServer));
  };
  process.on('SIGINT', () => {
    for (const server of servers) server.child.kill('SIGKILL');
    void Promise.all([redis.stop(), cluster?.stop()]).then(() => process.exit(130));
  });

  try {
    // Every round runs in a server process of its own: started, warmed up, measured, stopped. A
    // long-lived server's speed depends on its history: one holding a Redis connection whose first
    // traffic came after it had idled long enough for V8's memory reducer (about 10 s) answered 20
    // to 30 % slower for as long as it ran, and a bare server once turned about 40 % slower mid-run
    // and stayed so (bench/NOTES.md). Fresh processes keep rounds independent, so the best
    // round of a cell is not bound to one process's luck.
    const groups = [...new Set(SCENARIOS.map((s) => `${s.cluster}:${s.limit}`))];
    for (const group of groups) {
      const scenarios = SCENARIOS.filter((s) => `${s.cluster}:${s.limit}` === group);
      if (!CONFIGS.some(({ framework, limiters }) => limiters.some((limiter) => scenarios.some((s) => selected(framework, limiter, s.id)))))
        continue;
      const { limit, cluster: onCluster } = scenarios[0];
      const target: RedisTarget = onCluster
        ? { port: redis.port, clusterPorts: cluster!.nodes.map((node) => node.port) }
        : { port: redis.port };
      const redisPids = onCluster ? clusterPids : [redisPid];
      const redisCpu = (): number => redisPids.reduce((sum, pid) => sum + processCpu(pid), 0);
      const redisNodes = onCluster ? clusterAdmins : [admin];
      if (onCluster) await Promise.all(clusterAdmins.map((node) => node.flushall()));
      else await admin.flushall();
      for (const scenario of scenarios) {
        const order = CONFIGS.flatMap(({ framework, limiters }) =>
          limiters.filter((limiter) => selected(framework, limiter, scenario.id)).map((limiter) => ({ framework, limiter })),
        );
        const scenarioCells = order.map(({ framework, limiter }) => {
          const cell: Cell = { scenario, framework, limiter, runs: [] };
          cells.push(cell);
          return cell;
        });
        for (let round = 0; round < ROUNDS; round++) {
          const indices = order.map((_, i) => i);
          if (round % 2 === 1) indices.reverse();
          for (const i of indices) {
            const server = await startServer(order[i].framework, order[i].limiter, limit, target);
            servers.push(server);
            try {
              const common = {
                url: `http://127.0.0.1:${server.port}/`,
                traffic: scenario.traffic,
                threads: 1,
                connections: CONNECTIONS,
                countStatuses: scenario.countStatuses,
                cpus: LOAD_CPUS,
              };
              if (WARMUP > 0) await runWrk({ ...common, durationSeconds: WARMUP });
              if (TRACE) await readTrace(server); // starts the measured window
              const pid = server.child.pid!;
              const commandsBefore = await commandTotals(redisNodes);
              const before = {
                at: process.hrtime.bigint(),
                busy: machineBusy(),
                server: processCpu(pid),
                redis: redisCpu(),
                self: process.cpuUsage(),
              };
              const result = await runWrk({ ...common, durationSeconds: DURATION });
              const trace = TRACE ? await readTrace(server) : undefined;
              const wall = Number(process.hrtime.bigint() - before.at) / 1e9;
              const self = process.cpuUsage(before.self);
              const server_ = processCpu(pid) - before.server;
              const redis_ = redisCpu() - before.redis;
              const commandsAfter = await commandTotals(redisNodes);
              const scriptCalls = commandsAfter.scriptCalls - commandsBefore.scriptCalls;
              const other = machineBusy() - before.busy - server_ - redis_ - result.cpuSeconds - (self.user + self.system) / 1e6;
              const cpu: CpuShare = {
                server: server_ / wall,
                redis: redis_ / wall,
                wrk: result.cpuSeconds / wall,
                other: Math.max(0, other) / wall,
                serverUsPerRequest: (server_ * 1e6) / result.requests,
                redisUsPerRequest: (redis_ * 1e6) / result.requests,
                commandsPerRequest: (commandsAfter.calls - commandsBefore.calls) / result.requests,
                scriptCallsPerRequest: scriptCalls / result.requests,
                usPerScriptCall: scriptCalls === 0 ? 0 : (commandsAfter.scriptUsec - commandsBefore.scriptUsec) / scriptCalls,
              };
              scenarioCells[i].runs.push({ ...result, cpu });
              log(
                `${scenario.id} round ${round + 1}/${ROUNDS} ${server.framework.padEnd(7)} ${server.limiter.padEnd(4)} ${fmtRps(result.requestsPerSecond).padStart(7)} req/s  p50 ${fmtMs(result.p50Us)} ms  p99 ${fmtMs(result.p99Us)} ms  CPU server/redis/wrk/other ${fmtCpu(cpu)}  server ${cpu.serverUsPerRequest.toFixed(1)} µs/req  redis ${cpu.redisUsPerRequest.toFixed(1)} µs/req  ${fmtScriptCalls(cpu)}  ${statusMix(result)}${fmtTrace(trace)}`,
              );
            } finally {
              servers.splice(servers.indexOf(server), 1);
              await stopServer(server);
            }
          }
        }
      }
    }
  } finally {
    await stopAll();
    await admin.quit().catch(() => undefined);
    for (const node of clusterAdmins) await node.quit().catch(() => undefined);
    await Promise.all([redis.stop(), cluster?.stop()]);
  }

  const markdown = report(cells, { started, seconds: (Date.now() - started.getTime()) / 1000, loadBefore, redisVersion });
  process.stdout.write(`${markdown}\n`);
  if (OUT !== '-') {
    const notes = existingNotes();
    writeFileSync(OUT, notes ? `${markdown}\n${notes}` : markdown);
    log(`written to ${OUT}${notes ? ' (notes kept)' : ''}`);
  }
  if (PROFILE.size > 0) log(`CPU profiles in ${PROFILE_DIR}`);
}

main().catch((error: unknown) => {
  log(error instanceof Error ? (error.stack ?? error.message) : String(error));
  process.exit(1);
});
