/**
 * `npm run bench:scripts:ab`: one algorithm's node batch script from another source tree against
 * this tree's, timed inside Redis (`INFO commandstats`) on a redis-server of its own. The two
 * alternate every 50 calls, 40 times a round, so that a slow spell of the machine falls on both
 * alike: on a shared VM, scripts measured one after the other in long blocks moved by ±30 % between
 * rounds (bench/NOTES.md). The figure is this tree's time per call ÷ the other's: the median of the
 * rounds' ratios, with their range.
 *
 * Each tree encodes its own arguments (its `protocol.ts`) and keeps its own identifiers, stored by
 * its own script before the rounds, so trees whose storage or protocol differ compare fairly.
 *
 * Environment:
 * - SCRIPT_AB_BASE       the other tree's `src/` directory (required), e.g. made with
 *                        `mkdir /tmp/base && git archive <commit> src | tar -x -C /tmp/base --strip-components=1`
 * - SCRIPT_AB_ALGORITHM  default `sliding-window`
 * - SCRIPT_AB_KEYS       checks per call (default 10)
 * - SCRIPT_AB_STORED     identifiers cycled through, each stored in its current windows before the
 *                        rounds (default 30000); 0: a fresh identifier for every check
 * - SCRIPT_AB_TIERS      1 (one hour) or 2 (and one day), limits out of reach (default 1)
 * - SCRIPT_AB_ROUNDS     default 7
 */
import { spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { resolve } from 'node:path';
import { Redis } from 'ioredis';
import type * as Algorithms from '../src/algorithms';
import type * as Protocol from '../src/protocol';
import { startRedis } from '../support/redis-server';

const BASE = process.env.SCRIPT_AB_BASE;
const ALGORITHM = (process.env.SCRIPT_AB_ALGORITHM ?? 'sliding-window') as Algorithms.AlgorithmName;
const KEYS = Number(process.env.SCRIPT_AB_KEYS ?? 10);
const STORED = Number(process.env.SCRIPT_AB_STORED ?? 30_000);
const TIERS = [
  { limit: 1e9, window: 3_600_000 },
  { limit: 1e9, window: 86_400_000 },
].slice(0, Number(process.env.SCRIPT_AB_TIERS ?? 1));
const ROUNDS = Number(process.env.SCRIPT_AB_ROUNDS ?? 7);
const CALLS_PER_TURN = 50;
const TURNS_PER_ROUND = 40;

/** One source tree's script and argument encoding. */
interface Tree {
  readonly name: string;
  readonly lua: string;
  readonly sha: string;
  /** The ARGV of a node batch on `keys`. */
  argv(keys: readonly string[]): string[];
}

function load(name: string, src: string): Omit<Tree, 'sha'> {
  const { ALGORITHMS } = require(resolve(src, 'algorithms')) as typeof Algorithms;
  const { batchArgv, scriptArgv } = require(resolve(src, 'protocol')) as typeof Protocol;
  const args = scriptArgv({
    now: undefined,
    cost: 1,
    dryRun: false,
    blockFor: 0,
    countedAt: 0,
    actualCost: 0,
    tiers: TIERS,
    precision: 10,
  });
  return { name, lua: ALGORITHMS[ALGORITHM].check.nodeBatchLua, argv: (keys) => batchArgv(new Array(keys.length).fill(args), keys) };
}

/** Pins a process to one CPU, where the machine has two or more and `taskset`. */
function pin(pid: number, cpu: number): void {
  if (cpus().length > 1) spawnSync('taskset', ['-pc', String(cpu), String(pid)], { stdio: 'ignore' });
}

const scriptUsec = async (client: Redis): Promise<number> =>
  Number(/^cmdstat_evalsha:calls=\d+,usec=(\d+)/m.exec(await client.info('commandstats'))?.[1] ?? 0);

async function main(): Promise<void> {
  if (BASE === undefined) throw new Error('SCRIPT_AB_BASE: the src/ directory of the tree to compare with');
  const server = await startRedis();
  const client = new Redis(server.url);
  try {
    pin(Number(/process_id:(\d+)/.exec(await client.info('server'))?.[1]), 1);
    pin(process.pid, 0);
    const trees: Tree[] = [];
    for (const tree of [load('other', BASE), load('this', resolve(__dirname, '..', 'src'))]) {
      trees.push({ ...tree, sha: String(await client.script('LOAD', tree.lua)) });
    }
    let fresh = 0;
    const keysFor = (tree: number, turn: number, call: number): string[] =>
      Array.from({ length: KEYS }, (_, i) =>
        STORED > 0 ? `${tree}:${(((turn * CALLS_PER_TURN + call) * KEYS + i) * 7919) % STORED}` : `${tree}:fresh:${fresh++}`,
      );
    // Every stored identifier counted once in its current windows, by its own tree's script.
    for (let tree = 0; tree < trees.length; tree++) {
      for (let first = 0; first < STORED; first += KEYS) {
        const keys = Array.from({ length: Math.min(KEYS, STORED - first) }, (_, i) => `${tree}:${first + i}`);
        await client.evalsha(trees[tree].sha, 0, ...trees[tree].argv(keys));
      }
    }
    console.log(
      `${ALGORITHM}, ${KEYS} checks a call, ${STORED > 0 ? `${STORED} stored identifiers` : 'fresh identifiers'}, ${TIERS.length} tier(s)`,
    );
    const ratios: number[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      const usec = [0, 0];
      for (let turn = 0; turn < TURNS_PER_ROUND; turn++) {
        for (const tree of turn % 2 === 0 ? [0, 1] : [1, 0]) {
          const before = await scriptUsec(client);
          for (let call = 0; call < CALLS_PER_TURN; call++) {
            await client.evalsha(trees[tree].sha, 0, ...trees[tree].argv(keysFor(tree, turn, call)));
          }
          usec[tree] += (await scriptUsec(client)) - before;
        }
      }
      const calls = TURNS_PER_ROUND * CALLS_PER_TURN;
      ratios.push(usec[1] / usec[0]);
      console.log(
        `round ${round}: other ${(usec[0] / calls).toFixed(1)} µs per call, this ${(usec[1] / calls).toFixed(1)}, ratio ${(usec[1] / usec[0]).toFixed(3)}`,
      );
    }
    ratios.sort((a, b) => a - b);
    const median = ratios[Math.floor(ratios.length / 2)];
    console.log(`this ÷ other: ${median.toFixed(3)} (${ratios[0].toFixed(3)} to ${ratios[ratios.length - 1].toFixed(3)})`);
  } finally {
    client.disconnect();
    await server.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
