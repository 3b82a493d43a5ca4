/**
 * Lua shared by every algorithm's script: reads the clock, cost, dry-run flag and
 * tiers from ARGV (layout documented on `Algorithm`).
 *
 * Without an injected clock the script takes the time from Redis `TIME`, so app
 * servers with skewed clocks still agree; Redis 7 replicates a script's effects, not
 * the script, so reading `TIME` before writing is allowed.
 */
export const LUA_PRELUDE = `
local now = tonumber(ARGV[1])
if not now then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local cost = tonumber(ARGV[2])
local dry = ARGV[3] == '1'
local tiers = (#ARGV - 3) / 2
local limits, windows = {}, {}
local longest = 0
for i = 1, tiers do
  limits[i] = tonumber(ARGV[2 + 2 * i])
  windows[i] = tonumber(ARGV[3 + 2 * i])
  if windows[i] > longest then longest = windows[i] end
end
`;

/** The longest window among `tiers`. */
export function longestWindow(tiers: readonly { window: number }[]): number {
  let longest = 0;
  for (const tier of tiers) if (tier.window > longest) longest = tier.window;
  return longest;
}
