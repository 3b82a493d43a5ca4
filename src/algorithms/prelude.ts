/**
 * The Lua every script shares, put together: the protocol's argument decoding and reply
 * building (`protocol.ts`), the shared helpers (`shared.ts`) and the block marker (`block.ts`);
 * and the builders that wrap an algorithm's Lua into its check, batch and settle scripts.
 */
import { createHash } from 'node:crypto';
import {
  FIGURES_LAYOUT,
  LUA_ARGS,
  LUA_BATCH,
  LUA_NODE_BATCH,
  LUA_NODE_BATCH_FLAGS,
  LUA_PROTOCOL,
  luaNothingCounted,
  type TierLayout,
} from '../protocol';
import { blockingCheck, blockingSettle, LUA_BLOCK, type Stored } from './block';
import { checkWithLease, LUA_LEASE_CHECK, LUA_LEASES } from './lease';
import { LUA_SHARED } from './shared';
import type { AlgorithmName, AlgorithmScripts, FunctionLibrary, MemoryResult, ScriptArgs } from './types';

/** The Lua at the top of every script. */
const LUA_PRELUDE = `${LUA_PROTOCOL}${LUA_SHARED}${LUA_BLOCK}`;

/** The check scripts of an algorithm, as {@link checkLua} builds them. */
interface CheckLua {
  readonly lua: string;
  readonly batchLua: string;
  readonly nodeBatchLua: string;
  readonly leaseLua: string;
  /** The Lua before the scripts' last lines: the prelude, the helpers and `check(key, argv)`. */
  readonly definitions: string;
  /** How the reply carries each tier. */
  readonly layout: TierLayout;
}

/**
 * The check scripts of an algorithm, from its Lua `helpers` (functions of their arguments only,
 * and the tables of `luaScratch` in shared.ts) and its check `body` (Lua that reads `key` and the
 * locals of `LUA_ARGS`, and returns the reply; a body that wipes the counts for a block sets
 * `countsWiped`, as `blockAfterDenial` of block.ts does, and its reply then reads as nothing
 * counted): `lua` checks `KEYS[1]` with ARGV; `batchLua` checks every key of `KEYS` in one call,
 * with the batch encoding of `protocol.ts`; `nodeBatchLua` checks keys of several Cluster slots on
 * one node (the node batch of `protocol.ts`); `leaseLua` checks `KEYS[1]` and takes a lease in the
 * lease key `KEYS[2]` (see `lease.ts`). The body's reply carries each tier as `layout` says: the
 * four figures of `TIER_REPLY` unless the algorithm gives another layout.
 */
export function checkLua(helpers: string, body: string, layout: TierLayout = FIGURES_LAYOUT): CheckLua {
  const check = `${LUA_PRELUDE}${helpers}
${luaNothingCounted(layout)}
local function checkBody(key, argv)
  ${LUA_ARGS}
${body}
end
-- A check whose block wiped the identifier's counts (block.ts) answers as the identifier it left.
local function check(key, argv)
  countsWiped = false
  local reply = checkBody(key, argv)
  if countsWiped then nothingCounted(reply) end
  return reply
end
`;
  return {
    lua: `${check}${LUA_CHECK}`,
    batchLua: `${check}${LUA_BATCH}`,
    nodeBatchLua: `${LUA_NODE_BATCH_FLAGS}${check}${LUA_NODE_BATCH}`,
    leaseLua: `${check}${LUA_LEASES}${LUA_LEASE_CHECK}`,
    definitions: check,
    layout,
  };
}

/** The last line of a check script on one key. */
const LUA_CHECK = 'return check(KEYS[1], ARGV)\n';

/**
 * An algorithm's scripts (check, batch, node batch, lease check, settle) as one Redis function
 * library (Redis 7): what the scripts define before their last lines runs once, when the library
 * is loaded, rather than at every call, which takes about a third off a check's time in Redis
 * (bench/NOTES.md). Each function is a script's last lines, with `KEYS` and `ARGV` as its
 * arguments; it starts by forgetting what the call before left in the library's top-level values.
 * The library is named after its code, so a server can hold the libraries of several versions of
 * this package side by side.
 */
function functionLibrary(algorithm: AlgorithmName, check: CheckLua, settle: SettleLua): FunctionLibrary {
  const definitions = `${check.definitions}${LUA_LEASES}${settle.helpers}`;
  const lastLines = {
    check: LUA_CHECK,
    batch: LUA_BATCH,
    nodeBatch: LUA_NODE_BATCH,
    leaseCheck: LUA_LEASE_CHECK,
    settle: settle.lastLines,
  };
  const hash = createHash('sha1').update(definitions).update(Object.values(lastLines).join('\n')).digest('hex');
  const name = `ratewarden_${algorithm.replaceAll('-', '_')}_${hash.slice(0, 16)}`;
  const functions = {
    check: `${name}_check`,
    batch: `${name}_batch`,
    nodeBatch: `${name}_node_batch`,
    leaseCheck: `${name}_lease_check`,
    settle: `${name}_settle`,
  };
  const register = (part: keyof typeof functions, flags = '') =>
    `redis.register_function{function_name = '${functions[part]}', flags = {${flags}}, callback = function(KEYS, ARGV)
forgetArgs()
forgetWrites()
${lastLines[part]}end}
`;
  const registered = [
    register('check'),
    register('batch'),
    register('nodeBatch', "'allow-cross-slot-keys'"),
    register('leaseCheck'),
    register('settle'),
  ];
  return { name, code: `#!lua name=${name}\n${definitions}\n${registered.join('')}`, functions };
}

/** A settle script, as {@link settleLua} builds it. */
export interface SettleLua {
  readonly lua: string;
  /** The algorithm's helpers, defined before the script's last lines. */
  readonly helpers: string;
  readonly lastLines: string;
}

/** A settle script: the prelude, the algorithm's `helpers`, and a `body` reading `key` and the locals of `LUA_ARGS`. */
export function settleLua(helpers: string, body: string): SettleLua {
  const lastLines = `local argv, key = ARGV, KEYS[1]
${LUA_ARGS}
${body}`;
  return { lua: `${LUA_PRELUDE}${helpers}\n${lastLines}`, helpers, lastLines };
}

/** The TypeScript twin of an algorithm's check or settle body, on its own state (blocks aside). */
type Twin<Body> = (body: Body | undefined, args: ScriptArgs) => MemoryResult<Body>;

/**
 * An algorithm's scripts, from its Lua (built by {@link checkLua} and {@link settleLua}) and the
 * twins of its check and settle bodies, wrapped as every algorithm's are: with blocks (`block.ts`)
 * and, for the check, with the lease of a limiter with `concurrency` (`lease.ts`).
 */
export function defineAlgorithm<Body>(
  algorithm: AlgorithmName,
  lua: { readonly check: CheckLua; readonly settle: SettleLua },
  twins: { readonly check: Twin<Body>; readonly settle: Twin<Body> },
): AlgorithmScripts<Stored<Body>> {
  const { layout } = lua.check;
  const check = blockingCheck(twins.check, layout);
  return {
    algorithm,
    tierLayout: layout,
    check: { lua: lua.check.lua, batchLua: lua.check.batchLua, nodeBatchLua: lua.check.nodeBatchLua, apply: check },
    leaseCheck: { lua: lua.check.leaseLua, apply: checkWithLease(check) },
    settle: { lua: lua.settle.lua, apply: blockingSettle(twins.settle) },
    library: functionLibrary(algorithm, lua.check, lua.settle),
  };
}
