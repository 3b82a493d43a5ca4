import { checkReply, type TierLayout } from '../protocol';
import { longestWindow } from '../tiers';
import type { Stored } from './block';
import { counterSettle, counterSettleLua } from './counter-settle';
import { checkLua, defineAlgorithm } from './prelude';
import { luaScratch, remainingOf, sameWindows } from './shared';
import type { AlgorithmScripts, MemoryResult, ScriptArgs } from './types';

/**
 * Sliding window counter.
 *
 * Per tier, the count of the current fixed window (`current`) and of the one before
 * (`previous`); with `elapsed = now mod window` the estimate is
 * `current + previous * (window - elapsed) / window`. A request of cost `c` is allowed
 * iff `estimate + c <= limit`, and a denied request counts nothing. Every comparison
 * is done multiplied by `window`, in integers, so Lua and TypeScript agree exactly.
 *
 * Storage: one string key per identifier, all tiers packed as
 * `"index:current:previous"` in base 36, separated by spaces (index = floor(now / window)).
 * A write that starts a window of any tier makes the key expire after twice the longest window,
 * so the previous window stays readable; later writes in the same windows keep that expiry
 * (`sameWindows` of shared.ts).
 * One key per identifier is also what keeps it Redis Cluster safe.
 */

/** Per tier: [windowIndex, current, previous], flattened; with a block. */
export type SlidingWindowState = Stored<number[]>;

const LUA_COUNTS = `
-- A tier's counts at window index: 'current' and 'previous', from what the key saved (a later or
-- older saved index counts as nothing).
local function countsAt(saved, i, index)
  local savedIndex = saved[3 * i - 2]
  if savedIndex == index then return saved[3 * i - 1], saved[3 * i] end
  if savedIndex == index - 1 then return 0, saved[3 * i - 1] end
  return 0, 0
end
`;

/** The twin of `countsAt` (tiers counted from 0, as the state array is). */
function countsAt(state: readonly number[] | undefined, i: number, index: number): [number, number] {
  if (state === undefined) return [0, 0];
  const savedIndex = state[3 * i];
  if (savedIndex === index) return [state[3 * i + 1], state[3 * i + 2]];
  if (savedIndex === index - 1) return [0, state[3 * i + 1]];
  return [0, 0];
}

/**
 * Milliseconds until a request of `cost` fits, assuming nothing else is counted:
 * first inside the current window (the previous window's weight decays), else in the
 * next one (current becomes previous), else in the one after (both are empty).
 */
function waitFor(current: number, previous: number, elapsed: number, limit: number, window: number, cost: number): number {
  if ((current + cost) * window + previous * (window - elapsed) <= limit * window) return 0;
  let room = limit - cost - current;
  if (room >= 0 && previous > 0) {
    let at = window - Math.floor((room * window) / previous);
    if (previous * (window - at) > room * window) at += 1;
    if (at < window) return at - elapsed;
  }
  room = limit - cost;
  if (current <= room) return window - elapsed;
  let at = window - Math.floor((room * window) / current);
  if (current * (window - at) > room * window) at += 1;
  if (at < window) return window - elapsed + at;
  return 2 * window - elapsed;
}

/**
 * The check's reply carries each tier's counts, `current` (this request's cost included when it
 * was counted) and `previous`; the figures follow from them here, so Redis computes no waits.
 */
const COUNTS_LAYOUT: TierLayout = {
  size: 2,
  counts: [0, 1],
  figures(reply, at, { limit, window }, now, cost) {
    const current = Number(reply[at]);
    const previous = Number(reply[at + 1]);
    const elapsed = now - Math.floor(now / window) * window;
    const numerator = current * window + previous * (window - elapsed);
    const remaining = remainingOf(numerator, window, limit);
    return {
      numerator,
      denominator: window,
      waitMs: waitFor(current, previous, elapsed, limit, window, cost),
      resetMs: remaining < limit ? waitFor(current, previous, elapsed, limit, window, remaining + 1) : 0,
    };
  },
};

const CHECK = checkLua(
  `${LUA_COUNTS}${luaScratch('currentOf', 'previousOf')}`,
  `
  -- Stored at the key, a string: per tier 'index:current:previous' in base 36, tiers separated by
  -- spaces, index = floor(now / window), after an optional block marker '!<until>'; expires twice
  -- the longest window after the write that started the tiers' current windows (or when a longer
  -- block ends).
  local blockedUntil, body = readBlocked(readValue(key))
  local blocked = blockedUntil > now
  if blocked then dryRun = true end
  local saved = readCounters(body)
  local current, previous = currentOf, previousOf
  local allowed = 1
  -- Whether each tier was last counted in its current window: with the same tiers stored, the write
  -- keeps the key's expiry (see sameWindows in shared.ts).
  local same = true
  for i = 1, tiers do
    local window = windows[i]
    local index = math.floor(now / window)
    local c, p = countsAt(saved, i, index)
    current[i], previous[i] = c, p
    if saved[3 * i - 2] ~= index then same = false end
    if (c + cost) * window + p * (window - (now - index * window)) > limits[i] * window then allowed = 0 end
  end
  if blocked then allowed = 0 end
  if allowed == 1 and cost > 0 and not dryRun then
    local value
    for i = 1, tiers do
      current[i] = current[i] + cost
      value = withTier(value, base36(math.floor(now / windows[i])) .. ':' .. base36(current[i]) .. ':' .. base36(previous[i]))
    end
    if same and saved[3 * tiers + 1] == nil then writeValue(key, value) else writeValue(key, value, 2 * longest) end
  end
  local blockedMs = 0
  if allowed == 0 then blockedMs = blockAfterDenial(key, now, blockedUntil, blockFor, dryRun, body, blockResets) end
  local reply = checkReply(allowed, now, blockedMs)
  for i = 1, tiers do
    local at = #reply
    reply[at + 1] = current[i]
    reply[at + 2] = previous[i]
  end
  return reply
`,
  COUNTS_LAYOUT,
);

function check(state: number[] | undefined, { now, cost, dryRun, tiers }: ScriptArgs): MemoryResult<number[]> {
  const count = tiers.length;
  const current = new Array<number>(count);
  const previous = new Array<number>(count);
  let allowed: 0 | 1 = 1;
  for (let i = 0; i < count; i++) {
    const { limit, window } = tiers[i];
    const index = Math.floor(now / window);
    const [c, p] = countsAt(state, i, index);
    current[i] = c;
    previous[i] = p;
    if ((c + cost) * window + p * (window - (now - index * window)) > limit * window) allowed = 0;
  }
  let next = state;
  let expiresAt: number | undefined;
  if (allowed === 1 && cost > 0 && !dryRun) {
    next = new Array<number>(3 * count);
    for (let i = 0; i < count; i++) {
      current[i] += cost;
      next[3 * i] = Math.floor(now / tiers[i].window);
      next[3 * i + 1] = current[i];
      next[3 * i + 2] = previous[i];
    }
    expiresAt = sameWindows(state, next, 3) ? undefined : now + 2 * longestWindow(tiers);
  }
  const reply = checkReply(allowed, now, 0);
  for (let i = 0; i < count; i++) reply.push(current[i], previous[i]);
  return { reply, state: next, expiresAt };
}

const SETTLE = counterSettleLua(
  LUA_COUNTS,
  `
-- Settles a check that counted cost units at countedAt to actualCost. Less: gives the difference
-- back from 'current' while the tier's window has not rolled since, from 'previous' after it rolled
-- once, from nothing after that, never below 0. More: charges the difference now, past the limit if
-- need be, and the key lives at least as long as a counting check makes it.
local readState = readCounters
local function giveBack(saved, units)
  local givenBack = 0
  for i = 1, tiers do
    local savedIndex = saved[3 * i - 2]
    if savedIndex then
      local index = math.floor(countedAt / windows[i])
      local slot = 0
      if savedIndex == index then slot = 3 * i - 1 elseif savedIndex == index + 1 then slot = 3 * i end
      if slot > 0 then
        local back = math.min(units, saved[slot])
        saved[slot] = saved[slot] - back
        givenBack = givenBack + back
      end
    end
  end
  return givenBack
end
local function encodeState(saved)
  local value
  for i = 1, #saved / 3 do value = withTier(value, base36(saved[3 * i - 2]) .. ':' .. base36(saved[3 * i - 1]) .. ':' .. base36(saved[3 * i])) end
  return value
end
local function charge(saved, charged)
  local value
  for i = 1, tiers do
    local index = math.floor(now / windows[i])
    local c, p = countsAt(saved, i, index)
    value = withTier(value, base36(index) .. ':' .. base36(c + charged) .. ':' .. base36(p))
  end
  return value, 2 * longest
end
`,
);

const settle = counterSettle<number[]>({
  giveBack(state, units, { countedAt, tiers }) {
    const next = [...state];
    let givenBack = 0;
    for (let i = 0; i < tiers.length && 3 * i < next.length; i++) {
      const index = Math.floor(countedAt / tiers[i].window);
      const slot = next[3 * i] === index ? 3 * i + 1 : next[3 * i] === index + 1 ? 3 * i + 2 : -1;
      if (slot < 0) continue;
      const back = Math.min(units, next[slot]);
      next[slot] -= back;
      givenBack += back;
    }
    return { givenBack, next };
  },
  charge(state, charged, { now, tiers }) {
    const next = new Array<number>(3 * tiers.length);
    for (let i = 0; i < tiers.length; i++) {
      const index = Math.floor(now / tiers[i].window);
      const [c, p] = countsAt(state, i, index);
      next[3 * i] = index;
      next[3 * i + 1] = c + charged;
      next[3 * i + 2] = p;
    }
    // Like the script's PX: at least a counting check's expiry, longer when the key already lives longer.
    return { next, livesUntil: now + 2 * longestWindow(tiers) };
  },
});

export const slidingWindow: AlgorithmScripts<SlidingWindowState> = defineAlgorithm(
  'sliding-window',
  { check: CHECK, settle: SETTLE },
  { check, settle },
);
