import type { Tier } from './types';

/**
 * Lua shared by every script (check and refund): decodes the arguments that {@link scriptArgv}
 * encodes, and the helpers more than one script uses.
 *
 * Without an injected clock the script takes the time from Redis `TIME`, so app
 * servers with skewed clocks still agree; Redis 7 replicates a script's effects, not
 * the script, so reading `TIME` before writing is allowed.
 */
export const LUA_PRELUDE = `
-- The arguments of one check or refund (ARGV of a single-key call, or one key's part of a batch):
--   1: now (epoch ms), or '' to read Redis TIME      2: cost
--   3: '1' dry run (write nothing), '0' write        4: check: blockFor (ms, 0 = none); refund: countedAt (epoch ms)
--   5, 6, ...: limit, window (ms) of each tier
-- Redis TIME is read once per script run: the checks of a batch run atomically together, at one instant.
local timeOfRun
local function readArgs(argv)
  local now = tonumber(argv[1]) or timeOfRun
  if not now then
    local time = redis.call('TIME')
    now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    timeOfRun = now
  end
  local tiers = (#argv - 4) / 2
  local limits, windows, longest = {}, {}, 0
  for i = 1, tiers do
    limits[i] = tonumber(argv[3 + 2 * i])
    windows[i] = tonumber(argv[4 + 2 * i])
    if windows[i] > longest then longest = windows[i] end
  end
  return now, tonumber(argv[2]), argv[3] == '1', tonumber(argv[4]), tiers, limits, windows, longest
end
local DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz'
-- Counters are stored in base 36: a window index and two counts fit in 12 characters,
-- which keeps a key within Redis's smallest string allocation for realistic counts.
-- Remembered for the run: the checks of a batch share their window indexes, and small counts repeat.
local base36Of = { [0] = '0' }
local function base36(number)
  local text = base36Of[number]
  if text then return text end
  text = ''
  local rest = number
  while rest > 0 do
    local digit = rest % 36
    text = string.sub(DIGITS, digit + 1, digit + 1) .. text
    rest = (rest - digit) / 36
  end
  base36Of[number] = text
  return text
end
local function readCounters(value)
  local numbers = {}
  if value then
    for part in string.gmatch(value, '[0-9a-z]+') do numbers[#numbers + 1] = tonumber(part, 36) end
  end
  return numbers
end
-- floor(limit - numerator / denominator), at least 0, in exact integer steps.
local function remainingOf(numerator, denominator, limit)
  local room = limit * denominator - numerator
  if room <= 0 then return 0 end
  local units = math.floor(room / denominator)
  if units * denominator > room then units = units - 1 elseif (units + 1) * denominator <= room then units = units + 1 end
  return units
end
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
-- Starts a block of blockFor ms at now on a string key, keeping its counters; the key lives at least that long.
local function writeBlock(key, now, blockFor, body)
  local ttl = redis.call('PTTL', key)
  if ttl < blockFor then ttl = blockFor end
  redis.call('SET', key, withMarker(now + blockFor, body), 'PX', ttl)
end
-- After a check on a string key: ms left on the identifier's block, either what remains of the
-- block it is under, or a new block of blockFor ms, started when this check (not a dry run) was denied.
local function blockAfterCheck(key, now, blockedUntil, allowed, blockFor, dry, body)
  if blockedUntil > now then return blockedUntil - now end
  if allowed == 0 and blockFor > 0 and not dry then
    writeBlock(key, now, blockFor, body)
    return blockFor
  end
  return 0
end
`;

/** The locals every script body reads, decoded from one key's arguments by the prelude's `readArgs`. */
const LUA_ARGS = 'local now, cost, dry, extra, tiers, limits, windows, longest = readArgs(argv)';

/**
 * The check scripts of an algorithm, from its Lua `helpers` (functions of their arguments
 * only) and its check `body` (Lua that reads `key` and the locals of {@link LUA_ARGS}, and
 * returns the reply): `lua` checks `KEYS[1]` with ARGV; `batchLua` checks every key of `KEYS`
 * in one call. A batch's ARGV is [dry-run override ('1' makes every check a dry run), then per
 * key its arguments joined by commas, or those arguments once when every key has the same (the
 * usual batch: one cost, the limiter's tiers, Redis's clock)], and it answers per key the
 * reply's numbers joined by commas: one string each way per check is far cheaper for a client
 * to encode and decode than a dozen numbers (bench/micro.ts).
 */
export function checkLua(helpers: string, body: string): { lua: string; batchLua: string } {
  const check = `${LUA_PRELUDE}${helpers}
local function check(key, argv)
  ${LUA_ARGS}
${body}
end
`;
  return {
    lua: `${check}return check(KEYS[1], ARGV)\n`,
    batchLua: `${check}local replies, formats = {}, {}
-- ARGV: 1: '1' makes every check a dry run; 2, 3, ...: each key's arguments, or, when ARGV[2] is
-- the only one, the arguments every key shares (read once).
local shared = #ARGV == 2
local argv
for k = 1, #KEYS do
  if k == 1 or not shared then
    argv = {}
    for field in string.gmatch(ARGV[k + 1] .. ',', '([^,]*),') do argv[#argv + 1] = field end
    if ARGV[1] == '1' then argv[3] = '1' end
  end
  local reply = check(KEYS[k], argv)
  -- One string.format per reply ('%d,%d,...,%d', made once per reply length) rather than one per number.
  local format = formats[#reply]
  if not format then
    format = string.rep('%d,', #reply - 1) .. '%d'
    formats[#reply] = format
  end
  replies[k] = string.format(format, unpack(reply))
end
return replies
`,
  };
}

/** One check's arguments as a batch script takes them: joined by commas. */
export function batchArgv(argv: readonly (string | number)[]): string {
  return argv.join(',');
}

/**
 * One check's reply as a batch script answers it: integers joined by commas. Read digit by
 * digit, without the intermediate strings of `split` (this runs for every batched check).
 */
export function batchReply(reply: string): number[] {
  const numbers: number[] = [];
  let value = 0;
  let negative = false;
  for (let i = 0; i < reply.length; i++) {
    const code = reply.charCodeAt(i);
    if (code === COMMA) {
      numbers.push(negative ? -value : value);
      value = 0;
      negative = false;
    } else if (code === MINUS) negative = true;
    else value = value * 10 + (code - ZERO);
  }
  numbers.push(negative ? -value : value);
  return numbers;
}

const COMMA = 44;
const MINUS = 45;
const ZERO = 48;

/** A refund script: the prelude, the algorithm's `helpers`, and a `body` reading `key` and the locals of {@link LUA_ARGS}. */
export function refundLua(helpers: string, body: string): string {
  return `${LUA_PRELUDE}${helpers}
local argv, key = ARGV, KEYS[1]
${LUA_ARGS}
${body}`;
}

/** Position of the dry-run flag in the ARGV of a single-key call (1-based, as in Lua). */
export const DRY_RUN_ARGV = 3;

/**
 * Encodes a script's arguments as the ARGV that {@link LUA_PRELUDE} decodes; `extra` is
 * `blockFor` for a check and `countedAt` for a refund.
 */
export function scriptArgv(
  now: number | undefined,
  cost: number,
  dryRun: boolean,
  extra: number,
  tiers: readonly Tier[],
): (string | number)[] {
  const argv: (string | number)[] = [now === undefined ? '' : now, cost, dryRun ? '1' : '0', extra];
  for (const tier of tiers) argv.push(tier.limit, tier.window);
  return argv;
}

/** `floor(limit - numerator / denominator)`, at least 0, in exact integer steps (the twin of the Lua `remainingOf`). */
export function remainingOf(numerator: number, denominator: number, limit: number): number {
  const room = limit * denominator - numerator;
  if (room <= 0) return 0;
  let units = Math.floor(room / denominator);
  if (units * denominator > room) units -= 1;
  else if ((units + 1) * denominator <= room) units += 1;
  return units;
}

/** The longest window among `tiers`. */
export function longestWindow(tiers: readonly { window: number }[]): number {
  let longest = 0;
  for (const tier of tiers) if (tier.window > longest) longest = tier.window;
  return longest;
}

/**
 * Reads a counter string as the sliding and fixed window scripts store it: per tier,
 * base-36 numbers joined by `:`, tiers separated by spaces (`"hu2s7:a:0 1e4:b:3"`).
 * For tests and tools that inspect Redis; the scripts do the same in Lua.
 */
export function readCounters(value: string): number[] {
  return (value.match(/[0-9a-z]+/g) ?? []).map((part) => parseInt(part, 36));
}
