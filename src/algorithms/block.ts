/**
 * `blockFor`, the penalty every algorithm shares: once an identifier is denied, it is refused
 * until `blockedUntil`, whatever its counts say. The block lives in the identifier's own key,
 * written by the script that denied, so every instance sees it and a check stays one key.
 *
 * The Lua half is {@link LUA_BLOCK}, part of every script's prelude (string keys lead with a
 * marker, `'!<until> <counters>'`; the sliding log keeps a member `'!'` instead, in its own
 * script); the TypeScript half wraps an algorithm's twin, under the same rules:
 * - while blocked, nothing is counted or trimmed, and the answer is a denial;
 * - a denial that counts nothing, when `blockFor > 0` and it is not a dry run, starts a block
 *   and makes the key live at least that long;
 * - a counting write (a check that counts, a settlement that charges) drops an expired marker;
 *   other writes keep it;
 * - a settlement never starts or lifts a block;
 * - with `blockResets` (`afterBlock: 'reset'`), the denial that starts a block also wipes the
 *   identifier's counts: the key holds the marker alone and lives exactly `blockFor`, so the
 *   identifier starts afresh when the block ends; that denial answers as an identifier with nothing
 *   counted (`withNothingCounted`), so its wait is the block's, and no more. Without it the counts
 *   stay: once the block ends, they decide again.
 */
import { REPLY, SETTLE_REPLY, type TierLayout, withNothingCounted } from '../protocol';
import type { MemoryResult, RawReply, ScriptArgs } from './types';

/** The block marker of string keys, in Lua: read it, write it, and start a block after a denial. */
export const LUA_BLOCK = `
-- A string key may lead with a block marker: '!<until, base 36> <counters>'.
local function readBlocked(value)
  if value and string.byte(value, 1) == 33 then
    local untilText, rest = string.match(value, '^!([0-9a-z]+) ?(.*)$')
    return tonumber(untilText, 36), rest
  end
  return 0, value
end
local function withMarker(blockedUntil, body)
  if blockedUntil == 0 then return body end
  if body == nil or body == '' then return '!' .. base36(blockedUntil) end
  return '!' .. base36(blockedUntil) .. ' ' .. body
end
-- The marker a counting write keeps: an expired block is dropped.
local function liveBlock(blockedUntil, now)
  if blockedUntil > now then return blockedUntil end
  return 0
end
-- Writes value to a string key that must live at least atLeast ms more (a longer expiry is kept):
-- a block, or a settlement's charge.
local function setAtLeast(key, value, atLeast)
  local ttl = ttlOf(key)
  if ttl < atLeast then ttl = atLeast end
  writeValue(key, value, ttl)
end
-- Starts a block of blockFor ms at now on a string key, keeping its counters; the key lives at least that long.
local function writeBlock(key, now, blockFor, body)
  setAtLeast(key, withMarker(now + blockFor, body), blockFor)
end
-- Set by a check that started a block wiping the identifier's counts (blockResets): the frame of
-- checkLua (prelude.ts) then answers with nothing counted. Cleared before every check.
local countsWiped = false
-- After a denied check on a string key (a blocked identifier's included): ms left on its block,
-- either what remains of the block it is under, or a new block of blockFor ms, started by this
-- denial (not a dry run): on the counters of body, or, with blockResets, on none (the key lives
-- exactly blockFor). An allowed check has no block: callers call this for denied checks only.
local function blockAfterDenial(key, now, blockedUntil, blockFor, dryRun, body, blockResets)
  if blockedUntil > now then return blockedUntil - now end
  if blockFor > 0 and not dryRun then
    if blockResets then
      writeValue(key, withMarker(now + blockFor, nil), blockFor)
      countsWiped = true
    else
      writeBlock(key, now, blockFor, body)
    end
    return blockFor
  end
  return 0
end
`;

/**
 * The twin of the Lua `setAtLeast`, for a settlement's charge: `next` is the state, and it lives
 * at least until `livesUntil` (epoch ms; the Lua takes ms from now), a later expiry of the key kept
 * (a key that holds a block marker alone included).
 */
export function setAtLeast<Body>(next: Body, livesUntil: number, reply: RawReply): MemoryResult<Body> {
  return { reply, state: next, expiresAt: undefined, minExpiresAt: livesUntil };
}

/** An identifier's stored state: the algorithm's own (`body`), and the end of a block (0 for none). */
export interface Stored<Body> {
  readonly blockedUntil: number;
  readonly body: Body | undefined;
}

/** The stored state holding `body` and a block until `blockedUntil` (0: none); `stored` itself when nothing changed. */
function storedWithBlock<Body>(stored: Stored<Body> | undefined, blockedUntil: number, body: Body | undefined): Stored<Body> | undefined {
  if (stored !== undefined && stored.blockedUntil === blockedUntil && stored.body === body) return stored;
  return body === undefined && blockedUntil === 0 ? undefined : { blockedUntil, body };
}

/** The twin of a check script with blocks. */
export function blockingCheck<Body>(
  check: (body: Body | undefined, args: ScriptArgs) => MemoryResult<Body>,
  layout: TierLayout,
): (stored: Stored<Body> | undefined, args: ScriptArgs) => MemoryResult<Stored<Body>> {
  return (stored, args) => {
    const { now, cost, dryRun, blockFor } = args;
    const until = stored?.blockedUntil ?? 0;
    if (until > now) {
      const result = check(stored?.body, { ...args, dryRun: true });
      const reply = [...result.reply];
      reply[REPLY.allowed] = 0;
      reply[REPLY.blockedMs] = until - now;
      return { reply, state: stored, expiresAt: undefined };
    }
    const result = check(stored?.body, args);
    if (result.reply[REPLY.allowed] === 1 && cost > 0 && !dryRun) {
      return { reply: result.reply, state: storedWithBlock(stored, 0, result.state), expiresAt: result.expiresAt };
    }
    if (result.reply[REPLY.allowed] === 0 && blockFor > 0 && !dryRun) {
      const reply = args.blockResets === true ? withNothingCounted(result.reply, layout) : [...result.reply];
      reply[REPLY.blockedMs] = blockFor;
      if (args.blockResets === true) return { reply, state: { blockedUntil: now + blockFor, body: undefined }, expiresAt: now + blockFor };
      return {
        reply,
        state: storedWithBlock(stored, now + blockFor, result.state),
        expiresAt: result.expiresAt,
        minExpiresAt: now + blockFor,
      };
    }
    return { reply: result.reply, state: storedWithBlock(stored, until, result.state), expiresAt: result.expiresAt };
  };
}

/**
 * The twin of a settle script with blocks: a settlement changes counts only, never starts or
 * lifts a block. Giving back keeps the marker as it is; a charge is a counting write, which drops
 * an expired marker.
 */
export function blockingSettle<Body>(
  settle: (body: Body | undefined, args: ScriptArgs) => MemoryResult<Body>,
): (stored: Stored<Body> | undefined, args: ScriptArgs) => MemoryResult<Stored<Body>> {
  return (stored, args) => {
    const result = settle(stored?.body, args);
    const until = stored?.blockedUntil ?? 0;
    const charged = result.reply[SETTLE_REPLY.charged] > 0 && !args.dryRun;
    const blockedUntil = charged && until <= args.now ? 0 : until;
    return { ...result, state: storedWithBlock(stored, blockedUntil, result.state) };
  };
}
