/**
 * The Lua every script shares, put together: the protocol's argument decoding and reply
 * building (`protocol.ts`), the shared helpers (`shared.ts`) and the block marker (`block.ts`);
 * and the builders that wrap an algorithm's Lua into its check, batch and settle scripts.
 */
import { LUA_ARGS, LUA_BATCH, LUA_NODE_BATCH, LUA_NODE_BATCH_FLAGS, LUA_PROTOCOL } from '../protocol';
import { LUA_BLOCK } from './block';
import { LUA_LEASE_CHECK } from './lease';
import { LUA_SHARED } from './shared';

/** The Lua at the top of every script. */
const LUA_PRELUDE = `${LUA_PROTOCOL}${LUA_SHARED}${LUA_BLOCK}`;

/**
 * The check scripts of an algorithm, from its Lua `helpers` (functions of their arguments
 * only) and its check `body` (Lua that reads `key` and the locals of `LUA_ARGS`, and returns
 * the reply): `lua` checks `KEYS[1]` with ARGV; `batchLua` checks every key of `KEYS` in one
 * call, with the batch encoding of `protocol.ts`; `nodeBatchLua` checks keys of several Cluster
 * slots on one node (the node batch of `protocol.ts`); `leaseLua` checks `KEYS[1]` and takes a
 * lease in the lease key `KEYS[2]` (see `lease.ts`).
 */
export function checkLua(helpers: string, body: string): { lua: string; batchLua: string; nodeBatchLua: string; leaseLua: string } {
  const check = `${LUA_PRELUDE}${helpers}
local function check(key, argv)
  ${LUA_ARGS}
${body}
end
`;
  return {
    lua: `${check}return check(KEYS[1], ARGV)\n`,
    batchLua: `${check}${LUA_BATCH}`,
    nodeBatchLua: `${LUA_NODE_BATCH_FLAGS}${check}${LUA_NODE_BATCH}`,
    leaseLua: `${check}${LUA_LEASE_CHECK}`,
  };
}

/** A settle script: the prelude, the algorithm's `helpers`, and a `body` reading `key` and the locals of `LUA_ARGS`. */
export function settleLua(helpers: string, body: string): string {
  return `${LUA_PRELUDE}${helpers}
local argv, key = ARGV, KEYS[1]
${LUA_ARGS}
${body}`;
}
