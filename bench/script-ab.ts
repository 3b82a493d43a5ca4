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
 * - SCRIPT_AB_THIS       `script` (default), or `function`: this tree's node batch runs as its
 *                        function (`FCALL`, its library loaded), and the other's as a script. With
 *                        SCRIPT_AB_BASE=src, what running the checks as functions saves.
 */
import { spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { resolve } from 'node:path';
import { Redis } from 'ioredis';
import type * as Algorithms from '../src/algorithms';
import type { FunctionLibrary } from '../src/algorithms/types';
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
const THIS_AS_FUNCTION = process.env.SCRIPT_AB_THIS === 'function';
const CALLS_PER_TURN = 50;
const TURNS_PER_ROUND = 40;

/** One source tree's node batch, as a script or a function, and its argument encoding. */
interface Tree {
  readonly name: string;
  readonly lua: string;
  readonly library: FunctionLibrary;
  /** The ARGV of a node batch on `keys`. */
  argv(keys: readonly string[]): string[];
}

/** How a tree's node batch is called: `EVALSHA` of its script, or `FCALL` of its function. */
interface Caller {
  /** The command, as `INFO commandstats` names it. */
  readonly command: 'evalsha' | 'fcall';
  call(keys: readonly string[]): Promise<unknown>;
}

function load(name: string, src: string): Tree {
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
  const { check, library } = ALGORITHMS[ALGORITHM];
  return { name, lua: check.nodeBatchLua, library, argv: (keys) => batchArgv(new Array(keys.length).fill(args), keys) };
}

/** Loads `tree`'s script, or with `asFunction` its library, on the server of `client`. */
async function callerOf(client: Redis, tree: Tree, asFunction: boolean): Promise<Caller> {
  if (asFunction) {
    await client.function('LOAD', 'REPLACE', tree.library.code);
    const name = tree.library.functions.nodeBatch;
    return { command: 'fcall', call: (keys) => client.fcall(name, 0, ...tree.argv(keys)) };
  }
  const sha = String(await client.script('LOAD', tree.lua));
  return { command: 'evalsha', call: (keys) => client.evalsha(sha, 0, ...tree.argv(keys)) };
}

/** Pins a process to one CPU, where the machine has two or more and `taskset`. */
function pin(pid: number, cpu: number): void {
  if (cpus().length > 1) spawnSync('taskset', ['-pc', String(cpu), String(pid)], { stdio: 'ignore' });
}

const usecOf = async (client: Redis, command: Caller['command']): Promise<number> =>
  Number(new RegExp(`^cmdstat_${command}:calls=\\d+,usec=(\\d+)`, 'm').exec(await client.info('commandstats'))?.[1] ?? 0);

async function main(): Promise<void> {
  if (BASE === undefined) throw new Error('SCRIPT_AB_BASE: the src/ directory of the tree to compare with');
  const server = await startRedis();
  const client = new Redis(server.url);
  try {
    pin(Number(/process_id:(\d+)/.exec(await client.info('server'))?.[1]), 1);
    pin(process.pid, 0);
    const trees = [load('other', BASE), load('this', resolve(__dirname, '..', 'src'))];
    const callers = [await callerOf(client, trees[0], false), await callerOf(client, trees[1], THIS_AS_FUNCTION)];
    let fresh = 0;
    const keysFor = (tree: number, turn: number, call: number): string[] =>
      Array.from({ length: KEYS }, (_, i) =>
        STORED > 0 ? `${tree}:${(((turn * CALLS_PER_TURN + call) * KEYS + i) * 7919) % STORED}` : `${tree}:fresh:${fresh++}`,
      );
    // Every stored identifier counted once in its current windows, by its own tree's script.
    for (let tree = 0; tree < trees.length; tree++) {
      for (let first = 0; first < STORED; first += KEYS) {
        const keys = Array.from({ length: Math.min(KEYS, STORED - first) }, (_, i) => `${tree}:${first + i}`);
        await callers[tree].call(keys);
      }
    }
    console.log(
      `${ALGORITHM}, ${KEYS} checks a call, ${STORED > 0 ? `${STORED} stored identifiers` : 'fresh identifiers'}, ${TIERS.length} tier(s), this tree's as a ${THIS_AS_FUNCTION ? 'function' : 'script'}`,
    );
    const ratios: number[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      const usec = [0, 0];
      for (let turn = 0; turn < TURNS_PER_ROUND; turn++) {
        for (const tree of turn % 2 === 0 ? [0, 1] : [1, 0]) {
          const { command, call } = callers[tree];
          const before = await usecOf(client, command);
          for (let i = 0; i < CALLS_PER_TURN; i++) await call(keysFor(tree, turn, i));
          usec[tree] += (await usecOf(client, command)) - before;
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
