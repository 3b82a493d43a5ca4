import { checkReply, pushTier } from '../protocol';
import type { Stored } from './block';
import { counterSettle, counterSettleLua } from './counter-settle';
import { checkLua, defineAlgorithm } from './prelude';
import { luaScratch, remainingOf } from './shared';
import type { AlgorithmScripts, MemoryResult, ScriptArgs } from './types';

/**
 * Token bucket, as GCRA (the generic cell rate algorithm). Per tier, `limit` is the bucket's
 * size (the burst allowed at once) and `window` the time the whole bucket takes to refill, so
 * one unit comes back every `window / limit` ms. The only state is the theoretical arrival
 * time (TAT): the moment the bucket would be full again. A request of cost `c` moves it
 * `c × window / limit` later and is allowed iff that leaves it at most `window` ahead of now.
 * The bucket's level in units is `(TAT − now) × limit / window`.
 *
 * `window / limit` is rarely a whole number of ms, so TAT is kept exactly as `m + r / limit`
 * ms (`0 ≤ r < limit`), and every comparison is made in integers.
 *
 * Storage: one string key per identifier: per tier `m:r` in base 36, or `m` in decimal when
 * `r` is 0, tiers separated by spaces, after an optional block marker `!<until>`; it expires when
 * every bucket is full again (or when a longer block ends), since a full bucket is the same as
 * none. One tier in whole milliseconds is a bare decimal integer, which Redis stores as a number:
 * the smallest state of the four algorithms.
 */

/** Per tier: [m, r] (TAT = m + r / limit ms), flattened; with a block. */
export type TokenBucketState = Stored<number[]>;

const LUA_TAT = `
-- Stored TATs, per tier a pair {m, r}: 'm:r' in base 36, or m alone in decimal when r is 0.
local function readTats(body)
  local tats = {}
  if body then
    for part in string.gmatch(body, '%S+') do
      local m, r = string.match(part, '^([0-9a-z]+):([0-9a-z]+)$')
      if m then tats[#tats + 1] = { tonumber(m, 36), tonumber(r, 36) } else tats[#tats + 1] = { tonumber(part), 0 } end
    end
  end
  return tats
end
-- A TAT at now: never earlier than now (a full bucket).
local function tatAt(tat, limit, now)
  if not tat then return now, 0 end
  local m, r = tat[1], tat[2]
  if r >= limit then m, r = m + math.floor(r / limit), r % limit end
  if m < now then return now, 0 end
  return m, r
end
-- TAT + units x window / limit.
local function advance(m, r, units, limit, window)
  local step = units * window
  m, r = m + math.floor(step / limit), r + step % limit
  if r >= limit then m, r = m + 1, r - limit end
  return m, r
end
-- Milliseconds from now until a request of 'units' fits a bucket whose TAT is m + r / limit.
local function waitFor(m, r, units, limit, window, now)
  local nm, nr = advance(m, r, units, limit, window)
  local at = nm - window
  if nr > 0 then at = at + 1 end
  if at > now then return at - now end
  return 0
end
-- A whole-millisecond TAT is written in decimal: alone in its key (one tier, no block), Redis
-- keeps such a value as an integer, its smallest string.
local function encode(m, r)
  if r == 0 then return string.format('%d', m) end
  return base36(m) .. ':' .. base36(r)
end
`;

const CHECK = checkLua(
  `${LUA_TAT}${luaScratch('msOf', 'rsOf')}`,
  `
  -- Stored at the key, a string: per tier the TAT (m + r / limit ms) as 'm:r' in base 36, or as m in
  -- decimal when r is 0, tiers separated by spaces, after an optional block marker '!<until>';
  -- expires when every bucket is full again (or when a longer block ends).
  local blockedUntil, body = readBlocked(readValue(key))
  local blocked = blockedUntil > now
  if blocked then dryRun = true end
  local saved = readTats(body)
  local ms, rs = msOf, rsOf
  local allowed = 1
  for i = 1, tiers do
    ms[i], rs[i] = tatAt(saved[i], limits[i], now)
    if waitFor(ms[i], rs[i], cost, limits[i], windows[i], now) > 0 then allowed = 0 end
  end
  if blocked then allowed = 0 end
  if allowed == 1 and cost > 0 and not dryRun then
    local value
    local expiry = 0
    for i = 1, tiers do
      ms[i], rs[i] = advance(ms[i], rs[i], cost, limits[i], windows[i])
      value = withTier(value, encode(ms[i], rs[i]))
      local full = ms[i] - now
      if rs[i] > 0 then full = full + 1 end
      if full > expiry then expiry = full end
    end
    writeValue(key, value, expiry)
  end
  local blockedMs = 0
  if allowed == 0 then blockedMs = blockAfterDenial(key, now, blockedUntil, blockFor, dryRun, body, blockResets) end
  local reply = checkReply(allowed, now, blockedMs)
  for i = 1, tiers do
    local limit, window = limits[i], windows[i]
    local numerator = (ms[i] - now) * limit + rs[i]
    local remaining = remainingOf(numerator, window, limit)
    local reset = 0
    if remaining < limit then reset = waitFor(ms[i], rs[i], remaining + 1, limit, window, now) end
    pushTier(reply, numerator, window, waitFor(ms[i], rs[i], cost, limit, window, now), reset)
  end
  return reply
`,
);

/** Tier i's stored TAT as an [m, r] pair, as the Lua `readTats` gives it; undefined when none is stored. */
function savedTat(state: readonly number[] | undefined, i: number): readonly [number, number] | undefined {
  return state === undefined || 2 * i >= state.length ? undefined : [state[2 * i], state[2 * i + 1]];
}

/** The TAT arithmetic below is the Lua's above, function for function. */
function tatAt(tat: readonly [number, number] | undefined, limit: number, now: number): [number, number] {
  if (tat === undefined) return [now, 0];
  let [m, r] = tat;
  if (r >= limit) {
    m += Math.floor(r / limit);
    r %= limit;
  }
  return m < now ? [now, 0] : [m, r];
}

function advance(m: number, r: number, units: number, limit: number, window: number): [number, number] {
  const step = units * window;
  let nm = m + Math.floor(step / limit);
  let nr = r + (step % limit);
  if (nr >= limit) {
    nm += 1;
    nr -= limit;
  }
  return [nm, nr];
}

function waitFor(m: number, r: number, units: number, limit: number, window: number, now: number): number {
  const [nm, nr] = advance(m, r, units, limit, window);
  const at = nm - window + (nr > 0 ? 1 : 0);
  return at > now ? at - now : 0;
}

function check(state: number[] | undefined, { now, cost, dryRun, tiers }: ScriptArgs): MemoryResult<number[]> {
  const count = tiers.length;
  const tats = new Array<[number, number]>(count);
  let allowed: 0 | 1 = 1;
  for (let i = 0; i < count; i++) {
    const { limit, window } = tiers[i];
    tats[i] = tatAt(savedTat(state, i), limit, now);
    if (waitFor(tats[i][0], tats[i][1], cost, limit, window, now) > 0) allowed = 0;
  }
  let next = state;
  let expiresAt: number | undefined;
  if (allowed === 1 && cost > 0 && !dryRun) {
    next = new Array<number>(2 * count);
    let expiry = 0;
    for (let i = 0; i < count; i++) {
      tats[i] = advance(tats[i][0], tats[i][1], cost, tiers[i].limit, tiers[i].window);
      next[2 * i] = tats[i][0];
      next[2 * i + 1] = tats[i][1];
      const full = tats[i][0] - now + (tats[i][1] > 0 ? 1 : 0);
      if (full > expiry) expiry = full;
    }
    expiresAt = now + expiry;
  }
  const reply = checkReply(allowed, now, 0);
  for (let i = 0; i < count; i++) {
    const { limit, window } = tiers[i];
    const [m, r] = tats[i];
    const numerator = (m - now) * limit + r;
    const remaining = remainingOf(numerator, window, limit);
    const reset = remaining < limit ? waitFor(m, r, remaining + 1, limit, window, now) : 0;
    pushTier(reply, numerator, window, waitFor(m, r, cost, limit, window, now), reset);
  }
  return { reply, state: next, expiresAt };
}

const SETTLE = counterSettleLua(
  LUA_TAT,
  `
-- Settles a check that counted cost units at countedAt to actualCost. Less: takes the difference
-- back from each tier whose bucket may still hold it (a unit drains within one window of being
-- counted): the TAT moves back, never before now. More: moves every TAT later by the difference,
-- past the bucket's size if need be (a debt the next requests wait out); the key lives at least
-- until every bucket is full again.
local readState = readTats
local function giveBack(saved, units)
  local givenBack = 0
  for i = 1, math.min(tiers, #saved) do
    local m, r = tatAt(saved[i], limits[i], now)
    if now < countedAt + windows[i] and (m > now or r > 0) then
      local step, limit = units * windows[i], limits[i]
      m, r = m - math.floor(step / limit), r - step % limit
      if r < 0 then m, r = m - 1, r + limit end
      if m < now then m, r = now, 0 end
      saved[i] = { m, r }
      givenBack = givenBack + units
    end
  end
  return givenBack
end
local function encodeState(saved)
  local value
  for i = 1, #saved do value = withTier(value, encode(saved[i][1], saved[i][2])) end
  return value
end
local function charge(saved, charged)
  local value
  local expiry = 0
  for i = 1, tiers do
    local m, r = tatAt(saved[i], limits[i], now)
    m, r = advance(m, r, charged, limits[i], windows[i])
    value = withTier(value, encode(m, r))
    local full = m - now
    if r > 0 then full = full + 1 end
    if full > expiry then expiry = full end
  end
  return value, expiry
end
`,
);

const settle = counterSettle<number[]>({
  giveBack(state, units, { now, countedAt, tiers }) {
    const next = [...state];
    let givenBack = 0;
    for (let i = 0; i < tiers.length && 2 * i < next.length; i++) {
      const { limit, window } = tiers[i];
      let [m, r] = tatAt(savedTat(next, i), limit, now);
      if (now >= countedAt + window || (m <= now && r === 0)) continue;
      const step = units * window;
      m -= Math.floor(step / limit);
      r -= step % limit;
      if (r < 0) {
        m -= 1;
        r += limit;
      }
      if (m < now) [m, r] = [now, 0];
      next[2 * i] = m;
      next[2 * i + 1] = r;
      givenBack += units;
    }
    return { givenBack, next };
  },
  charge(state, charged, { now, tiers }) {
    const next = new Array<number>(2 * tiers.length);
    let expiry = 0;
    for (let i = 0; i < tiers.length; i++) {
      const { limit, window } = tiers[i];
      const [m0, r0] = tatAt(savedTat(state, i), limit, now);
      const [m, r] = advance(m0, r0, charged, limit, window);
      next[2 * i] = m;
      next[2 * i + 1] = r;
      expiry = Math.max(expiry, m - now + (r > 0 ? 1 : 0));
    }
    return { next, livesUntil: now + expiry };
  },
});

export const tokenBucket: AlgorithmScripts<TokenBucketState> = defineAlgorithm(
  'token-bucket',
  { check: CHECK, settle: SETTLE },
  { check, settle },
);
