/** One limit of a limiter: at most `limit` units of cost per `window` milliseconds. */
export interface Tier {
  readonly limit: number;
  readonly window: number;
}

/** The name of a rate-limiting algorithm, as given in the `algorithm` option. */
export type AlgorithmName = 'sliding-window' | 'fixed-window' | 'sliding-log' | 'token-bucket';

/**
 * The answer of a check script, produced identically by the Lua script and its TypeScript twin:
 *
 * `[allowed (1 | 0), now (epoch ms), blockedMs, ...per tier: estimateNumerator, estimateDenominator, waitMs, resetMs]`
 *
 * - The estimate is a fraction (numerator / denominator) because Lua numbers reach the
 *   client truncated to integers. It includes this request's cost when the request was allowed.
 * - `blockedMs`: how long the identifier stays blocked (`blockFor`); 0 when it is not blocked.
 * - `waitMs`: how long a request of the same cost has to wait before this tier would allow it,
 *   assuming nothing else is counted meanwhile: 0 when it fits now.
 * - `resetMs`: how long until this tier makes more quota available (its remaining units grow by
 *   at least one), assuming nothing else is counted: 0 when nothing is counted in it.
 *
 * A refund script answers `[units taken back]` (the sum over the tiers, or the log entries removed).
 */
export type RawReply = readonly number[];

/** What every script is given. */
export interface ScriptArgs {
  readonly now: number;
  readonly cost: number;
  /** When true, evaluate only: nothing is written. */
  readonly dryRun: boolean;
  readonly tiers: readonly Tier[];
}

/** What one check asks of a script. */
export interface CheckArgs extends ScriptArgs {
  /** Milliseconds an identifier stays refused once denied; 0 for no block. */
  readonly blockFor: number;
}

/** What one refund asks of a script: take back `cost`, counted at `countedAt` with `tiers`. */
export interface RefundArgs extends ScriptArgs {
  readonly countedAt: number;
}

/** The TypeScript twin's result: the reply, and the state to keep (undefined: delete it). */
export interface MemoryResult<State> {
  readonly reply: RawReply;
  readonly state: State | undefined;
  /** Epoch ms after which the state may be dropped, like the Redis key's expiry; undefined keeps the current expiry. */
  readonly expiresAt: number | undefined;
  /** The state must live at least until then (a block): the expiry is raised to it when lower. */
  readonly minExpiresAt?: number;
}

/**
 * One atomic step on one identifier's key, written twice side by side so the halves cannot
 * drift apart: `lua` for Redis, `apply` (its pure TypeScript twin) for the MemoryStore. The
 * differential test holds them to identical replies and identical stored state.
 */
export interface Script<Args, State = unknown> {
  /** Takes `KEYS[1]` (the identifier's key) and the ARGV documented in `prelude.ts`; returns a {@link RawReply}. */
  readonly lua: string;
  /** Must not mutate `state`. */
  apply(state: State | undefined, args: Args): MemoryResult<State>;
}

/** A check script, with the same check for many keys in one call (see `checkLua` in `prelude.ts`). */
export interface CheckScript<State = unknown> extends Script<CheckArgs, State> {
  /** Checks every key of `KEYS` in one call; answers one {@link RawReply} per key. */
  readonly batchLua: string;
}

/** The scripts of one algorithm. */
export interface AlgorithmScripts<State = unknown> {
  readonly algorithm: AlgorithmName;
  readonly check: CheckScript<State>;
  readonly refund: Script<RefundArgs, State>;
}
