import { checkReply, pushTier, settleReply } from '../protocol';
import { longestWindow } from '../tiers';
import { type Stored, setAtLeast } from './block';
import { checkLua, defineAlgorithm, settleLua } from './prelude';
import type { AlgorithmScripts, MemoryResult, ScriptArgs } from './types';

/**
 * Sliding log: exact. Every counted unit is one sorted-set member scored by its time;
 * a tier counts the members newer than `now - window`. Memory grows with the limit,
 * so it suits billing-grade accuracy or small limits.
 *
 * Storage: one sorted set per identifier shared by all tiers, trimmed to the longest
 * window on every counting check and expiring one longest window after the last one.
 * Members are `"time:sequence"` so requests in the same millisecond stay distinct; the
 * sequence lives in the same set as the member `#`, at a negative score that no
 * window range ever reaches.
 */

/** Timestamps of counted units, ascending (one entry per unit of cost); with a block. */
export type SlidingLogState = Stored<number[]>;

/** Members added per ZADD, well inside Lua's stack limit for `unpack`. */
const ZADD_BATCH = 500;

const LUA_ENTRIES = `
-- Adds units log entries at now, named 'time:sequence', the sequences following lastSequence; the
-- same ZADD scores the member '#' minus the last sequence used.
local function addEntries(key, now, units, lastSequence)
  local last = lastSequence + units
  local first = lastSequence + 1
  while first <= last do
    local args = {}
    local stop = math.min(last, first + ${ZADD_BATCH - 1})
    for sequence = first, stop do
      args[#args + 1] = now
      args[#args + 1] = string.format('%d:%d', now, sequence)
    end
    if stop == last then
      args[#args + 1] = -last
      args[#args + 1] = '#'
    end
    redis.call('ZADD', key, unpack(args))
    first = stop + 1
  end
end
-- The head of the log at key, from its first three members (the markers' scores are negative,
-- so they come first): the end of its block (the member '!', scored minus that moment; 0 for
-- none), its last sequence (the member '#', scored minus it; 0 for none), how many of the two
-- it holds, and the time of its oldest entry (nil for none).
local function headOf(key)
  local head = redis.call('ZRANGE', key, 0, 2, 'WITHSCORES')
  local blockedUntil, lastSequence, markers, oldestAt = 0, 0, 0, nil
  for i = 1, #head, 2 do
    local member, score = head[i], tonumber(head[i + 1])
    if member == '!' then
      blockedUntil, markers = -score, markers + 1
    elseif member == '#' then
      lastSequence, markers = -score, markers + 1
    elseif not oldestAt then
      oldestAt = score
    end
  end
  return blockedUntil, lastSequence, markers, oldestAt
end
-- The time of the oldest entry of the log (after its markers), or nil.
local function oldestOf(key, markers)
  local oldest = redis.call('ZRANGE', key, markers, markers, 'WITHSCORES')
  if oldest[2] then return tonumber(oldest[2]) end
  return nil
end
`;

const CHECK = checkLua(
  LUA_ENTRIES,
  `
  -- Stored at the key, a sorted set: one member 'time:sequence' scored by its time per counted
  -- unit, the member '#' scored minus the last sequence used, and, while blocked, the member '!'
  -- scored minus the end of the block; expires one longest window after the last counting check
  -- (or when a longer block ends).
  local blockedUntil, lastSequence, markers, oldestAt = headOf(key)
  local blocked = blockedUntil > now
  if blocked then dryRun = true end
  -- The oldest entry tells whether there is anything to trim, and which tiers hold every entry.
  if oldestAt and oldestAt <= now - longest and not dryRun then
    redis.call('ZREMRANGEBYSCORE', key, 0, now - longest)
    oldestAt = oldestOf(key, markers)
  end
  local function lower(window)
    if now - window < 0 then return 0 end
    return '(' .. (now - window)
  end
  -- A tier whose window holds the oldest entry holds them all: its count is the log's size.
  local function holdsAll(window)
    return oldestAt == nil or oldestAt > now - window
  end
  local size
  if oldestAt == nil then size = 0 end
  local counts = {}
  local allowed = 1
  for i = 1, tiers do
    if holdsAll(windows[i]) then
      if not size then size = redis.call('ZCARD', key) - markers end
      counts[i] = size
    else
      counts[i] = redis.call('ZCOUNT', key, lower(windows[i]), '+inf')
    end
    if counts[i] + cost > limits[i] then allowed = 0 end
  end
  if blocked then allowed = 0 end
  local counted = allowed == 1 and cost > 0 and not dryRun
  if counted then
    addEntries(key, now, cost, lastSequence)
    for i = 1, tiers do counts[i] = counts[i] + cost end
    if blockedUntil > 0 then redis.call('ZREM', key, '!') end
    redis.call('PEXPIRE', key, longest)
  end
  local blockedMs, startsBlock = 0, false
  if blocked then
    blockedMs = blockedUntil - now
  elseif allowed == 0 and blockFor > 0 and not dryRun then
    blockedMs, startsBlock = blockFor, true
  end
  -- How long until a request of \`units\` fits in tier i: until the oldest entries that must leave have left.
  local function waitFor(i, units)
    local excess = counts[i] + units - limits[i]
    if excess <= 0 then return 0 end
    if excess == 1 and holdsAll(windows[i]) then
      -- The first entry to leave is the oldest one, or this check's own.
      local first = oldestAt
      if counted and (first == nil or now < first) then first = now end
      if first then return first + windows[i] - now end
    end
    local oldest = redis.call('ZRANGEBYSCORE', key, lower(windows[i]), '+inf', 'WITHSCORES', 'LIMIT', excess - 1, 1)
    return tonumber(oldest[2]) + windows[i] - now
  end
  local reply = checkReply(allowed, now, blockedMs)
  for i = 1, tiers do
    local remaining = math.max(0, limits[i] - counts[i])
    local reset = 0
    if remaining < limits[i] then reset = waitFor(i, remaining + 1) end
    pushTier(reply, counts[i], 1, waitFor(i, cost), reset)
  end
  -- The block starts once the reply is read from the log: the marker '!', beside the entries,
  -- the key living at least blockFor; or, with blockResets, alone, the key living exactly blockFor.
  if startsBlock and blockResets then
    redis.call('DEL', key)
    redis.call('ZADD', key, -(now + blockFor), '!')
    redis.call('PEXPIRE', key, blockFor)
    countsWiped = true
  elseif startsBlock then
    redis.call('ZADD', key, -(now + blockFor), '!')
    local ttl = redis.call('PTTL', key)
    if ttl < blockFor then ttl = blockFor end
    redis.call('PEXPIRE', key, ttl)
  end
  return reply
`,
);

/** Index of the first entry of the ascending `log` greater than `value`. */
function firstAbove(log: readonly number[], value: number): number {
  let low = 0;
  let high = log.length;
  while (low < high) {
    const middle = (low + high) >>> 1;
    if (log[middle] > value) high = middle;
    else low = middle + 1;
  }
  return low;
}

function check(state: number[] | undefined, { now, cost, dryRun, tiers }: ScriptArgs): MemoryResult<number[]> {
  const longest = longestWindow(tiers);
  let log: readonly number[] = state ?? [];
  if (!dryRun) {
    const trimmed = firstAbove(log, now - longest);
    if (trimmed > 0) log = log.slice(trimmed);
  }
  const count = tiers.length;
  const counts = new Array<number>(count);
  let allowed: 0 | 1 = 1;
  for (let i = 0; i < count; i++) {
    counts[i] = log.length - firstAbove(log, now - tiers[i].window);
    if (counts[i] + cost > tiers[i].limit) allowed = 0;
  }
  const changed = log !== state;
  const counted = allowed === 1 && cost > 0 && !dryRun;
  if (counted) {
    const at = firstAbove(log, now);
    log = [...log.slice(0, at), ...new Array<number>(cost).fill(now), ...log.slice(at)];
    for (let i = 0; i < count; i++) counts[i] += cost;
  }
  // How long until a request of `units` fits in tier i: until the oldest entries that must leave have left.
  const waitFor = (i: number, units: number): number => {
    const excess = counts[i] + units - tiers[i].limit;
    return excess > 0 ? log[firstAbove(log, now - tiers[i].window) + excess - 1] + tiers[i].window - now : 0;
  };
  const reply = checkReply(allowed, now, 0);
  for (let i = 0; i < count; i++) {
    const remaining = Math.max(0, tiers[i].limit - counts[i]);
    pushTier(reply, counts[i], 1, waitFor(i, cost), remaining < tiers[i].limit ? waitFor(i, remaining + 1) : 0);
  }
  const next = log.length === 0 ? undefined : (log as number[]);
  // Like the script: counting sets the expiry, trimming alone keeps it.
  return { reply, state: changed || counted ? next : state, expiresAt: counted ? now + longest : undefined };
}

const SETTLE = settleLua(
  LUA_ENTRIES,
  `
-- Settles a check that counted cost units at countedAt to actualCost. Less: removes the
-- difference from the log entries scored countedAt (entries of one millisecond differ only by
-- name, so removing any of them leaves the same counts and waits). More: trims the log like a
-- counting check and adds the difference at now, past the limit if need be; the key lives at least
-- one longest window.
local givenBack, charged = 0, 0
if actualCost < cost then
  local entries = redis.call('ZRANGEBYSCORE', key, countedAt, countedAt, 'LIMIT', 0, cost - actualCost)
  if #entries > 0 and not dryRun then redis.call('ZREM', key, unpack(entries)) end
  givenBack = #entries
elseif actualCost > cost then
  charged = actualCost - cost
  if not dryRun then
    local blockedUntil, lastSequence = headOf(key)
    redis.call('ZREMRANGEBYSCORE', key, 0, now - longest)
    addEntries(key, now, charged, lastSequence)
    if blockedUntil > 0 and blockedUntil <= now then redis.call('ZREM', key, '!') end
    local ttl = redis.call('PTTL', key)
    if ttl < longest then ttl = longest end
    redis.call('PEXPIRE', key, ttl)
  end
end
return settleReply(givenBack, charged)
`,
);

function settle(state: number[] | undefined, { now, cost, dryRun, countedAt, actualCost, tiers }: ScriptArgs): MemoryResult<number[]> {
  if (actualCost < cost) {
    if (state === undefined) return { reply: settleReply(0, 0), state, expiresAt: undefined };
    const from = firstAbove(state, countedAt - 1);
    let givenBack = 0;
    while (givenBack < cost - actualCost && from + givenBack < state.length && state[from + givenBack] === countedAt) givenBack++;
    if (givenBack === 0 || dryRun) return { reply: settleReply(givenBack, 0), state, expiresAt: undefined };
    const next = [...state.slice(0, from), ...state.slice(from + givenBack)];
    return { reply: settleReply(givenBack, 0), state: next.length === 0 ? undefined : next, expiresAt: undefined };
  }
  const charged = actualCost - cost;
  if (charged === 0 || dryRun) return { reply: settleReply(0, charged), state, expiresAt: undefined };
  const longest = longestWindow(tiers);
  const log = state === undefined ? [] : state.slice(firstAbove(state, now - longest));
  const at = firstAbove(log, now);
  const next = [...log.slice(0, at), ...new Array<number>(charged).fill(now), ...log.slice(at)];
  return setAtLeast(next, now + longest, settleReply(0, charged));
}

export const slidingLog: AlgorithmScripts<SlidingLogState> = defineAlgorithm(
  'sliding-log',
  { check: CHECK, settle: SETTLE },
  { check, settle },
);
