/**
 * The script protocol: the one wire between this package's TypeScript and its Lua scripts.
 * Whatever writes a script's arguments or reads its reply takes the layout from here, on both
 * sides: the Lua that decodes the arguments and builds the reply is generated from the same
 * constants the TypeScript reads.
 *
 * - ARGV: the same named slots in every script (check, settle), each with one meaning.
 * - The reply of a check, and of a settle.
 * - The batch encoding: many checks in one script call.
 */
import type { Tier } from './tiers';

/** The ARGV slots of every script, 1-based as in Lua. Tiers follow, from {@link FIRST_TIER_SLOT}. */
export const ARGV_SLOT = {
  /** Epoch ms of an injected clock, or `''` to read Redis `TIME`. */
  now: 1,
  /** Units to count (a check), or that a settled check counted. */
  cost: 2,
  /** `'1'`: evaluate only, write nothing; `'0'`: write. */
  dryRun: 3,
  /** Milliseconds an identifier stays refused once a check denies it; `0` for no block. */
  blockFor: 4,
  /** Epoch ms at which a settled check counted its `cost`; `0` in a check. */
  countedAt: 5,
  /** What a settled check turned out to cost (`0` to give it all back); `0` in a check. */
  actualCost: 6,
  /** Most requests in progress per identifier, for a check that takes a lease; `0` for none. */
  concurrency: 7,
  /** How long a lease lives unless renewed (ms); `0` without a lease. */
  leaseMs: 8,
  /** The lease a check takes, or that a release or renewal names; `''` without a lease. */
  leaseId: 9,
  /** Buckets per window of the `precise-window` algorithm; the other algorithms ignore it. */
  precision: 10,
  /**
   * `'1'`: a block this check starts wipes the identifier's counts, so it starts afresh when the
   * block ends (`afterBlock: 'reset'`); `'0'`: the counts stay (`'keep'`).
   */
  blockResets: 11,
} as const;

/** The slot of the first tier's limit; each tier takes two slots, its limit and its window (ms). */
const FIRST_TIER_SLOT = 12;

/** The lease part of a call: a check that takes a slot, or the release or renewal of one. */
export interface LeaseCall {
  /** Most requests in progress for the identifier (a check); 0 for a release or renewal. */
  readonly concurrency: number;
  /** How long the lease lives from now unless renewed or released (ms). */
  readonly leaseMs: number;
  /** The lease's id, unique across processes. */
  readonly id: string;
}

/** What one script call carries, before encoding. */
export interface ScriptCall {
  /** Epoch ms from an injected clock; undefined reads the store's own (Redis `TIME`). */
  readonly now: number | undefined;
  readonly cost: number;
  readonly dryRun: boolean;
  /** Milliseconds of `blockFor`; 0 for none (settlements ignore it). */
  readonly blockFor: number;
  /** Whether a block this check starts wipes the identifier's counts (`afterBlock: 'reset'`); default false. */
  readonly blockResets?: boolean | undefined;
  /** When the check being settled counted its `cost`; 0 for a check. */
  readonly countedAt: number;
  /** What the check being settled turned out to cost; 0 for a check. */
  readonly actualCost: number;
  readonly tiers: readonly Tier[];
  /** Buckets per window of the `precise-window` algorithm (a positive integer); the other algorithms ignore it. */
  readonly precision: number;
  /** The lease a check takes (with `concurrency`), or that a release or renewal names; none otherwise. */
  readonly lease?: LeaseCall | undefined;
}

/** A call's ARGV, as {@link LUA_PROTOCOL}'s `readArgs` decodes it. */
export function scriptArgv(call: ScriptCall): (string | number)[] {
  const argv: (string | number)[] = new Array(FIRST_TIER_SLOT - 1 + 2 * call.tiers.length);
  argv[ARGV_SLOT.now - 1] = call.now === undefined ? '' : call.now;
  argv[ARGV_SLOT.cost - 1] = call.cost;
  argv[ARGV_SLOT.dryRun - 1] = call.dryRun ? '1' : '0';
  argv[ARGV_SLOT.blockFor - 1] = call.blockFor;
  argv[ARGV_SLOT.countedAt - 1] = call.countedAt;
  argv[ARGV_SLOT.actualCost - 1] = call.actualCost;
  argv[ARGV_SLOT.concurrency - 1] = call.lease?.concurrency ?? 0;
  argv[ARGV_SLOT.leaseMs - 1] = call.lease?.leaseMs ?? 0;
  argv[ARGV_SLOT.leaseId - 1] = call.lease?.id ?? '';
  argv[ARGV_SLOT.precision - 1] = call.precision;
  argv[ARGV_SLOT.blockResets - 1] = call.blockResets === true ? '1' : '0';
  for (let i = 0; i < call.tiers.length; i++) {
    argv[FIRST_TIER_SLOT - 1 + 2 * i] = call.tiers[i].limit;
    argv[FIRST_TIER_SLOT + 2 * i] = call.tiers[i].window;
  }
  return argv;
}

/**
 * Offsets (0-based) in the reply of a check script (a `RawReply`), produced identically by the Lua script and its TypeScript twin:
 * `[allowed (1 | 0), now (epoch ms), blockedMs, ...per tier: its numbers]`, each tier as the algorithm's
 * {@link TierLayout} says: by default `numerator, denominator, waitMs, resetMs` ({@link TIER_REPLY}),
 * which it computes; the sliding window's counts, from which {@link TierLayout.figures} computes them.
 *
 * - The estimate is a fraction (numerator / denominator) because Lua numbers reach the
 *   client truncated to integers. It includes this request's cost when the request was allowed.
 * - `blockedMs`: how long the identifier stays blocked (`blockFor`); 0 when it is not blocked.
 * - `waitMs`: how long a request of the same cost has to wait before this tier would allow it,
 *   assuming nothing else is counted meanwhile: 0 when it fits now.
 * - `resetMs`: how long until this tier makes more quota available (its remaining units grow by
 *   at least one), assuming nothing else is counted: 0 when nothing is counted in it.
 *
 * A settle script answers `[givenBack, charged]` (see {@link SETTLE_REPLY}).
 */
export const REPLY = { allowed: 0, now: 1, blockedMs: 2, firstTier: 3 } as const;

/** Offsets of one tier's numbers from its start in a check's reply, and how many it has. */
const TIER_REPLY = { numerator: 0, denominator: 1, waitMs: 2, resetMs: 3, size: 4 } as const;

/** A tier's figures, as {@link TIER_REPLY} lays them out. */
interface TierFigures {
  readonly numerator: number;
  readonly denominator: number;
  readonly waitMs: number;
  readonly resetMs: number;
}

/**
 * How a check's reply carries each tier. Most algorithms answer the four figures of
 * {@link TIER_REPLY} ({@link FIGURES_LAYOUT}). One whose figures follow from a few counts may answer
 * those counts instead, and compute the figures here in TypeScript: Redis then does less per check
 * (the sliding window's counts take 0.89 to 0.91 of the script's time in a batch, bench/NOTES.md).
 */
export interface TierLayout {
  /** Numbers per tier. */
  readonly size: number;
  /** The offsets, from a tier's start, that read 0 for an identifier with nothing counted. */
  readonly counts: readonly number[];
  /** The tier's figures, from its numbers at `at` in `reply`, for a check of `cost` at `now`. */
  figures(reply: readonly number[], at: number, tier: Tier, now: number, cost: number): TierFigures;
}

/** The layout of an algorithm whose script answers each tier's figures. */
export const FIGURES_LAYOUT: TierLayout = {
  size: TIER_REPLY.size,
  counts: [TIER_REPLY.numerator, TIER_REPLY.waitMs, TIER_REPLY.resetMs],
  figures: (reply, at) => ({
    numerator: Number(reply[at + TIER_REPLY.numerator]),
    denominator: Number(reply[at + TIER_REPLY.denominator]),
    waitMs: Number(reply[at + TIER_REPLY.waitMs]),
    resetMs: Number(reply[at + TIER_REPLY.resetMs]),
  }),
};

/**
 * Offsets, after the tiers, of what a check that takes a lease adds to its reply: the requests in
 * progress (this one included when it took its lease), and `1` when the concurrency bound refused
 * it (then nothing was counted and no lease taken).
 */
export const LEASE_REPLY = { inProgress: 0, refused: 1, size: 2 } as const;

/** Offset of a release's or renewal's one number: `1` when the lease was live and released or renewed, else `0`. */
export const LEASE_CHANGE_REPLY = { changed: 0 } as const;

/**
 * Offsets in a settle's reply: the units given back (summed over the tiers, or the log entries
 * removed) when the actual cost was lower, and the units charged (once, whatever the tiers) when higher.
 */
export const SETTLE_REPLY = { givenBack: 0, charged: 1 } as const;

/** The start of a check's reply, as the TypeScript twins build it; tiers are added with {@link pushTier}. */
export function checkReply(allowed: 0 | 1, now: number, blockedMs: number): number[] {
  const reply = new Array<number>(REPLY.firstTier);
  reply[REPLY.allowed] = allowed;
  reply[REPLY.now] = now;
  reply[REPLY.blockedMs] = blockedMs;
  return reply;
}

/** Appends one tier's numbers to a check's reply. */
export function pushTier(reply: number[], numerator: number, denominator: number, waitMs: number, resetMs: number): void {
  const at = reply.length;
  reply[at + TIER_REPLY.numerator] = numerator;
  reply[at + TIER_REPLY.denominator] = denominator;
  reply[at + TIER_REPLY.waitMs] = waitMs;
  reply[at + TIER_REPLY.resetMs] = resetMs;
}

/**
 * A check's reply as it reads for an identifier with nothing counted: each tier's `counts` of
 * `layout` 0 (with the figures layout: numerator, wait and reset; the denominator kept). The reply
 * of a check whose block wiped the counts.
 */
export function withNothingCounted(reply: readonly number[], layout: TierLayout): number[] {
  const cleared = [...reply];
  for (let at = REPLY.firstTier; at < cleared.length; at += layout.size) {
    for (const offset of layout.counts) cleared[at + offset] = 0;
  }
  return cleared;
}

/** The Lua twin of {@link withNothingCounted} for `layout`, in place: `nothingCounted(reply)`. */
export function luaNothingCounted(layout: TierLayout): string {
  const zeros = layout.counts.map((offset) => `    reply[at + ${offset + 1}] = 0`).join('\n');
  return `local function nothingCounted(reply)
  for at = ${REPLY.firstTier}, #reply - 1, ${layout.size} do
${zeros}
  end
end`;
}

/** Appends what a check that takes a lease adds to its reply. */
export function pushLease(reply: number[], inProgress: number, refused: 0 | 1): void {
  const at = reply.length;
  reply[at + LEASE_REPLY.inProgress] = inProgress;
  reply[at + LEASE_REPLY.refused] = refused;
}

/** A release's or renewal's reply. */
export function leaseChangeReply(changed: 0 | 1): number[] {
  const reply = new Array<number>(1);
  reply[LEASE_CHANGE_REPLY.changed] = changed;
  return reply;
}

/** A settle's reply. */
export function settleReply(givenBack: number, charged: number): number[] {
  const reply = new Array<number>(2);
  reply[SETTLE_REPLY.givenBack] = givenBack;
  reply[SETTLE_REPLY.charged] = charged;
  return reply;
}

/** The names of `fields` in the order of their offsets, for a Lua table constructor. */
function inOrder(fields: Readonly<Record<string, number>>, skip: string[] = []): string {
  return Object.entries(fields)
    .filter(([name]) => !skip.includes(name))
    .sort((a, b) => a[1] - b[1])
    .map(([name]) => name)
    .join(', ');
}

/** A Lua function `name(reply, ...fields)` that appends `fields` (their offsets from the reply's end) to `reply`. */
function luaPush(name: string, fields: Readonly<Record<string, number>>): string {
  const names = Object.keys(fields).filter((field) => field !== 'size');
  const sets = names.map((field) => `  reply[at + ${fields[field] + 1}] = ${field}`).join('\n');
  return `local function ${name}(reply, ${inOrder(fields, ['size'])})\n  local at = #reply\n${sets}\nend`;
}

/**
 * The Lua half of the protocol, part of every script: `readArgs(argv)` decodes one call's
 * arguments into the locals {@link LUA_ARGS} declares (`readLease` the lease slots), `checkReply`,
 * `pushTier` and `pushLease` build a check's reply, `settleReply` a settle's, `leaseChangeReply` a
 * release's or renewal's. The checks of a batch that share one argv table share what `readArgs`
 * decoded from it, its `limits` and `windows` tables included: script bodies only read them.
 *
 * Without an injected clock the script takes the time from Redis `TIME`, read once per script
 * run, so the checks of a batch are decided at one instant and app servers with skewed clocks
 * still agree; Redis 7 replicates a script's effects, not the script, so reading `TIME` before
 * writing is allowed.
 */
export const LUA_PROTOCOL = `
local timeOfRun
-- The last answer of readArgs and the argv table it read: the checks of a batch usually share one.
local lastArgv, lastArgs
-- A function library (Redis 7) keeps its top-level values from call to call: each call starts anew,
-- but for the memos below.
local function forgetArgs()
  timeOfRun, lastArgv, lastArgs = nil, nil, nil
end
-- A batch's per-key arguments, from their text: the last text and its fields, read-only (a library
-- keeps them between calls, whose arguments usually repeat).
local argsText, argsFields
local function fieldsOf(text)
  if text == argsText then return argsFields end
  local fields = {}
  for field in string.gmatch(text .. ',', '([^,]*),') do fields[#fields + 1] = field end
  argsText, argsFields = text, fields
  return fields
end
-- The string.format pattern of a reply of n numbers, '%d,%d,...,%d', by n.
local replyFormats = {}
local function replyFormat(n)
  local format = replyFormats[n]
  if not format then
    format = string.rep('%d,', n - 1) .. '%d'
    replyFormats[n] = format
  end
  return format
end
local function readArgs(argv)
  if argv == lastArgv then
    local a = lastArgs
    return a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12]
  end
  local now = tonumber(argv[${ARGV_SLOT.now}]) or timeOfRun
  if not now then
    local time = redis.call('TIME')
    now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    timeOfRun = now
  end
  local tiers = (#argv - ${FIRST_TIER_SLOT - 1}) / 2
  local limits, windows, longest = {}, {}, 0
  for i = 1, tiers do
    limits[i] = tonumber(argv[${FIRST_TIER_SLOT - 2} + 2 * i])
    windows[i] = tonumber(argv[${FIRST_TIER_SLOT - 1} + 2 * i])
    if windows[i] > longest then longest = windows[i] end
  end
  lastArgv = argv
  lastArgs = { now, tonumber(argv[${ARGV_SLOT.cost}]), argv[${ARGV_SLOT.dryRun}] == '1', tonumber(argv[${ARGV_SLOT.blockFor}]),
    tonumber(argv[${ARGV_SLOT.countedAt}]), tonumber(argv[${ARGV_SLOT.actualCost}]), tiers, limits, windows, longest,
    tonumber(argv[${ARGV_SLOT.precision}]), argv[${ARGV_SLOT.blockResets}] == '1' }
  local a = lastArgs
  return a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12]
end
-- Made with room for one tier (nil slots do not count in #reply): growing it per tier costs Lua a rehash.
local function checkReply(${inOrder(REPLY, ['firstTier'])})
  return { ${inOrder(REPLY, ['firstTier'])}${', nil'.repeat(TIER_REPLY.size)} }
end
${luaPush('pushTier', TIER_REPLY)}
local function settleReply(${inOrder(SETTLE_REPLY)})
  return { ${inOrder(SETTLE_REPLY)} }
end
local function readLease(argv)
  return tonumber(argv[${ARGV_SLOT.concurrency}]), tonumber(argv[${ARGV_SLOT.leaseMs}]), argv[${ARGV_SLOT.leaseId}]
end
${luaPush('pushLease', LEASE_REPLY)}
local function leaseChangeReply(${inOrder(LEASE_CHANGE_REPLY)})
  return { ${inOrder(LEASE_CHANGE_REPLY)} }
end
`;

/** The locals every script body reads, from `readArgs` of {@link LUA_PROTOCOL}. */
export const LUA_ARGS =
  'local now, cost, dryRun, blockFor, countedAt, actualCost, tiers, limits, windows, longest, precision, blockResets = readArgs(argv)';

/**
 * A batch call checks many keys in one script run. Its ARGV is the dry-run override (`'1'` makes
 * every check a dry run), then per key its arguments joined by commas, or those arguments once when
 * every key has the same (the usual batch: one cost, the limiter's tiers, Redis's clock). It answers,
 * per key, the reply's numbers joined by commas: one string each way per check is far cheaper for a
 * client to encode and decode than a dozen numbers (measured by bench/micro.ts).
 */
export const BATCH_SLOT = { dryRunOverride: 1, firstKeyArgs: 2 } as const;

/**
 * A node batch checks keys of several Cluster slots that one node serves, in one script run: the
 * keys cannot be declared (a call's declared keys must share a slot), so they travel in ARGV after
 * their count, and the script carries the `allow-cross-slot-keys` flag (Redis 7). Then, as in a
 * batch, per key its arguments or those arguments once. Each check runs protected: one whose key
 * the node does not serve (a stale slot map, a slot being migrated) touches nothing and answers
 * {@link FAILED_CHECK} and Redis's error, for the client to send it alone, redirections and all.
 */
export const NODE_BATCH_SLOT = { dryRunOverride: 1, keyCount: 2, firstKey: 3 } as const;

/** Starts the answer of a node batch's check that failed, before Redis's error message. */
export const FAILED_CHECK = '!';

/**
 * The loop of a batch script, over a `check(key, argv)` defined before it: `count` keys, key `k`
 * at `keyAt('k')`, and the per-key arguments from ARGV slot `argsBase + 1`. Each check runs with
 * `nextKey` (shared.ts) set to the key after it, so consecutive checks of one key write it once.
 */
function batchLoop(count: string, keyAt: (index: string) => string, argsBase: string, protectEach: boolean): string {
  const run = protectEach
    ? `  local ok, reply = pcall(check, key, argv)
  if not ok then
    replies[k] = '${FAILED_CHECK}' .. (type(reply) == 'table' and tostring(reply.err) or tostring(reply))
  else`
    : `  local reply = check(key, argv)
  do`;
  return `local replies = {}
local count = ${count}
local argsBase = ${argsBase}
local shared = #ARGV == argsBase + 1
local argv
nextKey = ${keyAt('1')}
for k = 1, count do
  local key = nextKey
  if heldKey ~= nil and heldKey ~= key then flushWrites() end
  if k < count then nextKey = ${keyAt('k + 1')} else nextKey = nil end
  if k == 1 or not shared then
    argv = fieldsOf(ARGV[argsBase + k])
    if ARGV[${BATCH_SLOT.dryRunOverride}] == '1' then
      argv = { unpack(argv) }
      argv[${ARGV_SLOT.dryRun}] = '1'
    end
  end
${run}
    -- One string.format per reply rather than one per number.
    replies[k] = string.format(replyFormat(#reply), unpack(reply))
  end
end
flushWrites()
return replies
`;
}

/** The Lua loop of a batch script (keys declared, of one slot), over a `check(key, argv)` defined before it. */
export const LUA_BATCH = batchLoop('#KEYS', (index) => `KEYS[${index}]`, String(BATCH_SLOT.firstKeyArgs - 1), false);

/** The first line of a node batch script: Redis reads its flags there. */
export const LUA_NODE_BATCH_FLAGS = '#!lua flags=allow-cross-slot-keys\n';

/** The Lua loop of a node batch script (see {@link NODE_BATCH_SLOT}), over a `check(key, argv)` defined before it. */
export const LUA_NODE_BATCH = batchLoop(
  `tonumber(ARGV[${NODE_BATCH_SLOT.keyCount}])`,
  (index) => `ARGV[${NODE_BATCH_SLOT.firstKey - 1} + ${index}]`,
  `${NODE_BATCH_SLOT.firstKey - 1} + count`,
  true,
);

/**
 * The ARGV of a batch of checks: `perKey[i]` is key i's arguments; when every key holds the
 * very same array, it is sent once. With `keys`, the ARGV of a node batch on those keys.
 */
export function batchArgv(perKey: readonly (readonly (string | number)[])[], keys?: readonly string[]): string[] {
  const first = perKey[0];
  let shared = true;
  for (let i = 1; i < perKey.length && shared; i++) shared = perKey[i] === first;
  const argsBase = keys === undefined ? BATCH_SLOT.firstKeyArgs - 1 : NODE_BATCH_SLOT.firstKey - 1 + keys.length;
  const argv: string[] = new Array(argsBase + (shared ? 1 : perKey.length));
  argv[BATCH_SLOT.dryRunOverride - 1] = '0';
  if (keys !== undefined) {
    argv[NODE_BATCH_SLOT.keyCount - 1] = String(keys.length);
    for (let i = 0; i < keys.length; i++) argv[NODE_BATCH_SLOT.firstKey - 1 + i] = keys[i];
  }
  if (shared) argv[argsBase] = first.join(',');
  else for (let i = 0; i < perKey.length; i++) argv[argsBase + i] = perKey[i].join(',');
  return argv;
}

const COMMA = 44;
const MINUS = 45;
const ZERO = 48;

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

/**
 * Where the dry-run flag of a script call sits among the arguments of its `EVALSHA`
 * (`sha, numberOfKeys, ...keys, ...argv`), 0-based: the single-call flag, or a batch's override.
 */
export function dryRunArgIndex(numberOfKeys: number, batch: boolean): number {
  return 1 + numberOfKeys + (batch ? BATCH_SLOT.dryRunOverride : ARGV_SLOT.dryRun);
}
