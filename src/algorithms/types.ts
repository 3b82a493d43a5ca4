/** One limit of a limiter: at most `limit` units of cost per `window` milliseconds. */
export interface Tier {
  readonly limit: number;
  readonly window: number;
}

/** The name of a rate-limiting algorithm, as given in the `algorithm` option. */
export type AlgorithmName = 'sliding-window' | 'fixed-window' | 'sliding-log';

/**
 * The answer of one check, produced identically by an algorithm's Lua script and by
 * its TypeScript twin:
 *
 * `[allowed (1 | 0), now (epoch ms), ...per tier: estimateNumerator, estimateDenominator, waitMs]`
 *
 * The estimate is a fraction (numerator / denominator) because Lua numbers reach the
 * client truncated to integers. It includes this request's cost when the request was
 * allowed. `waitMs` is how long a request of the same cost has to wait before this
 * tier would allow it, assuming nothing else is counted meanwhile: 0 when it fits now.
 */
export type RawReply = readonly number[];

/** What one check asks of a script. */
export interface CheckArgs {
  readonly now: number;
  readonly cost: number;
  /** When true, evaluate only: nothing is counted or trimmed. */
  readonly dryRun: boolean;
  readonly tiers: readonly Tier[];
}

/** The TypeScript twin's result: the reply, and the state to keep (undefined: delete it). */
export interface MemoryResult<State> {
  readonly reply: RawReply;
  readonly state: State | undefined;
  /** Epoch ms after which the state may be dropped, like the Redis key's expiry. */
  readonly expiresAt: number;
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

/** The scripts of one algorithm. */
export interface AlgorithmScripts<State = unknown> {
  readonly algorithm: AlgorithmName;
  readonly check: Script<CheckArgs, State>;
}
