/**
 * Lua helpers more than one algorithm uses (base 36 counters, the exact remaining units), and
 * the TypeScript twin of their arithmetic.
 */

/**
 * The shared helpers, in Lua. String keys are read and written through `readValue`, `writeValue`
 * (without an expiry, to keep the key's) and `ttlOf`: one script call does each at once, and a batch
 * call, which sets `nextKey` to the key of the check that follows, holds back a write to that key
 * and reads the key from what it holds, until a check of another key begins (`flushWrites()`).
 * The run is atomic, so nobody sees the difference, and consecutive checks of one identifier (a
 * global limit, one busy client) cost Redis one `GET` and one `SET` for the lot rather than one
 * each. With distinct keys, the usual batch, every write goes out at once.
 */
export const LUA_SHARED = `
-- During a batch run, the key of the check after this one: a write to it is held back (heldKey,
-- with its value and its expiry, ms from now or nil to keep the key's own) for that check to read
-- and write over. A held write is sent when a check of another key begins, or at the run's end.
local nextKey
local heldKey, heldValue, heldExpiry
local function readValue(key)
  if key == heldKey then return heldValue end
  return redis.call('GET', key)
end
-- An expiry is sent as text made once per run (a library's runs share it): Redis would format the
-- number for every call.
local expiryTexts, expiryCount = {}, 0
local function setValue(key, value, expiryMs)
  if expiryMs == nil then
    redis.call('SET', key, value, 'KEEPTTL')
    return
  end
  local text = expiryTexts[expiryMs]
  if not text then
    text = string.format('%d', expiryMs)
    expiryTexts[expiryMs] = text
    expiryCount = expiryCount + 1
  end
  redis.call('SET', key, value, 'PX', text)
end
local function flushWrites()
  if heldKey == nil then return end
  setValue(heldKey, heldValue, heldExpiry)
  heldKey = nil
end
-- Writes a string key to expire in expiryMs, or, without it, to keep its expiry as the run left it.
local function writeValue(key, value, expiryMs)
  if key == heldKey then
    if expiryMs == nil then expiryMs = heldExpiry end
    heldKey = nil
  end
  if key == nextKey then
    heldKey, heldValue, heldExpiry = key, value, expiryMs
    return
  end
  setValue(key, value, expiryMs)
end
-- PTTL of a string key, as the run left it.
local function ttlOf(key)
  if key == heldKey and heldExpiry ~= nil then return heldExpiry end
  return redis.call('PTTL', key)
end
local DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz'
-- Counters are stored in base 36: a window index and two counts fit in 12 characters,
-- which keeps a key within Redis's smallest string allocation for realistic counts.
-- Remembered for the run (a library's runs share it): the checks of a batch share their window
-- indexes, and small counts repeat.
local base36Of, base36Count = { [0] = '0' }, 0
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
  base36Count = base36Count + 1
  return text
end
-- The numbers of a counter string, in one table that the run's calls share: what a call answers
-- is valid until the next call.
local counterNumbers, counterCount = {}, 0
local function readCounters(value)
  local numbers, count = counterNumbers, 0
  if value then
    for part in string.gmatch(value, '[0-9a-z]+') do
      count = count + 1
      numbers[count] = tonumber(part, 36)
    end
  end
  for i = count + 1, counterCount do numbers[i] = nil end
  counterCount = count
  return numbers
end
-- A function library (Redis 7) keeps its top-level values from call to call: each call starts
-- anew, but for the memos, kept while they are small (they grow with the window indexes, counts
-- and expiries met).
local MEMO_SIZE = 10000
local function forgetWrites()
  nextKey, heldKey, heldValue, heldExpiry = nil, nil, nil, nil
  if expiryCount > MEMO_SIZE then expiryTexts, expiryCount = {}, 0 end
  if base36Count > MEMO_SIZE then base36Of, base36Count = { [0] = '0' }, 0 end
end
-- A counter string with one tier's text added: the usual one tier needs no table.concat.
local function withTier(value, tierText)
  if value == nil then return tierText end
  return value .. ' ' .. tierText
end
-- floor(limit - numerator / denominator), at least 0, in exact integer steps.
local function remainingOf(numerator, denominator, limit)
  local room = limit * denominator - numerator
  if room <= 0 then return 0 end
  local units = math.floor(room / denominator)
  if units * denominator > room then units = units - 1 elseif (units + 1) * denominator <= room then units = units + 1 end
  return units
end
`;

/**
 * Lua declaring per-tier tables that the checks of one script run share, for a check body that sets
 * entries 1 to `tiers` of each before it reads them: a batch makes them once rather than once per
 * check, which is less for Lua to allocate and collect (bench/NOTES.md has the measurement).
 */
export function luaScratch(...names: string[]): string {
  return `\nlocal ${names.join(', ')} = ${names.map(() => '{}').join(', ')}\n`;
}

/** `floor(limit - numerator / denominator)`, at least 0, in exact integer steps: the twin of the Lua `remainingOf`. */
export function remainingOf(numerator: number, denominator: number, limit: number): number {
  const room = limit * denominator - numerator;
  if (room <= 0) return 0;
  let units = Math.floor(room / denominator);
  if (units * denominator > room) units -= 1;
  else if ((units + 1) * denominator <= room) units += 1;
  return units;
}

/**
 * Whether a counting write of a window counter (sliding or fixed window: `stride` numbers per tier,
 * the window index first) finds every tier last counted in its current window: `state` holds the
 * same tiers, with the indexes that `next` is about to store. The write then keeps the key's
 * expiry: the write that started those windows set it where their counts stop mattering (the end
 * of the next window for the sliding window, of the current one for the fixed window), and
 * updating an expiry is the costly part of a Redis write (bench/NOTES.md). The Lua checks make the
 * same test inline.
 */
export function sameWindows(state: readonly number[] | undefined, next: readonly number[], stride: number): boolean {
  if (state === undefined || state.length !== next.length) return false;
  for (let i = 0; i < next.length; i += stride) if (state[i] !== next[i]) return false;
  return true;
}

/**
 * Reads a counter string as the sliding and fixed window scripts store it, the twin of the Lua
 * `readCounters`: base 36 numbers, `:` within a tier, spaces between tiers (`"hu2s7:a:0 1e4:b:3"`).
 * For tests and tools that inspect Redis.
 */
export function readCounters(value: string): number[] {
  return (value.match(/[0-9a-z]+/g) ?? []).map((part) => parseInt(part, 36));
}
