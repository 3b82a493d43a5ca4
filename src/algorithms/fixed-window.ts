import { checkReply, pushTier } from '../protocol';
import type { Stored } from './block';
import { counterSettle, counterSettleLua } from './counter-settle';
import { checkLua, defineAlgorithm } from './prelude';
import { luaScratch, sameWindows } from './shared';
import type { AlgorithmScripts, MemoryResult, ScriptArgs } from './types';

/**
 * Fixed window: one counter per tier for the window `floor(now / window)`. The cheapest
 * check, but a client can spend its whole limit at the end of one window and again at
 * the start of the next: up to twice the limit inside one window's length.
 *
 * Storage: one string key per identifier, tiers packed as `"index:count"` in base 36, separated by
 * spaces, expiring when the longest tier's current window ends.
 */

/** Per tier: [windowIndex, count], flattened; with a block. */
export type FixedWindowState = Stored<number[]>;

const CHECK = checkLua(
  luaScratch('countsOf', 'endsOf'),
  `
  -- Stored at the key, a string: per tier 'index:count' in base 36, tiers separated by spaces,
  -- index = floor(now / window), after an optional block marker '!<until>'; expires when the
  -- longest tier's current window ends (or when a longer block ends).
  local blockedUntil, body = readBlocked(readValue(key))
  local blocked = blockedUntil > now
  if blocked then dryRun = true end
  local saved = readCounters(body)
  local counts, ends = countsOf, endsOf
  local allowed = 1
  local expiry = 0
  -- Whether each tier was last counted in its current window: with the same tiers stored, the key's
  -- expiry is already where this write would set it (see sameWindows in shared.ts).
  local same = true
  for i = 1, tiers do
    local index = math.floor(now / windows[i])
    counts[i] = 0
    if saved[2 * i - 1] == index then counts[i] = saved[2 * i] else same = false end
    ends[i] = (index + 1) * windows[i]
    if ends[i] - now > expiry then expiry = ends[i] - now end
    if counts[i] + cost > limits[i] then allowed = 0 end
  end
  if blocked then allowed = 0 end
  if allowed == 1 and cost > 0 and not dryRun then
    local value
    for i = 1, tiers do
      counts[i] = counts[i] + cost
      value = withTier(value, base36(math.floor(now / windows[i])) .. ':' .. base36(counts[i]))
    end
    if same and saved[2 * tiers + 1] == nil then writeValue(key, value) else writeValue(key, value, expiry) end
  end
  local blockedMs = 0
  if allowed == 0 then blockedMs = blockAfterDenial(key, now, blockedUntil, blockFor, dryRun, body, blockResets) end
  local reply = checkReply(allowed, now, blockedMs)
  for i = 1, tiers do
    local wait, reset = 0, 0
    if counts[i] + cost > limits[i] then wait = ends[i] - now end
    if counts[i] > 0 then reset = ends[i] - now end
    pushTier(reply, counts[i], 1, wait, reset)
  end
  return reply
`,
);

function check(state: number[] | undefined, { now, cost, dryRun, tiers }: ScriptArgs): MemoryResult<number[]> {
  const count = tiers.length;
  const counts = new Array<number>(count);
  const ends = new Array<number>(count);
  let allowed: 0 | 1 = 1;
  let expiry = 0;
  for (let i = 0; i < count; i++) {
    const { limit, window } = tiers[i];
    const index = Math.floor(now / window);
    counts[i] = state !== undefined && state[2 * i] === index ? state[2 * i + 1] : 0;
    ends[i] = (index + 1) * window;
    if (ends[i] - now > expiry) expiry = ends[i] - now;
    if (counts[i] + cost > limit) allowed = 0;
  }
  let next = state;
  let expiresAt: number | undefined;
  if (allowed === 1 && cost > 0 && !dryRun) {
    next = new Array<number>(2 * count);
    for (let i = 0; i < count; i++) {
      counts[i] += cost;
      next[2 * i] = Math.floor(now / tiers[i].window);
      next[2 * i + 1] = counts[i];
    }
    expiresAt = sameWindows(state, next, 2) ? undefined : now + expiry;
  }
  const reply = checkReply(allowed, now, 0);
  for (let i = 0; i < count; i++) {
    // A fixed window gives quota back only when it ends, all at once.
    const reset = counts[i] > 0 ? ends[i] - now : 0;
    pushTier(reply, counts[i], 1, counts[i] + cost > tiers[i].limit ? ends[i] - now : 0, reset);
  }
  return { reply, state: next, expiresAt };
}

const SETTLE = counterSettleLua(
  '',
  `
-- Settles a check that counted cost units at countedAt to actualCost. Less: gives the difference
-- back to each tier whose window has not ended since, never below 0. More: charges the difference
-- to the current windows, past the limit if need be; the key lives at least until the longest
-- tier's current window ends.
local readState = readCounters
local function giveBack(saved, units)
  local givenBack = 0
  for i = 1, tiers do
    if saved[2 * i - 1] == math.floor(countedAt / windows[i]) then
      local back = math.min(units, saved[2 * i])
      saved[2 * i] = saved[2 * i] - back
      givenBack = givenBack + back
    end
  end
  return givenBack
end
local function encodeState(saved)
  local value
  for i = 1, #saved / 2 do value = withTier(value, base36(saved[2 * i - 1]) .. ':' .. base36(saved[2 * i])) end
  return value
end
local function charge(saved, charged)
  local value
  local expiry = 0
  for i = 1, tiers do
    local index = math.floor(now / windows[i])
    local count = 0
    if saved[2 * i - 1] == index then count = saved[2 * i] end
    value = withTier(value, base36(index) .. ':' .. base36(count + charged))
    local left = (index + 1) * windows[i] - now
    if left > expiry then expiry = left end
  end
  return value, expiry
end
`,
);

const settle = counterSettle<number[]>({
  giveBack(state, units, { countedAt, tiers }) {
    const next = [...state];
    let givenBack = 0;
    for (let i = 0; i < tiers.length && 2 * i < next.length; i++) {
      if (next[2 * i] !== Math.floor(countedAt / tiers[i].window)) continue;
      const back = Math.min(units, next[2 * i + 1]);
      next[2 * i + 1] -= back;
      givenBack += back;
    }
    return { givenBack, next };
  },
  charge(state, charged, { now, tiers }) {
    const next = new Array<number>(2 * tiers.length);
    let expiry = 0;
    for (let i = 0; i < tiers.length; i++) {
      const { window } = tiers[i];
      const index = Math.floor(now / window);
      next[2 * i] = index;
      next[2 * i + 1] = (state !== undefined && state[2 * i] === index ? state[2 * i + 1] : 0) + charged;
      expiry = Math.max(expiry, (index + 1) * window - now);
    }
    return { next, livesUntil: now + expiry };
  },
});

export const fixedWindow: AlgorithmScripts<FixedWindowState> = defineAlgorithm(
  'fixed-window',
  { check: CHECK, settle: SETTLE },
  { check, settle },
);
