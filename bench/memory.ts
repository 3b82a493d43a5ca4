/**
 * `npm run bench:memory`: Redis memory per identifier for each algorithm.
 *
 * Starts its own redis-server, then per algorithm: FLUSHALL, run the algorithm's real Lua
 * script once per identifier for 1,000,000 distinct identifiers (pipelined through ioredis,
 * batches of 1,000 calls of the command registered with `defineCommand`, as RedisStore
 * does), and compare `used_memory` from `INFO memory` before and after. Keys are built by
 * the limiter's own `keyFor`. Then the same for each peer library's Redis store, driven through its
 * own API with the same key strings. Writes bench/memory-results.md.
 *
 * Environment: BENCH_IDS (default 1000000), BENCH_OUT (default bench/memory-results.md; `-` for none).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import Redis from 'ioredis';
import { ALGORITHMS, type AlgorithmName } from '../src/algorithms';
import { DEFAULT_PRECISION } from '../src/algorithms/precise-window';
import { createLimiter } from '../src/core/limiter';
import { scriptArgv } from '../src/protocol';
import { exponential, mulberry32 } from '../support/random';
import { startRedis } from '../support/redis-server';

const ROOT = resolve(__dirname, '..');
const IDS = Number(process.env.BENCH_IDS ?? 1_000_000);
const BATCH = 1000;
const OUT = process.env.BENCH_OUT ?? join(ROOT, 'bench', 'memory-results.md');
const PREFIX = 'rl';
const LIMIT = 100;
const WINDOW = '1m';
const TARGET_SLIDING_WINDOW = 150;

/** The n-th identifier, as `byIp()` would produce for a client in 10.0.0.0/8: `ip:10.x.y.z`. */
function identifier(n: number): string {
  return `ip:10.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
}

/** One measured configuration. */
interface Variant {
  algorithm: AlgorithmName;
  /** Units counted per identifier, in one check. */
  cost: number;
  window: string;
  /** The limit per window; LIMIT when absent. */
  limit?: number;
  /** Why this row is here. */
  note: string;
}

const VARIANTS: readonly Variant[] = [
  { algorithm: 'sliding-window', cost: 1, window: WINDOW, note: 'the target case: one request per identifier' },
  { algorithm: 'fixed-window', cost: 1, window: WINDOW, note: 'one request per identifier' },
  { algorithm: 'sliding-log', cost: 1, window: WINDOW, note: 'one request per identifier' },
  // The precise window's key lives one window and one bucket after its write: at 1m, about as long
  // as a loaded machine takes to write 1,000,000 keys. An hour keeps them all; the value has the
  // same length (15 characters for one unit: bucket width, tail bucket and counts, in base 36).
  {
    algorithm: 'precise-window',
    cost: 1,
    window: '1h',
    note: 'one request per identifier, default precision; an hour-long window so that no key expires during the run (at 1m the key lives 60.01 s), same value length as at 1m',
  },
  {
    algorithm: 'sliding-window',
    cost: 10,
    window: WINDOW,
    note: '10 counted per identifier: a client that has made 10 requests in the window (longer counts, if the encoding lengthens them)',
  },
  // The token bucket's key lives only until its bucket is full again: after one unit of 100 per
  // minute that is 600 ms, so most keys would expire during the run. A day-long window keeps them
  // 14.4 minutes; the value has the same shape (the TAT in whole ms, decimal, 13 digits; window /
  // limit is a whole number of ms in both cases, so no ':r' part).
  {
    algorithm: 'token-bucket',
    cost: 1,
    window: '1d',
    note: 'one request per identifier; a day-long window so that no key expires during the run (at 100 per minute the key would live 600 ms), same value length as at 1m',
  },
  {
    algorithm: 'token-bucket',
    cost: 1,
    window: '1d',
    limit: 7,
    note: 'window / limit not a whole number of ms: the TAT carries a fraction, stored as `m:r`',
  },
];

interface Row extends Variant {
  before: number;
  after: number;
  keys: number;
  perIdentifier: number;
  sampleKey: string;
  sampleType: string;
  sampleValue: string;
  memoryUsage: number;
  seconds: number;
}

async function usedMemory(client: Redis): Promise<number> {
  const info = await client.info('memory');
  return Number(/used_memory:(\d+)/.exec(info)![1]);
}

/**
 * `used_memory` less the clients' buffers (`mem_clients_normal`): the bench's own connection keeps a
 * reply buffer of about 20 KB some of the time, which would weigh on rows with few identifiers.
 */
async function dataMemory(client: Redis): Promise<number> {
  const info = await client.info('memory');
  return Number(/used_memory:(\d+)/.exec(info)![1]) - Number(/mem_clients_normal:(\d+)/.exec(info)![1]);
}

/** Waits until `client` is the only client connected, so that no other client's buffers are counted. */
async function alone(client: Redis): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (/connected_clients:1\b/.test(await client.info('clients'))) return;
    await new Promise((done) => setTimeout(done, 50));
  }
  throw new Error('bench:memory: another client stays connected to the bench server');
}

/** Waits until the main and expires dictionaries have finished incremental rehashing, so no half-moved table is counted. */
async function settle(client: Redis): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const stats = String(await client.call('DEBUG', 'HTSTATS', '0'));
    if (!/Rehashing|rehashing target/i.test(stats)) return;
    await new Promise((done) => setTimeout(done, 100));
  }
}

type Limiter = ReturnType<typeof createLimiter>;

/** ARGV as RedisStore encodes it, for a check of `cost` at `now`. */
function checkArgv(limiter: Limiter, now: number | undefined, cost: number): ReturnType<typeof scriptArgv> {
  return scriptArgv({
    now,
    cost,
    dryRun: false,
    blockFor: 0,
    countedAt: 0,
    actualCost: 0,
    tiers: limiter.tiers,
    precision: limiter.precision,
  });
}

/**
 * Registers the algorithm's check script as a command (as RedisStore does), runs it once so that
 * its cache entry is not counted as per-identifier memory, then empties Redis.
 *
 * @returns the command's name, for pipelines.
 */
async function prepare(client: Redis, algorithm: AlgorithmName, limiter: Limiter): Promise<string> {
  const command = `bench_${algorithm.replace(/-/g, '_')}`;
  if (typeof (client as unknown as Record<string, unknown>)[command] !== 'function')
    client.defineCommand(command, { numberOfKeys: 1, lua: ALGORITHMS[algorithm].check.lua });
  await client.flushall();
  await (client as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>)[command](
    limiter.keyFor('warm-up'),
    ...checkArgv(limiter, undefined, 1),
  );
  await client.flushall();
  await settle(client);
  return command;
}

async function measure(client: Redis, variant: Variant): Promise<Row> {
  const { algorithm, cost, window } = variant;
  const limiter = createLimiter({ limit: variant.limit ?? LIMIT, window, algorithm, prefix: PREFIX });
  const command = await prepare(client, algorithm, limiter);
  const before = await usedMemory(client);

  // A fixed clock at the start of the current window, passed as ARGV[1]: every key then lives a
  // whole window (fixed window) or more from its write, so none expires before it is counted.
  const now = Math.floor(Date.now() / limiter.tiers[0].window) * limiter.tiers[0].window;
  const argv = checkArgv(limiter, now, cost);
  const started = process.hrtime.bigint();
  for (let start = 0; start < IDS; start += BATCH) {
    const pipeline = client.pipeline() as unknown as Record<string, (...args: unknown[]) => unknown> & {
      exec(): Promise<[Error | null, unknown][]>;
    };
    for (let n = start; n < Math.min(IDS, start + BATCH); n++) {
      pipeline[command](limiter.keyFor(identifier(n)), ...argv);
    }
    const results = await pipeline.exec();
    const failed = results.find(([error]) => error !== null);
    if (failed) throw failed[0];
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await settle(client);
  const after = await usedMemory(client);
  const keys = await client.dbsize();
  if (keys !== IDS) process.stderr.write(`warning: ${keys} keys for ${IDS} identifiers (some expired?)\n`);
  const sampleKey = limiter.keyFor(identifier(Math.floor(IDS / 2)));
  const sampleType = await client.type(sampleKey);
  const sampleValue =
    sampleType === 'string'
      ? JSON.stringify(await client.get(sampleKey))
      : JSON.stringify(await client.call('ZRANGE', sampleKey, '0', '-1', 'WITHSCORES'));
  const memoryUsage = Number(await client.call('MEMORY', 'USAGE', sampleKey, 'SAMPLES', '0'));
  return {
    ...variant,
    before,
    after,
    keys,
    perIdentifier: (after - before) / IDS,
    sampleKey,
    sampleType,
    sampleValue,
    memoryUsage,
    seconds,
  };
}

/** How a fully used identifier's requests are spread in time. */
type Spread = 'even' | 'Poisson';

/**
 * One configuration measured fully used: each identifier makes twice its limit in requests over
 * two windows, evenly spaced or as Poisson arrivals at the same mean rate, as a client that spends
 * its whole limit would. What is kept at the end is that client's steady state.
 */
interface FullVariant {
  algorithm: AlgorithmName;
  limit: number;
  /** Buckets per window, for precise-window; its default when absent. */
  precision?: number;
  spread: Spread;
}

/** The limits measured fully used. */
const FULL_LIMITS = [10, 100, 1000] as const;

/** The coarser precision measured at limit 1000, to show the bound of `precision + 1` buckets. */
const COARSE_PRECISION = 60;

const FULL_VARIANTS: readonly FullVariant[] = FULL_LIMITS.flatMap((limit): FullVariant[] => [
  { algorithm: 'sliding-window', limit, spread: 'even' },
  { algorithm: 'sliding-log', limit, spread: 'even' },
  { algorithm: 'precise-window', limit, spread: 'even' },
  { algorithm: 'precise-window', limit, spread: 'Poisson' },
  ...(limit === 1000
    ? [
        { algorithm: 'precise-window', limit, precision: COARSE_PRECISION, spread: 'even' } as const,
        { algorithm: 'precise-window', limit, precision: COARSE_PRECISION, spread: 'Poisson' } as const,
      ]
    : []),
]);

/**
 * Identifiers per limit in the fully used rows: BENCH_IDS divided by a power of two, so that the key
 * dictionaries (2^k buckets) are as full as in the one-request rows and each row's bytes per identifier
 * compare with theirs; about 1.5 million requests per row.
 */
const FULL_DIVISORS: Readonly<Record<(typeof FULL_LIMITS)[number], number>> = { 10: 16, 100: 128, 1000: 1024 };

interface FullRow extends FullVariant {
  ids: number;
  /** Requests per identifier. */
  checks: number;
  /** Allowed requests per identifier, on average. */
  allowed: number;
  perIdentifier: number;
  keys: number;
  /** The sample identifier's state in words: its length, and what it holds. */
  sample: string;
  /** For precise-window: the units and buckets the sample holds. */
  held?: { units: number; buckets: number };
  /** The sample's value length in bytes, for a string. */
  valueBytes?: number;
  memoryUsage: number;
  seconds: number;
}

/** Identifier `n`'s request times, ms, over the two windows that end at `end`: `checks` of them, ascending. */
function requestTimes(spread: Spread, n: number, checks: number, window: number, end: number): number[] {
  const start = end - 2 * window;
  if (spread === 'even') return Array.from({ length: checks }, (_, k) => start + Math.floor((k * 2 * window) / checks));
  const random = mulberry32(n + 1);
  const rate = checks / (2 * window);
  const times: number[] = [];
  for (let time = start + exponential(random, rate); times.length < checks; time += exponential(random, rate)) times.push(Math.floor(time));
  return times;
}

/**
 * The units and buckets a precise-window state holds (see the format in
 * src/algorithms/precise-window.ts): per tier the tail bucket of the header, plus one bucket per
 * entry (a varint gap, odd when a varint count follows).
 */
function heldByPreciseWindow(value: Buffer): { units: number; buckets: number } {
  const text = value.toString('latin1');
  const header = /([0-9a-z]+):([0-9a-z]+):([0-9a-z]+):([0-9a-z]+):([0-9a-z]+):([0-9a-z]+):([0-9a-z]+)\|/g;
  let units = 0;
  let buckets = 0;
  for (let match = header.exec(text); match !== null; match = header.exec(text)) {
    const total = Number.parseInt(match[4], 36);
    const bytes = Number.parseInt(match[7], 36);
    const entries = value.subarray(header.lastIndex, header.lastIndex + bytes);
    units += total;
    if (total > 0) buckets++;
    let at = 0;
    const varint = (): number => {
      let result = 0;
      let scale = 1;
      while (entries[at] >= 128) {
        result += (entries[at++] - 128) * scale;
        scale *= 128;
      }
      return result + entries[at++] * scale;
    };
    while (at < entries.length) {
      if (varint() % 2 === 1) varint();
      buckets++;
    }
    header.lastIndex += bytes;
  }
  return { units, buckets };
}

/**
 * Measures one fully used configuration. The requests go through a connection of their own, closed
 * before memory is read again: the buffers a pipeline leaves on its connection are then not counted.
 *
 * @param connect - opens a new connection to the bench's server.
 */
async function measureFull(client: Redis, connect: () => Redis, variant: FullVariant): Promise<FullRow> {
  const { algorithm, limit, precision, spread } = variant;
  const ids = Math.max(1, Math.round(IDS / FULL_DIVISORS[limit as (typeof FULL_LIMITS)[number]]));
  const checks = 2 * limit;
  const limiter = createLimiter({ limit, window: WINDOW, algorithm, prefix: PREFIX, ...(precision === undefined ? {} : { precision }) });
  const { window } = limiter.tiers[0];
  const command = await prepare(client, algorithm, limiter);
  await alone(client);
  const before = await dataMemory(client);
  const writer = connect();
  writer.defineCommand(command, { numberOfKeys: 1, lua: ALGORITHMS[algorithm].check.lua });
  const keys = Array.from({ length: ids }, (_, n) => limiter.keyFor(identifier(n)));
  // Passed as ARGV[1]: two windows of requests ending at the start of the current window. Each round
  // sends every identifier its next request, so each key is written again within a round's time
  // and none expires before it is counted.
  const end = Math.floor(Date.now() / window) * window;
  const times = keys.map((_, n) => requestTimes(spread, n, checks, window, end));
  let allowed = 0;
  const started = process.hrtime.bigint();
  for (let k = 0; k < checks; k++) {
    // One round: every identifier's k-th request, its pipelines sent together.
    const sent: Promise<[Error | null, unknown][]>[] = [];
    for (let from = 0; from < ids; from += BATCH) {
      const pipeline = writer.pipeline() as unknown as Record<string, (...args: unknown[]) => unknown> & {
        exec(): Promise<[Error | null, unknown][]>;
      };
      for (let n = from; n < Math.min(ids, from + BATCH); n++) pipeline[command](keys[n], ...checkArgv(limiter, times[n][k], 1));
      sent.push(pipeline.exec());
    }
    for (const results of await Promise.all(sent)) {
      for (const [error, reply] of results) {
        if (error !== null) throw error;
        if ((reply as number[])[0] === 1) allowed++;
      }
    }
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await writer.quit();
  await alone(client);
  await settle(client);
  const after = await dataMemory(client);
  const count = await client.dbsize();
  if (count !== ids) process.stderr.write(`warning: ${count} keys for ${ids} identifiers (some expired?)\n`);
  const sampleKey = keys[Math.floor(ids / 2)];
  const type = await client.type(sampleKey);
  let sample: string;
  let held: FullRow['held'];
  let valueBytes: number | undefined;
  if (type === 'zset') sample = `zset of ${await client.zcard(sampleKey)} members`;
  else {
    const value = (await client.getBuffer(sampleKey)) ?? Buffer.alloc(0);
    valueBytes = value.length;
    if (algorithm === 'precise-window') {
      held = heldByPreciseWindow(value);
      sample = `${value.length} bytes: ${held.units} units in ${held.buckets} buckets`;
    } else sample = `\`${value.toString('latin1')}\``;
  }
  return {
    ...variant,
    ids,
    checks,
    allowed: allowed / ids,
    perIdentifier: (after - before) / ids,
    keys: count,
    sample,
    held,
    valueBytes,
    memoryUsage: Number(await client.call('MEMORY', 'USAGE', sampleKey, 'SAMPLES', '0')),
    seconds,
  };
}

/** What a value of `bytes` bytes costs per identifier, emulated; `note` says why that length. */
interface LengthRow {
  bytes: number;
  perIdentifier: number;
  note: string;
}

/** The TTL of the emulated values, ms: long enough for a slow run (its length does not change the bytes). */
const PRECISE_PX = 600_000;

/**
 * The markdown section of the fully used rows, with the precise window's target and bound judged.
 *
 * @param oneRequest - the counter's bytes per identifier with one request each, for scale.
 * @param lengths - the emulated cost of the precise window's value by length.
 */
function fullSection(rows: readonly FullRow[], oneRequest: number | undefined, lengths: readonly LengthRow[]): string[] {
  const lines = ['## Fully used', ''];
  lines.push(
    `Each identifier makes twice its limit in requests over two windows of ${WINDOW} (passed as ARGV \`now\`), evenly spaced or as Poisson arrivals at the same mean rate (seeded per identifier), ` +
      "as a client spending its whole limit would; the state left at the end is that client's steady state. Rounds send every identifier its next request, in pipelines of " +
      `${BATCH.toLocaleString('en-US')}, so no key expires during the run. The identifiers per limit are ${IDS.toLocaleString('en-US')} divided by a power of two: the key dictionaries are as full as in the table above, ` +
      "so the rows compare with it. Memory here is `used_memory` less the clients' buffers (`mem_clients_normal`), and the requests go through a connection of their own, closed before memory is read again: the buffers of the connections (tens of KB, some of the time) would weigh on the rows with few identifiers. The fixed window and the token bucket keep one number per tier, whatever the use: see the rows above.",
    '',
  );
  lines.push(
    '| algorithm | precision | limit | spread | identifiers | requests per identifier | allowed per identifier | bytes per identifier | sample state | `MEMORY USAGE` of the sample | s to write |',
  );
  lines.push('| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: |');
  for (const row of rows) {
    const precision = row.algorithm === 'precise-window' ? (row.precision ?? DEFAULT_PRECISION).toLocaleString('en-US') : '';
    lines.push(
      `| ${row.algorithm} | ${precision} | ${row.limit.toLocaleString('en-US')} | ${row.spread} | ${row.ids.toLocaleString('en-US')} | ${row.checks.toLocaleString('en-US')} | ${row.allowed.toFixed(1)} | **${row.perIdentifier.toFixed(1)}** | ${row.sample} | ${row.memoryUsage.toLocaleString('en-US')} | ${row.seconds.toFixed(1)} |`,
    );
  }
  lines.push('');
  const find = (algorithm: AlgorithmName, limit: number, spread: Spread, precision?: number): FullRow | undefined =>
    rows.find((row) => row.algorithm === algorithm && row.limit === limit && row.spread === spread && row.precision === precision);
  const counter = find('sliding-window', 100, 'even');
  const judged = (['even', 'Poisson'] as const).flatMap((spread) => {
    const precise = find('precise-window', 100, spread);
    return counter === undefined || precise === undefined
      ? []
      : [{ spread, precise, ratio: precise.perIdentifier / counter.perIdentifier }];
  });
  if (counter !== undefined && judged.length > 0) {
    lines.push(
      `Target for the precise window at limit 100, fully used: at most 2 × the sliding window counter's bytes per identifier, fully used too (${counter.perIdentifier.toFixed(1)}): ${judged
        .map(
          ({ spread, precise, ratio }) =>
            `${spread === 'even' ? 'evenly spaced' : 'Poisson'}, ${precise.perIdentifier.toFixed(1)} bytes, ${ratio.toFixed(2)} ×: **${ratio <= 2 ? 'met' : 'missed'}**`,
        )
        .join('; ')}.` +
        (oneRequest === undefined
          ? ''
          : ` With one request per identifier the counter measured ${oneRequest.toFixed(1)} bytes, with a value in the same allocation class: the difference is this measurement's noise, which the precise window's rows carry too.`),
      '',
    );
  }
  if (lengths.length > 0) {
    lines.push('### The precise window by value length', '');
    lines.push(
      "The precise window's bytes per identifier step with the length of its value, by allocation class, not with each byte. " +
        `Values of these lengths, written with \`SET key value PX ${PRECISE_PX}\` on the same ${IDS.toLocaleString('en-US')} identifiers as the first table (a layout measured, not this package's script):`,
      '',
    );
    lines.push('| value length (bytes) | bytes per identifier | |', '| ---: | ---: | --- |');
    for (const { bytes, perIdentifier, note } of lengths) lines.push(`| ${bytes} | ${perIdentifier.toFixed(1)} | ${note} |`);
    lines.push('');
  }
  const coarse = (['even', 'Poisson'] as const).flatMap((spread) => {
    const row = find('precise-window', 1000, spread, COARSE_PRECISION);
    const fine = find('precise-window', 1000, spread);
    return row?.held === undefined || fine === undefined ? [] : [{ spread, row, fine }];
  });
  if (coarse.length > 0) {
    lines.push(
      `Bound: a precise window holds at most \`precision + 1\` buckets per tier, so its state stops growing with the units once every bucket holds some. At limit 1000 with a precision of ${COARSE_PRECISION} it held ${coarse
        .map(
          ({ spread, row, fine }) =>
            `${row.held!.units} units in ${row.held!.buckets} buckets (${spread === 'even' ? 'evenly spaced' : 'Poisson'}): ${row.perIdentifier.toFixed(1)} bytes per identifier, against ${fine.perIdentifier.toFixed(1)} at the default precision`,
        )
        .join('; ')}; the bound is ${COARSE_PRECISION + 1} buckets.`,
      '',
    );
  }
  return lines;
}

/** An alternative layout for the sliding window, emulated with plain commands (not this package's script). */
interface WhatIf {
  name: string;
  /** Queues the writes for identifier `n` (value = what the script would store for one request). */
  write(pipeline: ReturnType<Redis['pipeline']>, n: number, value: string): void;
}

const BUCKETS = Math.max(1, Math.floor(IDS / 100));

const WHAT_IFS: readonly WhatIf[] = [
  {
    name: 'same layout, value `index:current:previous` as now, through `SET key value PX 120000` (checks the emulation against the script)',
    write: (pipeline, n, value) => pipeline.set(`${PREFIX}:${identifier(n)}`, value, 'PX', 120_000),
  },
  {
    name: 'same layout, the value one character longer than 12 (13 characters): the next allocation class',
    write: (pipeline, n, value) => pipeline.set(`${PREFIX}:${identifier(n)}`, `${value}0`.padEnd(13, '0'), 'PX', 120_000),
  },
  {
    name: 'same layout without a TTL (for scale only: the TTL is needed)',
    write: (pipeline, n, value) => pipeline.set(`${PREFIX}:${identifier(n)}`, value),
  },
  {
    name: `hash buckets: \`HSET ${PREFIX}:{bucket} <identifier> <value>\`, ${BUCKETS.toLocaleString('en-US')} buckets of ~100 fields (listpack encoding), a TTL per bucket, none per identifier`,
    write: (pipeline, n, value) => {
      const key = `${PREFIX}:{${n % BUCKETS}}`;
      pipeline.hset(key, identifier(n), value);
      pipeline.pexpire(key, 120_000);
    },
  },
];

/**
 * Alternative layouts for the token bucket, emulated with plain commands; `value` is what the
 * script stored for one request (its TAT in whole ms, in decimal).
 */
const BUCKET_WHAT_IFS: readonly WhatIf[] = [
  {
    name: 'same layout, the TAT as the script writes it (decimal ms), through `SET key value PX 864000` (checks the emulation against the script)',
    write: (pipeline, n, value) => pipeline.set(`${PREFIX}:${identifier(n)}`, value, 'PX', 864_000),
  },
  {
    name: 'same layout, the TAT in base 36 (8 characters), a short string instead of an integer',
    write: (pipeline, n, value) => pipeline.set(`${PREFIX}:${identifier(n)}`, Number(value).toString(36), 'PX', 864_000),
  },
  {
    name: 'same layout, the TAT × limit + r as a decimal integer (keeps the fraction r; 15 digits at limit 100)',
    write: (pipeline, n, value) => pipeline.set(`${PREFIX}:${identifier(n)}`, String(Number(value) * LIMIT), 'PX', 864_000),
  },
];

async function measureWhatIf(client: Redis, whatIf: WhatIf, value: string): Promise<number> {
  await client.flushall();
  await settle(client);
  const before = await usedMemory(client);
  for (let start = 0; start < IDS; start += BATCH) {
    const pipeline = client.pipeline();
    for (let n = start; n < Math.min(IDS, start + BATCH); n++) whatIf.write(pipeline, n, value);
    await pipeline.exec();
  }
  await settle(client);
  return ((await usedMemory(client)) - before) / IDS;
}

/**
 * A peer library's Redis store: counts one request for `ip` through the library's own API, under the
 * key `rl:ip:<ip>` (the key this package's limiter uses, so rows differ by what is stored, not by
 * key length), limit and window as this package's rows.
 */
interface Peer {
  name: string;
  /** The key a library's defaults give, for the table. */
  defaultKey: string;
  create(client: Redis): Promise<(ip: string) => Promise<unknown>>;
}

const PEER_PREFIX = `${PREFIX}:ip:`;
const WINDOW_MS = 60_000;

const PEERS: readonly Peer[] = [
  {
    name: '@fastify/rate-limit (its RedisStore)',
    defaultKey: 'fastify-rate-limit-<ip>',
    create: async (client) => {
      const { default: FastifyRedisStore } = (await import('@fastify/rate-limit/store/RedisStore.js' as string)) as {
        default: new (
          continueExceeding: boolean,
          exponentialBackoff: boolean,
          redis: Redis,
          key: string,
        ) => { incr(ip: string, done: (error: Error | null) => void, timeWindow: number, max: number): void };
      };
      const store = new FastifyRedisStore(false, false, client, PEER_PREFIX);
      return (ip) => new Promise<void>((done, fail) => store.incr(ip, (error) => (error ? fail(error) : done()), WINDOW_MS, LIMIT));
    },
  },
  {
    name: 'rate-limiter-flexible (RateLimiterRedis)',
    defaultKey: 'rlflx:<ip>',
    create: async (client) => {
      const { RateLimiterRedis } = await import('rate-limiter-flexible');
      // keyPrefix joins the key with ':'.
      const limiter = new RateLimiterRedis({ storeClient: client, points: LIMIT, duration: WINDOW_MS / 1000, keyPrefix: `${PREFIX}:ip` });
      return (ip) => limiter.consume(ip);
    },
  },
  {
    name: 'express-rate-limit with rate-limit-redis',
    defaultKey: 'rl:<ip>',
    create: async (client) => {
      const { RedisStore } = await import('rate-limit-redis');
      const store = new RedisStore({
        prefix: PEER_PREFIX,
        sendCommand: (command: string, ...args: string[]) => client.call(command, ...args) as never,
      });
      store.init({ windowMs: WINDOW_MS } as never);
      return (ip) => store.increment(ip);
    },
  },
];

interface PeerRow {
  name: string;
  defaultKey: string;
  perIdentifier: number;
  keys: number;
  sampleKey: string;
  sampleValue: string;
  encoding: string;
  ttl: number;
}

/** One request for each of the identifiers through a peer's store, this many in flight. */
const PEER_IN_FLIGHT = 1000;

async function measurePeer(client: Redis, peer: Peer): Promise<PeerRow> {
  const count = await peer.create(client);
  await count('10.255.255.255');
  await client.flushall();
  await settle(client);
  const before = await usedMemory(client);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < IDS) await count(identifier(next++).slice('ip:'.length));
  };
  await Promise.all(Array.from({ length: PEER_IN_FLIGHT }, worker));
  await settle(client);
  const after = await usedMemory(client);
  const keys = await client.dbsize();
  const sampleKey = `${PEER_PREFIX}${identifier(Math.floor(IDS / 2)).slice('ip:'.length)}`;
  return {
    name: peer.name,
    defaultKey: peer.defaultKey,
    perIdentifier: (after - before) / IDS,
    keys,
    sampleKey,
    sampleValue: JSON.stringify(await client.get(sampleKey)),
    encoding: String(await client.call('OBJECT', 'ENCODING', sampleKey)),
    ttl: await client.pttl(sampleKey),
  };
}

/** The commit measured, and any uncommitted changes under src/ (the scripts come from the working tree). */
function gitState(): string {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src'], { cwd: ROOT, encoding: 'utf8' }).split('\n').filter(Boolean);
    return `commit ${commit}${dirty.length ? ', with uncommitted changes in src/' : ''}`;
  } catch {
    return 'unknown';
  }
}

function cpuModel(): string {
  const line = readFileSync('/proc/cpuinfo', 'utf8')
    .split('\n')
    .find((l) => l.startsWith('model name'));
  return line ? line.split(':')[1].trim() : 'unknown';
}

async function main(): Promise<void> {
  const started = new Date();
  const loadBefore = loadavg();
  // DEBUG HTSTATS tells when the key dictionaries have finished rehashing.
  const redis = await startRedis(['--enable-debug-command', 'local']);
  const client = new Redis({ host: '127.0.0.1', port: redis.port, lazyConnect: true });
  await client.connect();
  const info = await client.info('server');
  const redisVersion = /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown';
  const allocator = /mem_allocator:(\S+)/.exec(await client.info('memory'))?.[1] ?? 'unknown';
  const rows: Row[] = [];
  const whatIfs: { name: string; bytes: number }[] = [];
  const bucketWhatIfs: { name: string; bytes: number; encoding: string }[] = [];
  const peerRows: PeerRow[] = [];
  const fullRows: FullRow[] = [];
  const lengthRows: LengthRow[] = [];
  try {
    for (const variant of VARIANTS) {
      process.stderr.write(
        `${variant.algorithm}, cost ${variant.cost}, window ${variant.window}: ${IDS.toLocaleString('en-US')} identifiers... `,
      );
      const row = await measure(client, variant);
      process.stderr.write(`${row.perIdentifier.toFixed(1)} bytes each (${row.seconds.toFixed(1)} s)\n`);
      rows.push(row);
    }
    for (const variant of FULL_VARIANTS) {
      process.stderr.write(
        `fully used: ${variant.algorithm}${variant.precision === undefined ? '' : `, precision ${variant.precision}`}, limit ${variant.limit}, ${variant.spread}... `,
      );
      const row = await measureFull(client, () => new Redis({ host: '127.0.0.1', port: redis.port }), variant);
      process.stderr.write(
        `${row.perIdentifier.toFixed(1)} bytes each, ${row.allowed.toFixed(1)} allowed of ${row.checks}, ${row.sample} (${row.seconds.toFixed(1)} s)\n`,
      );
      fullRows.push(row);
    }
    // The precise window's value at the lengths its fully used samples had, and at 124 and 125 bytes.
    const sampled = (['even', 'Poisson'] as const).flatMap((spread) => {
      const row = fullRows.find(
        (r) => r.algorithm === 'precise-window' && r.limit === 100 && r.spread === spread && r.precision === undefined,
      );
      return row?.valueBytes === undefined
        ? []
        : [{ bytes: row.valueBytes, note: `the sample at limit 100, ${spread === 'even' ? 'evenly spaced' : 'Poisson'}` }];
    });
    const notes = new Map<number, string[]>([
      [124, []],
      [125, []],
    ]);
    for (const { bytes, note } of sampled) notes.set(bytes, [...(notes.get(bytes) ?? []), note]);
    for (const [bytes, note] of [...notes].sort(([a], [b]) => a - b)) {
      const perIdentifier = await measureWhatIf(
        client,
        { name: `${bytes} bytes`, write: (pipeline, n, value) => pipeline.set(`${PREFIX}:${identifier(n)}`, value, 'PX', PRECISE_PX) },
        'x'.repeat(bytes),
      );
      process.stderr.write(`what if (precise window): ${perIdentifier.toFixed(1)} bytes for a value of ${bytes} bytes\n`);
      lengthRows.push({ bytes, perIdentifier, note: note.join('; ') });
    }
    const value = rows[0].sampleValue.replace(/"/g, '');
    for (const whatIf of WHAT_IFS) {
      const bytes = await measureWhatIf(client, whatIf, value);
      process.stderr.write(`what if: ${bytes.toFixed(1)} bytes: ${whatIf.name}\n`);
      whatIfs.push({ name: whatIf.name, bytes });
    }
    const bucketRow = rows.find((row) => row.algorithm === 'token-bucket' && row.limit === undefined);
    if (bucketRow) {
      const bucketValue = bucketRow.sampleValue.replace(/"/g, '');
      for (const whatIf of BUCKET_WHAT_IFS) {
        const bytes = await measureWhatIf(client, whatIf, bucketValue);
        const encoding = String(await client.call('OBJECT', 'ENCODING', `${PREFIX}:${identifier(Math.floor(IDS / 2))}`));
        process.stderr.write(`what if (token bucket): ${bytes.toFixed(1)} bytes, ${encoding}: ${whatIf.name}\n`);
        bucketWhatIfs.push({ name: whatIf.name, bytes, encoding });
      }
    }
    for (const peer of PEERS) {
      process.stderr.write(`${peer.name}: ${IDS.toLocaleString('en-US')} identifiers... `);
      const row = await measurePeer(client, peer);
      process.stderr.write(`${row.perIdentifier.toFixed(1)} bytes each\n`);
      peerRows.push(row);
    }
  } finally {
    await client.quit().catch(() => undefined);
    await redis.stop();
  }

  const lines: string[] = [];
  lines.push('# Redis memory per identifier', '');
  lines.push(`Generated by \`npm run bench:memory\` (bench/memory.ts) on ${started.toISOString()}.`, '');
  lines.push('| | |', '| --- | --- |');
  const load = (averages: number[]): string => averages.map((average) => average.toFixed(2)).join(', ');
  lines.push(`| machine | ${cpus().length} CPUs, ${cpuModel()}, node ${process.version} |`);
  lines.push(
    `| load | load average (1, 5, 15 min) ${load(loadBefore)} at the start, ${load(loadavg())} at the end; the machine may be shared, which changes the seconds to write, not the bytes |`,
  );
  lines.push(`| source | ${gitState()} |`);
  lines.push(`| redis | redis-server ${redisVersion}, allocator ${allocator}, default settings, no persistence, started by the bench |`);
  lines.push(
    `| method | per algorithm: \`FLUSHALL\`, \`used_memory\` (INFO memory) before; ${IDS.toLocaleString('en-US')} distinct identifiers each checked once (counting the row's cost, with a fixed \`now\` at the start of the current window so no key expires during the run) through the algorithm's real Lua script, registered with ioredis \`defineCommand\` and sent in pipelines of ${BATCH.toLocaleString('en-US')}; \`used_memory\` after, once the key dictionaries finished rehashing. Bytes per identifier = (after − before) ÷ identifiers. The token bucket's key lives only until its bucket is full again (window ÷ limit per unit counted), so its rows use a day-long window (see their notes) |`,
  );
  lines.push(
    `| keys | prefix \`${PREFIX}\`, identifiers as \`byIp()\` makes them for 10.0.0.0/8 clients (\`ip:10.x.y.z\`), so keys look like \`${rows[0]?.sampleKey ?? ''}\`; limit ${LIMIT} per window unless a row says otherwise |`,
  );
  lines.push('');
  lines.push(
    '| algorithm | counted per identifier | limit | window | bytes per identifier | used_memory before | used_memory after | keys | sample key | type | sample value | `MEMORY USAGE` of the sample | s to write | why |',
  );
  lines.push('| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- | --- | --- | ---: | ---: | --- |');
  for (const row of rows) {
    lines.push(
      `| ${row.algorithm} | ${row.cost} | ${row.limit ?? LIMIT} | ${row.window} | **${row.perIdentifier.toFixed(1)}** | ${row.before.toLocaleString('en-US')} | ${row.after.toLocaleString('en-US')} | ${row.keys.toLocaleString('en-US')} | \`${row.sampleKey}\` | ${row.sampleType} | \`${row.sampleValue}\` | ${row.memoryUsage} | ${row.seconds.toFixed(1)} | ${row.note} |`,
    );
  }
  lines.push('');
  const sliding = rows[0];
  if (sliding) {
    const met = sliding.perIdentifier <= TARGET_SLIDING_WINDOW;
    lines.push(
      `Target for the sliding window (one request per identifier, ${WINDOW} window): ≤ ${TARGET_SLIDING_WINDOW} bytes per identifier: **${met ? 'met' : 'missed'}** (${sliding.perIdentifier.toFixed(1)} bytes).`,
      '',
    );
  }
  if (fullRows.length > 0) lines.push(...fullSection(fullRows, rows[0]?.perIdentifier, lengthRows));
  if (peerRows.length > 0) {
    lines.push('## The peer libraries', '');
    lines.push(
      `Each peer's Redis store, driven through its own API (${PEER_IN_FLIGHT.toLocaleString('en-US')} calls in flight) with the same ${IDS.toLocaleString('en-US')} identifiers, limit ${LIMIT} per ${WINDOW}, one request each, and the same key strings as this package (\`${PEER_PREFIX}<ip>\`): the rows differ by what is stored, not by the key. Each peer keeps a fixed window: one counter per identifier, with a TTL.`,
      '',
    );
    lines.push(
      "| library | bytes per identifier | keys | sample key | sample value | `OBJECT ENCODING` | PTTL of the sample (ms) | key with the library's default prefix |",
    );
    lines.push('| --- | ---: | ---: | --- | --- | --- | ---: | --- |');
    for (const row of peerRows) {
      lines.push(
        `| ${row.name} | **${row.perIdentifier.toFixed(1)}** | ${row.keys.toLocaleString('en-US')} | \`${row.sampleKey}\` | \`${row.sampleValue}\` | ${row.encoding} | ${row.ttl} | \`${row.defaultKey}\` |`,
      );
    }
    lines.push('');
    lines.push(
      "Reading: a counter below 10,000 is one of the integer objects Redis shares between keys (unless `maxmemory` is set with an LRU or LFU policy), so a peer's value costs no allocation of its own; " +
        'the rest (key, dictionary entries, TTL) is what every string key pays. ' +
        "This package's sliding window keeps two windows' counts and the window index in one string of at most 12 characters, " +
        `${sliding ? `${(sliding.perIdentifier - Math.min(...peerRows.map((row) => row.perIdentifier))).toFixed(1)} bytes per identifier more than the thriftiest peer's single count` : 'against the single count of a peer'}.`,
      '',
    );
  }
  lines.push('## Where the bytes go, and what would change them', '');
  lines.push(
    `Alternative layouts for the sliding window, emulated with plain commands on the same ${IDS.toLocaleString('en-US')} identifiers (value \`${rows[0]?.sampleValue.replace(/"/g, '') ?? ''}\`); these are measurements of what a change would give, not of this package:`,
    '',
  );
  lines.push('| layout | bytes per identifier |', '| --- | ---: |');
  for (const whatIf of whatIfs) lines.push(`| ${whatIf.name} | ${whatIf.bytes.toFixed(1)} |`);
  lines.push('');
  if (whatIfs.length >= 3) {
    lines.push(
      'Reading: with one string key per identifier, each identifier costs an entry in the main dictionary, the key string, the value object, ' +
        'an entry in the expires dictionary and a bucket pointer in each of the two dictionaries, every allocation rounded up to a jemalloc size class (16, 32, 48... bytes). ' +
        'The value is an embedded string of 16 (object) + 3 (string header) + length + 1 bytes: it fits 32 bytes up to 12 characters and takes 48 from 13 characters on, ' +
        `the step from 12 to 13 characters costs ${(whatIfs[1].bytes - whatIfs[0].bytes).toFixed(1)} bytes per identifier. ` +
        `The TTL (expires entry and bucket) costs ${(whatIfs[0].bytes - whatIfs[2].bytes).toFixed(1)} bytes. ` +
        'Within this layout the only way down is to keep the key and the value under those class boundaries (the value at most 12 characters); ' +
        'grouping identifiers into small hashes is the way to a several-fold reduction, at the price of per-identifier expiry (hash-field TTLs need Redis 7.4) and of a different key layout.',
      '',
    );
  }
  const bucket = rows.find((row) => row.algorithm === 'token-bucket' && row.limit === undefined);
  if (bucket && bucketWhatIfs.length >= 3) {
    // Compared as printed (one decimal): differences below 0.05 bytes per identifier are noise of used_memory.
    const bytes = (row: { perIdentifier: number }): number => Number(row.perIdentifier.toFixed(1));
    const others = rows.filter((row) => row.algorithm !== 'token-bucket' && row.cost === 1);
    const smallest = Math.min(...others.map(bytes));
    const smallestNames = others.filter((row) => bytes(row) === smallest).map((row) => row.algorithm);
    const standing =
      bytes(bucket) < smallest
        ? `the smallest of the ${new Set(rows.map((row) => row.algorithm)).size} algorithms (${bytes(bucket).toFixed(1)} against ${smallest.toFixed(1)} for ${smallestNames.join(' and ')})`
        : bytes(bucket) === smallest
          ? `**not** the smallest: tied with ${smallestNames.join(' and ')} at ${smallest.toFixed(1)} bytes`
          : `**not** the smallest: ${bytes(bucket).toFixed(1)} bytes against ${smallest.toFixed(1)} for ${smallestNames.join(' and ')}`;
    const saved = bucketWhatIfs[1].bytes - bucketWhatIfs[0].bytes;
    const sampleValue = bucket.sampleValue.replace(/"/g, '');
    lines.push('### The token bucket', '');
    lines.push(
      `Per identifier, the token bucket is ${standing}. Its value \`${sampleValue}\` (${sampleValue.length} digits: the TAT in whole ms, in decimal) ` +
        'parses as an integer, which Redis keeps inside the value object itself, with no string allocation; the rest of the cost (key, dictionary entries, TTL) is the same for every string key. ' +
        'Alternative layouts, emulated with plain commands on the same identifiers; measurements of what a change would give, not of this package:',
      '',
    );
    lines.push('| layout | bytes per identifier | `OBJECT ENCODING` of the value |', '| --- | ---: | --- |');
    for (const whatIf of bucketWhatIfs) lines.push(`| ${whatIf.name} | ${whatIf.bytes.toFixed(1)} | ${whatIf.encoding} |`);
    lines.push('');
    lines.push(
      `Reading: the decimal integer saves ${saved.toFixed(1)} bytes per identifier against the same TAT as a short base-36 string. ` +
        'That holds only while the value is one integer in whole milliseconds: several tiers, a block marker, or a fraction r (`window / limit` not a whole number of ms, the second token bucket row) make it a string again. ' +
        "Storing TAT × limit + r would keep the fraction in one integer (the third row: an integer too), but the script computes in Lua doubles, exact below 2^53: with today's epoch milliseconds (about 1.8 × 10^12) that allows limits up to about 5,000, and reading it back needs the limit it was written with.",
      '',
    );
  }
  const markdown = lines.join('\n');
  process.stdout.write(`${markdown}\n`);
  if (OUT !== '-') {
    writeFileSync(OUT, markdown);
    process.stderr.write(`written to ${OUT}\n`);
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
