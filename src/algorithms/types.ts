/** One limit of a limiter: at most `limit` units of cost per `window` milliseconds. */
export interface Tier {
  readonly limit: number;
  readonly window: number;
}

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

/** What one check asks of an algorithm. */
export interface CheckArgs {
  readonly now: number;
  readonly cost: number;
  /** When true, evaluate only: nothing is counted or trimmed. */
  readonly dryRun: boolean;
  readonly tiers: readonly Tier[];
}

/** The in-memory twin's result: the reply, and the state to keep (undefined: delete it). */
export interface MemoryResult<State> {
  readonly reply: RawReply;
  readonly state: State | undefined;
  /** Epoch ms after which the state may be dropped, like the Redis key's expiry. */
  readonly expiresAt: number;
}

/**
 * A rate-limiting algorithm: both halves side by side, so they cannot drift apart.
 *
 * The Lua script takes `KEYS[1]` = the identifier's key and
 * `ARGV = [now ms or '' for Redis TIME, cost, dryRun '1' | '0', limit1, window1, limit2, window2, ...]`
 * and returns a {@link RawReply}.
 */
export interface Algorithm<State = unknown> {
  readonly name: AlgorithmName;
  readonly lua: string;
  /** Pure TypeScript twin of `lua`, run by the MemoryStore. Must not mutate `state`. */
  apply(state: State | undefined, args: CheckArgs): MemoryResult<State>;
}
