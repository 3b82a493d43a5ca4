/**
 * `npm run bench:scripts`: what a script call costs Redis, per call and per check, measured on
 * redis-server processes of its own: `INFO commandstats` (time inside the command, per call) and
 * the server's CPU time from /proc (everything the server did, per check).
 *
 * - The batch forms: one check per call, and batches of 6 and 13 checks (what a turn of Fastify
 *   traffic gathers on a 3-master Cluster and on a standalone server, respectively), as a batch of
 *   one slot (keys declared) and as a node batch (keys in ARGV) over keys of many slots and of one.
 * - The algorithms: the sliding window counter and the precise window, on fresh identifiers and on
 *   one identifier holding a full window (limit 100, and 1000), against @fastify/rate-limit's script.
 *
 * Environment: SCRIPT_COST_CHECKS (checks per measurement, default 60000).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { ALGORITHMS } from '../src/algorithms';
import { batchArgv, scriptArgv } from '../src/protocol';
import { processCpu } from '../support/process-cpu';
import { startCluster, startRedis } from '../support/redis-server';
import { commandTotals } from './commandstats';

const CHECKS = Number(process.env.SCRIPT_COST_CHECKS ?? 60_000);
const IN_FLIGHT = 32;
const WINDOW = 60_000;
const START = 1_700_000_000_000;

/** The script @fastify/rate-limit runs per request, read from its package. */
const PEER_SCRIPT = /const lua = `([\s\S]*?)`/.exec(
  readFileSync(join(__dirname, '..', 'node_modules', '@fastify', 'rate-limit', 'store', 'RedisStore.js'), 'utf8'),
)![1];

/** CRC16 (XMODEM) of Redis Cluster key slots. */
function slotOf(key: string): number {
  const tag = /\{([^}]+)\}/.exec(key)?.[1] ?? key;
  let crc = 0;
  for (const byte of Buffer.from(tag)) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc % 16384;
}

interface Measured {
  usPerCall: number;
  cpuUsPerCheck: number;
  failedChecks: number;
}

/** Sends `calls` script calls (`IN_FLIGHT` at a time), each of `checksPerCall` checks, and measures the server. */
async function measure(
  client: Redis,
  pid: number,
  calls: number,
  checksPerCall: number,
  call: (i: number) => Promise<unknown>,
): Promise<Measured> {
  const before = await commandTotals([client]);
  const cpuBefore = processCpu(pid);
  let failedChecks = 0;
  const count = (reply: unknown): void => {
    if (reply instanceof Error) failedChecks += checksPerCall;
    else if (Array.isArray(reply)) for (const one of reply) if (String(one).startsWith('!')) failedChecks++;
  };
  const pending: Promise<void>[] = [];
  for (let i = 0; i < calls; i++) {
    pending.push(call(i).then(count, count));
    if (pending.length >= IN_FLIGHT) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
  const cpu = processCpu(pid) - cpuBefore;
  const after = await commandTotals([client]);
  const scriptCalls = after.scriptCalls - before.scriptCalls;
  return {
    usPerCall: scriptCalls === 0 ? Number.NaN : (after.scriptUsec - before.scriptUsec) / scriptCalls,
    cpuUsPerCheck: (cpu * 1e6) / (calls * checksPerCall),
    failedChecks,
  };
}

function row(name: string, m: Measured, checksPerCall: number): string {
  const failed = m.failedChecks === 0 ? '' : ` (${m.failedChecks} checks failed)`;
  return `| ${name} | ${m.usPerCall.toFixed(1)} | ${(m.usPerCall / checksPerCall).toFixed(2)} | ${m.cpuUsPerCheck.toFixed(2)}${failed} |`;
}

async function pidOf(client: Redis): Promise<number> {
  return Number(/process_id:(\d+)/.exec(await client.info('server'))![1]);
}

/** Batch forms on one node of a 3-master cluster: declared keys of one slot, ARGV keys of many slots and of one. */
async function batchForms(lines: string[]): Promise<void> {
  const cluster = await startCluster(3);
  try {
    const port = cluster.nodes[0].port;
    const client = new Redis({ port, host: '127.0.0.1' });
    const pid = await pidOf(client);
    const ranges = (await client.cluster('SLOTS')) as unknown as [number, number, [string, number]][];
    const own = ranges.filter((range) => range[2][1] === port);
    const served = (key: string): boolean => own.some(([from, to]) => slotOf(key) >= from && slotOf(key) <= to);
    const manySlots: string[] = [];
    for (let i = 0; manySlots.length < 50_000; i++) if (served(`rl:user:${i}`)) manySlots.push(`rl:user:${i}`);
    let tag = 0;
    while (!served(`{t${tag}}`)) tag++;
    const oneSlot = Array.from({ length: 50_000 }, (_, i) => `{t${tag}}:user:${i}`);
    const { check } = ALGORITHMS['sliding-window'];
    const argv = scriptArgv({
      now: undefined,
      cost: 1,
      dryRun: false,
      blockFor: 0,
      countedAt: 0,
      actualCost: 0,
      tiers: [{ limit: 1e9, window: WINDOW }],
      precision: 1,
    });
    const batchSha = (await client.script('LOAD', check.batchLua)) as string;
    const nodeSha = (await client.script('LOAD', check.nodeBatchLua)) as string;
    lines.push('### Batch forms (sliding window counter, fresh identifiers, one master of a 3-master cluster)', '');
    lines.push(
      '| form | checks per call | µs per call (commandstats) | µs per check (commandstats) | CPU µs per check (/proc) |',
      '| --- | ---: | ---: | ---: | ---: |',
    );
    for (const k of [1, 6, 13]) {
      const calls = Math.floor(CHECKS / k);
      const keysOf = (keys: string[], i: number) => Array.from({ length: k }, (_, j) => keys[(i * k + j) % keys.length]);
      const perKey = Array.from({ length: k }, () => argv);
      const forms: [string, (i: number) => Promise<unknown>][] = [
        [
          'batch, one slot',
          (i) => {
            const keys = keysOf(oneSlot, i);
            return client.evalsha(batchSha, keys.length, ...keys, ...batchArgv(perKey));
          },
        ],
        ['node batch, many slots', (i) => client.evalsha(nodeSha, 0, ...batchArgv(perKey, keysOf(manySlots, i)))],
        ['node batch, one slot', (i) => client.evalsha(nodeSha, 0, ...batchArgv(perKey, keysOf(oneSlot, i)))],
      ];
      for (const [name, call] of forms) {
        await client.flushall();
        const m = await measure(client, pid, calls, k, call);
        lines.push(row(`${name} | ${k}`, m, k));
      }
    }
    lines.push('');
    client.disconnect();
  } finally {
    await cluster.stop();
  }
}

/** Single checks per algorithm and state, against the peer's script, on a standalone server. */
async function algorithms(lines: string[]): Promise<void> {
  const redis = await startRedis();
  try {
    const client = new Redis({ port: redis.port, host: '127.0.0.1' });
    const pid = await pidOf(client);
    const peerSha = (await client.script('LOAD', PEER_SCRIPT)) as string;
    lines.push('### One check per call (standalone server)', '');
    lines.push(
      '| script | state | µs per call (commandstats) | µs per check (commandstats) | CPU µs per check (/proc) |',
      '| --- | --- | ---: | ---: | ---: |',
    );
    const cases: { state: string; ids: number; limit: number }[] = [
      { state: 'fresh identifiers', ids: CHECKS, limit: 1e9 },
      { state: 'one identifier, limit 100 per minute, fully used', ids: 1, limit: 100 },
      { state: 'one identifier, limit 1000 per minute, fully used', ids: 1, limit: 1000 },
    ];
    for (const { state, ids, limit } of cases) {
      // Full use: the checks come at the limit's pace, a window's worth first to fill it.
      const at = (i: number) => (ids === 1 ? START + Math.floor((i * WINDOW) / limit) : START + i);
      for (const algorithm of ['sliding-window', 'precise-window'] as const) {
        const sha = (await client.script('LOAD', ALGORITHMS[algorithm].check.lua)) as string;
        await client.flushall();
        const argvAt = (i: number) =>
          scriptArgv({
            now: at(i),
            cost: 1,
            dryRun: false,
            blockFor: 0,
            countedAt: 0,
            actualCost: 0,
            tiers: [{ limit, window: WINDOW }],
            precision: 6_000,
          });
        if (ids === 1) for (let i = 0; i < limit; i++) await client.evalsha(sha, 1, 'rl:user', ...argvAt(i));
        const m = await measure(client, pid, CHECKS, 1, (i) =>
          client.evalsha(sha, 1, ids === 1 ? 'rl:user' : `rl:user:${i}`, ...argvAt(ids === 1 ? limit + i : i)),
        );
        lines.push(row(`${algorithm} | ${state}`, m, 1));
      }
      await client.flushall();
      const m = await measure(client, pid, CHECKS, 1, (i) =>
        client.evalsha(peerSha, 1, ids === 1 ? 'rl:user' : `rl:user:${i}`, WINDOW, 1e9, 'false', 'false'),
      );
      lines.push(row(`@fastify/rate-limit (INCR, PTTL) | ${state}`, m, 1));
    }
    lines.push('');
    client.disconnect();
  } finally {
    await redis.stop();
  }
}

async function main(): Promise<void> {
  const lines: string[] = [
    `Generated by \`npm run bench:scripts\` (bench/script-cost.ts) on ${new Date().toISOString()}, ${CHECKS.toLocaleString('en-US')} checks per row, ${IN_FLIGHT} calls in flight.`,
    '',
  ];
  await algorithms(lines);
  await batchForms(lines);
  process.stdout.write(`${lines.join('\n')}\n`);
}

void main();
