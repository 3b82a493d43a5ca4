import { LUA_PRELUDE } from './prelude';
import type { AlgorithmScripts, CheckArgs, MemoryResult } from './types';

/**
 * Fixed window: one counter per tier for the window `floor(now / window)`. The cheapest
 * check, but a client can spend its whole limit at the end of one window and again at
 * the start of the next: up to twice the limit inside one window's length.
 *
 * Storage: one string key per identifier, tiers packed as `"index:count"` in base 36, separated by
 * spaces, expiring when the longest tier's current window ends.
 */

/** Per tier: [windowIndex, count], flattened. */
export type FixedWindowState = number[];

const LUA = `${LUA_PRELUDE}
-- Stored at KEYS[1], a string: per tier 'index:count' in base 36, tiers separated by spaces,
-- index = floor(now / window); expires when the longest tier's current window ends.
local saved = readCounters(redis.call('GET', KEYS[1]))
local counts, ends = {}, {}
local allowed = 1
local expiry = 0
for i = 1, tiers do
  local index = math.floor(now / windows[i])
  counts[i] = 0
  if saved[2 * i - 1] == index then counts[i] = saved[2 * i] end
  ends[i] = (index + 1) * windows[i]
  if ends[i] - now > expiry then expiry = ends[i] - now end
  if counts[i] + cost > limits[i] then allowed = 0 end
end
if allowed == 1 and cost > 0 and not dry then
  local parts = {}
  for i = 1, tiers do
    counts[i] = counts[i] + cost
    parts[i] = base36(math.floor(now / windows[i])) .. ':' .. base36(counts[i])
  end
  redis.call('SET', KEYS[1], table.concat(parts, ' '), 'PX', expiry)
end
local reply = { allowed, now }
for i = 1, tiers do
  local wait = 0
  if counts[i] + cost > limits[i] then wait = ends[i] - now end
  reply[#reply + 1] = counts[i]
  reply[#reply + 1] = 1
  reply[#reply + 1] = wait
end
return reply
`;

function apply(state: FixedWindowState | undefined, { now, cost, dryRun, tiers }: CheckArgs): MemoryResult<FixedWindowState> {
  const count = tiers.length;
  const counts = new Array<number>(count);
  const ends = new Array<number>(count);
  let allowed = 1;
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
  if (allowed === 1 && cost > 0 && !dryRun) {
    next = new Array<number>(2 * count);
    for (let i = 0; i < count; i++) {
      counts[i] += cost;
      next[2 * i] = Math.floor(now / tiers[i].window);
      next[2 * i + 1] = counts[i];
    }
  }
  const reply: number[] = [allowed, now];
  for (let i = 0; i < count; i++) {
    reply.push(counts[i], 1, counts[i] + cost > tiers[i].limit ? ends[i] - now : 0);
  }
  return { reply, state: next, expiresAt: now + expiry };
}

export const fixedWindow: AlgorithmScripts<FixedWindowState> = { algorithm: 'fixed-window', check: { lua: LUA, apply } };
