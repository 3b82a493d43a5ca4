/**
 * The public types of the core: what a limiter is given, and what it answers. The HTTP
 * options, the store interface and the algorithms' own types live with their code.
 */
import type { AlgorithmName, Tier } from './algorithms/types';
import type { Store } from './stores/types';

/** A duration in milliseconds, or a string such as `'500ms'`, `'1s'`, `'1m'`, `'1h'`, `'1d'`, `'1.5h'`. */
export type Duration = number | string;

/** One limit among several (see {@link LimiterOptions.limits}). */
export interface TierOptions {
  /** Most units of cost allowed per window: a positive integer. */
  limit: number;
  /** Window length: milliseconds, or a string such as `'1s'`, `'1m'`, `'1h'`, `'1d'`. Default `'1m'`. */
  window?: Duration;
}

/** Options of {@link createLimiter}. */
export interface LimiterOptions {
  /** Where counts are kept: a `RedisStore`, or a `MemoryStore` (the default: a new one per limiter). */
  store?: Store;
  /** Most units of cost allowed per `window`: a positive integer. Default `100`. Use either `limit`/`window` or `limits`. */
  limit?: number;
  /** Window length: milliseconds or a string such as `'1s'`, `'1m'`, `'1h'`, `'1d'`. Default `'1m'`. */
  window?: Duration;
  /**
   * Several limits enforced together, e.g. `[{ limit: 10, window: '1s' }, { limit: 1000, window: '1h' }]`.
   * All are checked and counted in one atomic step: a request denied by any tier is counted by none.
   */
  limits?: readonly TierOptions[];
  /**
   * `'sliding-window'` (default): the sliding window counter, two counters per tier, close to exact.
   * `'fixed-window'`: one counter per window, cheapest, but lets up to twice the limit through around
   * a window boundary. `'sliding-log'`: exact, one entry per counted unit; for billing or very small limits.
   */
  algorithm?: AlgorithmName;
  /** Prefix of every key this limiter writes: `${prefix}:${identifier}`. Default `'rl'`. Give each limiter its own. */
  prefix?: string;
  /**
   * A clock returning epoch milliseconds, for tests. Without it the Redis script reads the
   * time from Redis itself (`TIME`), so app servers with skewed clocks agree.
   */
  clock?: () => number;
  /** Longest wait for the store, in milliseconds, before a check fails with a `RateLimitTimeoutError`. Default `500`. */
  timeoutMs?: number;
  /**
   * Size of the local deny cache: identifiers that were denied are answered from this
   * process, without a store round trip, until the moment they can be allowed again.
   * Exact, because a denied identifier's estimate can only fall with time. `0` turns it off. Default `10_000`.
   */
  denyCacheSize?: number;
}

/** Options of one {@link Limiter.check} or {@link Limiter.peek}. */
export interface CheckOptions {
  /** Units this request consumes: an integer from 0 to the smallest limit. Default `1`. */
  cost?: number;
}

/** How one tier judged a request. */
export interface TierDecision {
  readonly limit: number;
  /** Window length in milliseconds. */
  readonly window: number;
  /** The estimated count in the window, including this request when it was allowed. */
  readonly estimated: number;
  /** `max(0, floor(limit - estimated))`. */
  readonly remaining: number;
  /** Epoch ms at which a request of the same cost first fits in this tier (now, when it already fits). */
  readonly resetAt: number;
}

/** The outcome of a check. The top-level figures are those of the binding (most restrictive) tier. */
export interface Decision {
  readonly allowed: boolean;
  readonly limit: number;
  /** Window length of the binding tier, in milliseconds. */
  readonly window: number;
  /** Units left after this request: `max(0, floor(limit - estimated))`. */
  readonly remaining: number;
  /** The estimated count, including this request when it was allowed. */
  readonly estimated: number;
  /** `estimated / limit`: around 1 is where an approximating algorithm can be wrong. */
  readonly ratio: number;
  /**
   * Epoch ms at which a request of the same cost is first allowed: when denied, exactly
   * `now + retryAfterMs`; when allowed, `now` if another such request still fits, else the
   * moment it would.
   */
  readonly resetAt: number;
  /** Milliseconds until this request would be allowed; `0` when allowed. */
  readonly retryAfterMs: number;
  /** Index into `tiers` of the binding tier. */
  readonly tier: number;
  /** Every tier's view, in the order the tiers were given. */
  readonly tiers: readonly TierDecision[];
  /** The time of the decision (epoch ms), from the store's clock or the injected one. */
  readonly now: number;
  /** The cost that was checked. */
  readonly cost: number;
  /** True when the answer came from the local deny cache rather than the store. */
  readonly cached: boolean;
}

/** A configured rate limiter. Create with {@link createLimiter}. */
export interface Limiter {
  /** Checks and, when allowed, counts a request of `cost` (default 1) for `identifier`. */
  check(identifier: string, options?: CheckOptions): Promise<Decision>;
  /** Tells what a request of `cost` would get now, counting nothing. */
  peek(identifier: string, options?: CheckOptions): Promise<Decision>;
  /** Forgets everything counted for `identifier`. */
  reset(identifier: string): Promise<void>;
  /** The store key used for `identifier`. */
  keyFor(identifier: string): string;
  readonly store: Store;
  readonly algorithm: AlgorithmName;
  readonly tiers: readonly Tier[];
  readonly prefix: string;
  readonly timeoutMs: number;
}
