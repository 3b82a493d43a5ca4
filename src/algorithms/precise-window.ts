import { checkReply, pushTier } from '../protocol';
import type { Stored } from './block';
import { counterSettle, counterSettleLua } from './counter-settle';
import { checkLua, defineAlgorithm } from './prelude';
import { luaScratch, remainingOf } from './shared';
import type { AlgorithmScripts, MemoryResult, ScriptArgs } from './types';

/**
 * Precise window: a sliding window over a quantized log, near exact for the memory of a counter.
 *
 * Per tier, the counted units are kept by bucket: `precision` buckets per window, each
 * `width = max(1, floor(window / precision))` ms wide (bucket `b` holds the units counted in
 * `[b * width, (b + 1) * width)`). The window at `now` holds the ms after `now - window`; its
 * estimate is the units of the buckets wholly inside it, plus the units of the one bucket it
 * cuts, times the part of that bucket inside. A request of cost `c` is allowed iff
 * `estimate + c <= limit`; a denied request counts nothing. With `width = 1` (`precision` at least
 * the window in ms) the estimate is exact: a sliding log. Every comparison is done multiplied by
 * `width`, in integers, so Lua and TypeScript agree exactly.
 *
 * Storage: one string key per identifier (Cluster safe), one segment per tier:
 * `finest:width:tail:tailCount:total:baseBack:lastBack:bytes|<entries>`, the numbers in
 * hexadecimal. `finest` is the width the precision gives, `width` the one in use. The newest
 * bucket (`tail`) and its units are in the header; the older buckets are entries, oldest first,
 * each the gap in buckets after the one before (the first after `base = tail - baseBack`) and its
 * units, as LEB128 varints: `gap * 2` for one unit, or `gap * 2 + 1` then the units.
 * `last = tail - lastBack` is the newest entry's bucket (`base` without entries), `total` the
 * units of the whole segment, `bytes` the length of its entries. A check reads the header and the
 * oldest entries only (to drop those that have left the window), and appends at most one entry,
 * so its work hardly grows with the units held. A segment holds at most `precision + 1` entries,
 * and at most {@link MAX_ENTRY_BYTES} bytes of them: a tier that outgrows that (a large limit, fully
 * used) gets buckets twice as wide until it fits, and its finest width back once it empties.
 * The key expires when the newest unit has left every window.
 */

/** The stored string (see above): binary entries, one character per byte; with a block. */
export type PreciseWindowState = Stored<string>;

/** The default `precision`: 10 ms buckets for a one-minute window, an exact log for windows up to 6 s. */
export const DEFAULT_PRECISION = 6000;

/** One tier's log, read from its segment; `from` is where its entries not yet dropped start in `body`. */
interface Segment {
  /** The width its tier's precision gives; `width` is wider when the tier was made coarser to fit. */
  finest: number;
  width: number;
  tail: number;
  tailCount: number;
  total: number;
  base: number;
  last: number;
  /** The entries are `body` from `from` up to `stop`. */
  body: string;
  from: number;
  stop: number;
}

/** The most bytes of entries a tier keeps: past it, its buckets become twice as wide until they fit. */
export const MAX_ENTRY_BYTES = 2048;

const LUA_LOG = `
local function widthOf(window, precision)
  return math.max(1, math.floor(window / precision))
end
-- The LEB128 varint at s[at]: its value and the position after it.
local function readVarint(s, at)
  local byte = string.byte(s, at)
  local value, scale = 0, 1
  while byte >= 128 do
    value = value + (byte - 128) * scale
    scale = scale * 128
    at = at + 1
    byte = string.byte(s, at)
  end
  return value + byte * scale, at + 1
end
-- The entry at s[at]: its gap in buckets, its units and the position after it. (Most entries are
-- one or two bytes, read without a call.)
local function readEntry(s, at)
  local head, after = string.byte(s, at), at + 1
  if head >= 128 then head, after = readVarint(s, at) end
  if head % 2 == 0 then return head / 2, 1, after end
  local units = string.byte(s, after)
  if units < 128 then return (head - 1) / 2, units, after + 1 end
  units, after = readVarint(s, after)
  return (head - 1) / 2, units, after
end
local function varint(value)
  if value < 128 then return string.char(value) end
  local bytes = {}
  while value >= 128 do
    local low = value % 128
    bytes[#bytes + 1] = low + 128
    value = (value - low) / 128
  end
  bytes[#bytes + 1] = value
  return string.char(unpack(bytes))
end
local function entryOf(gap, units)
  if units == 1 then return varint(gap * 2) end
  return varint(gap * 2 + 1) .. varint(units)
end
local function emptySegment(finest)
  return { finest = finest, width = finest, tail = 0, tailCount = 0, total = 0, base = 0, last = 0, body = '', from = 1, stop = 0 }
end
-- The segments of a stored body, one per tier.
local function readSegments(body)
  local segments = {}
  local at = 1
  while body and at <= #body do
    local finest, width, tail, tailCount, total, baseBack, lastBack, bytes, start =
      string.match(body, '^(%x+):(%x+):(%x+):(%x+):(%x+):(%x+):(%x+):(%x+)|()', at)
    if not finest then break end
    tail, bytes = tonumber(tail, 16), tonumber(bytes, 16)
    segments[#segments + 1] = { finest = tonumber(finest, 16), width = tonumber(width, 16), tail = tail, tailCount = tonumber(tailCount, 16),
      total = tonumber(total, 16), base = tail - tonumber(baseBack, 16), last = tail - tonumber(lastBack, 16),
      body = body, from = start, stop = start + bytes - 1 }
    at = start + bytes
  end
  return segments
end
local function encodeSegment(segment)
  local entries = segment.body
  if segment.from ~= 1 or segment.stop ~= #entries then entries = string.sub(entries, segment.from, segment.stop) end
  return string.format('%x:%x:%x:%x:%x:%x:%x:%x|', segment.finest, segment.width, segment.tail, segment.tailCount, segment.total,
    segment.tail - segment.base, segment.tail - segment.last, #entries) .. entries
end
-- Counts units in bucket (the tail's when it is older: a clock behind the last writer's).
local function add(segment, bucket, units)
  if segment.total == 0 then
    segment.tail, segment.tailCount, segment.total, segment.base, segment.last = bucket, units, units, bucket, bucket
    segment.body, segment.from, segment.stop = '', 1, 0
  elseif bucket <= segment.tail then
    segment.tailCount, segment.total = segment.tailCount + units, segment.total + units
  else
    segment.body = string.sub(segment.body, segment.from, segment.stop) .. entryOf(segment.tail - segment.last, segment.tailCount)
    segment.from, segment.stop, segment.last = 1, #segment.body, segment.tail
    segment.tail, segment.tailCount, segment.total = bucket, units, segment.total + units
  end
end
-- The segment in buckets of width ms, for the finest width of its tier: each bucket's units move to
-- the bucket holding its start.
local function moveTo(segment, finest, width)
  local moved = emptySegment(finest)
  moved.width = width
  local at, bucket, body = segment.from, segment.base, segment.body
  while at <= segment.stop do
    local gap, units
    gap, units, at = readEntry(body, at)
    bucket = bucket + gap
    add(moved, math.floor(bucket * segment.width / width), units)
  end
  add(moved, math.floor(segment.tail * segment.width / width), segment.tailCount)
  return moved
end
-- The segment for a tier whose precision gives buckets of finest ms: as it is when it was kept for
-- that width (its buckets may have been made wider, to fit), else moved to buckets of that width.
local function rebucket(segment, finest)
  if segment.total == 0 then return emptySegment(finest) end
  if segment.finest == finest then return segment end
  return moveTo(segment, finest, finest)
end
-- Drops the entries of buckets before first, which have left the window; everything once the tail has.
local function trim(segment, first)
  if segment.total == 0 or segment.tail < first then
    segment.tail, segment.tailCount, segment.total, segment.body, segment.from, segment.stop = 0, 0, 0, '', 1, 0
    return
  end
  local body, at, base = segment.body, segment.from, segment.base
  while at <= segment.stop do
    local gap, units, after = readEntry(body, at)
    if base + gap >= first then break end
    base = base + gap
    segment.total = segment.total - units
    at = after
  end
  segment.from, segment.base = at, base
end
-- The estimate times the width, for the window whose oldest ms is oldest (the segment trimmed to
-- it): the units of the buckets wholly inside, and the part inside of the bucket holding oldest.
local function weighted(segment, oldest)
  if segment.total == 0 then return 0 end
  local width = segment.width
  local first = math.floor(oldest / width)
  local cut = 0
  if segment.from <= segment.stop then
    local gap, units = readEntry(segment.body, segment.from)
    if segment.base + gap == first then cut = units end
  elseif segment.tail == first then
    cut = segment.tailCount
  end
  return (segment.total - cut) * width + cut * ((first + 1) * width - oldest)
end
-- Milliseconds until a request of units fits under limit, assuming nothing else is counted: the
-- first moment the buckets still inside, oldest first, have left enough room. numerator is the
-- estimate times the width now.
local function waitFor(segment, oldest, numerator, limit, units)
  local room = limit - units
  local width = segment.width
  if numerator <= room * width then return 0 end
  local after, at, bucket, body = segment.total, segment.from, segment.base, segment.body
  while true do
    local held
    local inTail = at > segment.stop
    if inTail then
      bucket, held = segment.tail, segment.tailCount
    else
      local gap
      gap, held, at = readEntry(body, at)
      bucket = bucket + gap
    end
    after = after - held
    -- This bucket may keep room - after units: it does once that much of it is left inside.
    local keep = room - after
    if keep >= 0 and held > 0 then
      return (bucket + 1) * width - math.floor(keep * width / held) - oldest
    end
    if inTail then return 0 end
  end
end
-- The segment of a tier of window ms, in buckets of its width (or a multiple kept, see rebucket),
-- trimmed to its window at now; a tier left empty takes its width again.
local function liveSegment(saved, window, precision, now)
  local width = widthOf(window, precision)
  local segment = rebucket(saved or emptySegment(width), width)
  trim(segment, math.floor((now - window + 1) / segment.width))
  if segment.total == 0 then segment.width = segment.finest end
  return segment
end
-- Counts units at now; a tier whose entries outgrow ${MAX_ENTRY_BYTES} bytes gets buckets twice as wide until they fit.
local function count(segment, now, units)
  add(segment, math.floor(now / segment.width), units)
  while segment.stop - segment.from + 1 > ${MAX_ENTRY_BYTES} do segment = moveTo(segment, segment.finest, 2 * segment.width) end
  return segment
end
`;

/** The twins of the Lua helpers, under the same names. */

/** The width of a bucket in ms, for a window of `window` ms cut into `precision` buckets: never below 1 ms. */
export function widthOf(window: number, precision: number): number {
  return Math.max(1, Math.floor(window / precision));
}

function readVarint(s: string, at: number): [number, number] {
  let byte = s.charCodeAt(at);
  let value = 0;
  let scale = 1;
  while (byte >= 128) {
    value += (byte - 128) * scale;
    scale *= 128;
    at += 1;
    byte = s.charCodeAt(at);
  }
  return [value + byte * scale, at + 1];
}

function readEntry(s: string, at: number): [gap: number, units: number, after: number] {
  const [head, after] = readVarint(s, at);
  if (head % 2 === 0) return [head / 2, 1, after];
  const [units, next] = readVarint(s, after);
  return [(head - 1) / 2, units, next];
}

function varint(value: number): string {
  let text = '';
  while (value >= 128) {
    const low = value % 128;
    text += String.fromCharCode(low + 128);
    value = (value - low) / 128;
  }
  return text + String.fromCharCode(value);
}

function entryOf(gap: number, units: number): string {
  return units === 1 ? varint(gap * 2) : varint(gap * 2 + 1) + varint(units);
}

function emptySegment(finest: number): Segment {
  return { finest, width: finest, tail: 0, tailCount: 0, total: 0, base: 0, last: 0, body: '', from: 0, stop: 0 };
}

function readSegments(body: string | undefined): Segment[] {
  const segments: Segment[] = [];
  const headerAt = /([0-9a-f]+):([0-9a-f]+):([0-9a-f]+):([0-9a-f]+):([0-9a-f]+):([0-9a-f]+):([0-9a-f]+):([0-9a-f]+)\|/y;
  let at = 0;
  while (body !== undefined && at < body.length) {
    headerAt.lastIndex = at;
    const header = headerAt.exec(body);
    if (header === null) break;
    const [tail, bytes] = [parseInt(header[3], 16), parseInt(header[8], 16)];
    const start = headerAt.lastIndex;
    segments.push({
      finest: parseInt(header[1], 16),
      width: parseInt(header[2], 16),
      tail,
      tailCount: parseInt(header[4], 16),
      total: parseInt(header[5], 16),
      base: tail - parseInt(header[6], 16),
      last: tail - parseInt(header[7], 16),
      body,
      from: start,
      stop: start + bytes,
    });
    at = start + bytes;
  }
  return segments;
}

function encodeSegment(segment: Segment): string {
  const entries = segment.body.slice(segment.from, segment.stop);
  const header = [
    segment.finest,
    segment.width,
    segment.tail,
    segment.tailCount,
    segment.total,
    segment.tail - segment.base,
    segment.tail - segment.last,
  ];
  return `${header.map((n) => n.toString(16)).join(':')}:${entries.length.toString(16)}|${entries}`;
}

function add(segment: Segment, bucket: number, units: number): void {
  if (segment.total === 0) {
    Object.assign(segment, { tail: bucket, tailCount: units, total: units, base: bucket, last: bucket, body: '', from: 0, stop: 0 });
  } else if (bucket <= segment.tail) {
    segment.tailCount += units;
    segment.total += units;
  } else {
    segment.body = segment.body.slice(segment.from, segment.stop) + entryOf(segment.tail - segment.last, segment.tailCount);
    segment.from = 0;
    segment.stop = segment.body.length;
    segment.last = segment.tail;
    segment.tail = bucket;
    segment.tailCount = units;
    segment.total += units;
  }
}

function moveTo(segment: Segment, finest: number, width: number): Segment {
  const moved = emptySegment(finest);
  moved.width = width;
  let at = segment.from;
  let bucket = segment.base;
  while (at < segment.stop) {
    const [gap, units, after] = readEntry(segment.body, at);
    at = after;
    bucket += gap;
    add(moved, Math.floor((bucket * segment.width) / width), units);
  }
  add(moved, Math.floor((segment.tail * segment.width) / width), segment.tailCount);
  return moved;
}

function rebucket(segment: Segment, finest: number): Segment {
  if (segment.total === 0) return emptySegment(finest);
  return segment.finest === finest ? segment : moveTo(segment, finest, finest);
}

function trim(segment: Segment, first: number): void {
  if (segment.total === 0 || segment.tail < first) {
    Object.assign(segment, { tail: 0, tailCount: 0, total: 0, body: '', from: 0, stop: 0 });
    return;
  }
  let at = segment.from;
  let base = segment.base;
  while (at < segment.stop) {
    const [gap, units, after] = readEntry(segment.body, at);
    if (base + gap >= first) break;
    base += gap;
    segment.total -= units;
    at = after;
  }
  segment.from = at;
  segment.base = base;
}

function weighted(segment: Segment, oldest: number): number {
  if (segment.total === 0) return 0;
  const { width } = segment;
  const first = Math.floor(oldest / width);
  let cut = 0;
  if (segment.from < segment.stop) {
    const [gap, units] = readEntry(segment.body, segment.from);
    if (segment.base + gap === first) cut = units;
  } else if (segment.tail === first) {
    cut = segment.tailCount;
  }
  return (segment.total - cut) * width + cut * ((first + 1) * width - oldest);
}

function waitFor(segment: Segment, oldest: number, numerator: number, limit: number, units: number): number {
  const room = limit - units;
  const { width, body } = segment;
  if (numerator <= room * width) return 0;
  let after = segment.total;
  let at = segment.from;
  let bucket = segment.base;
  for (;;) {
    let held: number;
    const inTail = at >= segment.stop;
    if (inTail) {
      bucket = segment.tail;
      held = segment.tailCount;
    } else {
      const [gap, units, next] = readEntry(body, at);
      at = next;
      bucket += gap;
      held = units;
    }
    after -= held;
    const keep = room - after;
    if (keep >= 0 && held > 0) return (bucket + 1) * width - Math.floor((keep * width) / held) - oldest;
    if (inTail) return 0;
  }
}

const CHECK = checkLua(
  `${LUA_LOG}${luaScratch('segmentsOf', 'oldestOf')}`,
  `
  -- Stored at the key, a string: per tier a segment (see src/algorithms/precise-window.ts), after
  -- an optional block marker '!<until> '; expires when its newest unit has left every window (or
  -- when a longer block ends).
  local blockedUntil, body = readBlocked(readValue(key))
  local blocked = blockedUntil > now
  if blocked then dryRun = true end
  local saved = readSegments(body)
  local segments, oldest = segmentsOf, oldestOf
  local allowed = 1
  for i = 1, tiers do
    local segment = liveSegment(saved[i], windows[i], precision, now)
    oldest[i] = now - windows[i] + 1
    segments[i] = segment
    if weighted(segment, oldest[i]) + cost * segment.width > limits[i] * segment.width then allowed = 0 end
  end
  if blocked then allowed = 0 end
  if allowed == 1 and cost > 0 and not dryRun then
    local parts, lifetime = {}, 0
    for i = 1, tiers do
      local segment = count(segments[i], now, cost)
      segments[i] = segment
      parts[i] = encodeSegment(segment)
      lifetime = math.max(lifetime, windows[i] + segment.width)
    end
    local value = parts[1]
    if tiers > 1 then value = table.concat(parts) end
    writeValue(key, value, lifetime)
  end
  local blockedMs = 0
  if allowed == 0 then blockedMs = blockAfterDenial(key, now, blockedUntil, blockFor, dryRun, body, blockResets) end
  local reply = checkReply(allowed, now, blockedMs)
  for i = 1, tiers do
    local segment, limit = segments[i], limits[i]
    local numerator = weighted(segment, oldest[i])
    local remaining = remainingOf(numerator, segment.width, limit)
    local reset = 0
    if remaining < limit then reset = waitFor(segment, oldest[i], numerator, limit, remaining + 1) end
    pushTier(reply, numerator, segment.width, waitFor(segment, oldest[i], numerator, limit, cost), reset)
  end
  return reply
`,
);

function liveSegment(saved: Segment | undefined, window: number, precision: number, now: number): Segment {
  const width = widthOf(window, precision);
  const segment = rebucket(saved === undefined ? emptySegment(width) : { ...saved }, width);
  trim(segment, Math.floor((now - window + 1) / segment.width));
  if (segment.total === 0) segment.width = segment.finest;
  return segment;
}

function count(segment: Segment, now: number, units: number): Segment {
  add(segment, Math.floor(now / segment.width), units);
  let fitted = segment;
  while (fitted.stop - fitted.from > MAX_ENTRY_BYTES) fitted = moveTo(fitted, fitted.finest, 2 * fitted.width);
  return fitted;
}

/** How long a key lives after a write at `now`: until its newest unit has left every window. */
function lifetimeOf(segments: readonly Segment[], tiers: ScriptArgs['tiers']): number {
  let lifetime = 0;
  for (let i = 0; i < tiers.length; i++) lifetime = Math.max(lifetime, tiers[i].window + segments[i].width);
  return lifetime;
}

function check(state: string | undefined, args: ScriptArgs): MemoryResult<string> {
  const { now, cost, dryRun, tiers, precision } = args;
  const saved = readSegments(state);
  const segments = tiers.map(({ window }, i) => liveSegment(saved[i], window, precision, now));
  let allowed: 0 | 1 = 1;
  for (let i = 0; i < tiers.length; i++) {
    const { width } = segments[i];
    if (weighted(segments[i], now - tiers[i].window + 1) + cost * width > tiers[i].limit * width) allowed = 0;
  }
  let next = state;
  let expiresAt: number | undefined;
  if (allowed === 1 && cost > 0 && !dryRun) {
    for (let i = 0; i < tiers.length; i++) segments[i] = count(segments[i], now, cost);
    next = segments.map(encodeSegment).join('');
    expiresAt = now + lifetimeOf(segments, tiers);
  }
  const reply = checkReply(allowed, now, 0);
  for (let i = 0; i < tiers.length; i++) {
    const segment = segments[i];
    const { limit } = tiers[i];
    const oldest = now - tiers[i].window + 1;
    const numerator = weighted(segment, oldest);
    const remaining = remainingOf(numerator, segment.width, limit);
    const reset = remaining < limit ? waitFor(segment, oldest, numerator, limit, remaining + 1) : 0;
    pushTier(reply, numerator, segment.width, waitFor(segment, oldest, numerator, limit, cost), reset);
  }
  return { reply, state: next, expiresAt };
}

const SETTLE = counterSettleLua(
  LUA_LOG,
  `
-- Settles a check that counted cost units at countedAt to actualCost. Less: gives the difference
-- back, per tier, from the bucket that counted them while it is kept, never below 0. More: charges
-- the difference now, past the limit if need be, and the key lives at least as long as a counting
-- check makes it.
local readState = readSegments
local function giveBack(saved, units)
  local givenBack = 0
  for i = 1, tiers do
    local segment = saved[i]
    if segment and segment.finest == widthOf(windows[i], precision) and segment.total > 0 then
      local counted = math.floor(countedAt / segment.width)
      local back = 0
      if counted == segment.tail then
        back = math.min(units, segment.tailCount)
        segment.tailCount = segment.tailCount - back
      else
        local body, at, bucket = segment.body, segment.from, segment.base
        while at <= segment.stop do
          local gap, held, after = readEntry(body, at)
          bucket = bucket + gap
          if bucket > counted then break end
          if bucket == counted then
            back = math.min(units, held)
            segment.body = string.sub(body, segment.from, at - 1) .. entryOf(gap, held - back) .. string.sub(body, after, segment.stop)
            segment.from, segment.stop = 1, #segment.body
            break
          end
          at = after
        end
      end
      segment.total = segment.total - back
      givenBack = givenBack + back
    end
  end
  return givenBack
end
local function encodeState(saved)
  local parts = {}
  for i = 1, #saved do parts[i] = encodeSegment(saved[i]) end
  return table.concat(parts)
end
local function charge(saved, charged)
  local parts, lifetime = {}, 0
  for i = 1, tiers do
    local segment = count(liveSegment(saved[i], windows[i], precision, now), now, charged)
    parts[i] = encodeSegment(segment)
    lifetime = math.max(lifetime, windows[i] + segment.width)
  end
  return table.concat(parts), lifetime
end
`,
);

const settle = counterSettle<string>({
  giveBack(state, units, { countedAt, tiers, precision }) {
    const saved = readSegments(state);
    let givenBack = 0;
    for (let i = 0; i < tiers.length && i < saved.length; i++) {
      const segment = saved[i];
      if (segment.finest !== widthOf(tiers[i].window, precision) || segment.total === 0) continue;
      const counted = Math.floor(countedAt / segment.width);
      let back = 0;
      if (counted === segment.tail) {
        back = Math.min(units, segment.tailCount);
        segment.tailCount -= back;
      } else {
        const { body } = segment;
        let at = segment.from;
        let bucket = segment.base;
        while (at < segment.stop) {
          const [gap, held, after] = readEntry(body, at);
          bucket += gap;
          if (bucket > counted) break;
          if (bucket === counted) {
            back = Math.min(units, held);
            segment.body = body.slice(segment.from, at) + entryOf(gap, held - back) + body.slice(after, segment.stop);
            segment.from = 0;
            segment.stop = segment.body.length;
            break;
          }
          at = after;
        }
      }
      segment.total -= back;
      givenBack += back;
    }
    return { givenBack, next: saved.map(encodeSegment).join('') };
  },
  charge(state, charged, { now, tiers, precision }) {
    const saved = readSegments(state);
    const segments = tiers.map(({ window }, i) => count(liveSegment(saved[i], window, precision, now), now, charged));
    return { next: segments.map(encodeSegment).join(''), livesUntil: now + lifetimeOf(segments, tiers) };
  },
});

export const preciseWindow: AlgorithmScripts<PreciseWindowState> = defineAlgorithm(
  'precise-window',
  { check: CHECK, settle: SETTLE },
  { check, settle },
);
