/**
 * The public types of the core: what a limiter is given, and what it answers. The HTTP
 * options, the store interface and the algorithms' own types live with their code.
 */
import type { AlgorithmName } from '../algorithms/types';
import type { MetricsOption } from '../metrics';
import type { Store } from '../stores/types';
import type { Tier, TierOptions } from '../tiers';
import type { Duration } from '../validate';
import type { BreakerOptions } from './breaker';

/** What is left of an identifier's counts when its `blockFor` block ends: `'keep'` them, or `'reset'` to a whole quota. */
export type AfterBlock = 'keep' | 'reset';

/** Options of {@link createLimiter}. */
export interface LimiterOptions {
  /** Where counts are kept: a `RedisStore`, or a `MemoryStore` (the default: a new one per limiter). */
  store?: Store | undefined;
  /**
   * Most units of cost allowed per `window`: a non-negative integer. Default `100`. `0` refuses
   * every request with a cost, without asking the store. Use either `limit`/`window` or `limits`.
   */
  limit?: number | undefined;
  /** Window length: milliseconds or a string such as `'1s'`, `'1m'`, `'1h'`, `'1d'`. Default `'1m'`. */
  window?: Duration | undefined;
  /**
   * Several limits enforced together, e.g. `[{ limit: 10, window: '1s' }, { limit: 1000, window: '1h' }]`.
   * All are checked and counted in one atomic step: a request denied by any tier is counted by none.
   */
  limits?: readonly TierOptions[] | undefined;
  /**
   * `'sliding-window'` (default): the sliding window counter, two counters per tier; close to exact
   * below the limit, wrong on about one request in seven at a limit kept fully used.
   * `'precise-window'`: a sliding window over units kept per bucket (see `precision`): near exact
   * at a counter's cost in memory and Redis time; for billing, small limits, and any limit whose
   * decisions near the limit matter.
   * `'fixed-window'`: one counter per window, cheapest, but lets up to twice the limit through around
   * a window boundary. `'sliding-log'`: exact, one entry per counted unit, memory growing with the limit.
   * `'token-bucket'`: a bucket of `limit` tokens refilled over `window`, for smooth rates with bursts.
   */
  algorithm?: AlgorithmName | undefined;
  /**
   * For `algorithm: 'precise-window'` only: buckets per window, a positive integer. Each bucket is
   * `window / precision` ms wide (at least 1 ms), so a `precision` at least the window in ms is an
   * exact sliding log. A tier keeps at most `precision + 1` buckets. Default `6000` (10 ms buckets
   * for a one-minute window).
   */
  precision?: number | undefined;
  /** Prefix of every key this limiter writes: `${prefix}:${identifier}`. Default `'rl'`. Give each limiter its own. */
  prefix?: string | undefined;
  /**
   * A clock returning epoch milliseconds, for tests. Without it the Redis script reads the
   * time from Redis itself (`TIME`), so app servers with skewed clocks agree.
   */
  clock?: (() => number) | undefined;
  /** Longest wait for the store, in milliseconds, before a check fails with a `RateLimitTimeoutError`. Default `500`. */
  timeoutMs?: number | undefined;
  /**
   * Size of the local deny cache: identifiers that were denied are answered from this
   * process, without a store round trip, until the moment they can be allowed again.
   * Exact, because a denied identifier's estimate can only fall with time. `0` turns it off. Default `10_000`.
   */
  denyCacheSize?: number | undefined;
  /**
   * A penalty: once an identifier is denied, refuse it for this long from that denial, whatever
   * its counts say (milliseconds or a duration string). The block is kept in the identifier's own
   * key by the script that denied, so every process sharing the store refuses it at once, and it
   * survives restarts; `reset()` lifts it. Default: no block.
   */
  blockFor?: Duration | undefined;
  /**
   * What is left when a `blockFor` block ends. `'keep'` (default): the counts from before the
   * block still count, so a client still over the limit is refused again (and blocked again).
   * `'reset'`: the identifier starts afresh with its whole quota, as @nestjs/throttler's own
   * storage and rate-limiter-flexible's `blockDuration` do; the denial that starts the block
   * forgets the counts, and its `retryAfterMs` is the block's length. Takes effect with `blockFor` only.
   */
  afterBlock?: AfterBlock | undefined;
  /**
   * Shadow mode: check and count every request exactly as if the limit were enforced, but mark
   * every decision `shadow: true`; the HTTP adapters then never refuse a request (and send no
   * rate-limit headers unless `headers` is set). For watching a new limit before enforcing it.
   * Default `false`.
   */
  shadow?: boolean | undefined;
  /**
   * Most requests in progress at once per identifier, across every process sharing the store: a
   * check that is allowed takes a lease (`decision.lease`), to be released when the request is over
   * (the HTTP adapters release it when the response is over). Decided with the rate tiers in one
   * atomic step: a request this bound refuses counts in no tier, and a request a tier refuses takes
   * no lease. Given without `limit`, `window` or `limits`, the limiter bounds requests in progress
   * only. Its keys are then `{<prefix>:<identifier>}` and `{<prefix>:<identifier>}:leases`, one
   * Cluster slot. Default: no bound.
   */
  concurrency?: number | undefined;
  /**
   * How long a lease lives unless renewed or released (milliseconds or a duration string): a slot
   * held by a process that died comes back after this. The HTTP adapters renew the lease of a
   * request still in progress every `leaseMs / 2`. Default `'60s'`.
   */
  leaseMs?: Duration | undefined;
  /**
   * Records OpenTelemetry metrics of this limiter's checks: an `@opentelemetry/api` MeterProvider
   * (its meter named `ratewarden` is used) or a Meter. Three instruments: `ratewarden.decisions`
   * (a counter, by `ratewarden.prefix` and `ratewarden.outcome`: `allowed`, `denied`,
   * `cached_denial`, `shadow_denial`, `error`), `ratewarden.store.duration` (a histogram of store
   * calls, in seconds) and `ratewarden.store.errors` (a counter of store failures and timeouts, by
   * `error.type`). No identifier, URL or other unbounded value becomes an attribute. Default: no
   * metrics, and nothing recorded.
   */
  metrics?: MetricsOption | undefined;
  /**
   * The circuit breaker of store calls: after `failures` consecutive store timeouts, checks fail at once with a `CircuitOpenError` (`SWL_CIRCUIT_OPEN`) instead of each
   * waiting up to `timeoutMs`, for `openMs`; then one check goes through as a probe: its success
   * closes the breaker, its failure opens it again for twice as long, up to `maxOpenMs`. The HTTP
   * adapters answer a refused check by `failMode`. `false` turns it off. Default
   * `{ failures: 5, openMs: 500, maxOpenMs: 5000 }` for stores that need a timeout, such as a
   * `RedisStore`; off by default on a Redis Cluster, where one breaker would refuse every node's
   * checks for one dead node.
   */
  breaker?: BreakerOptions | false | undefined;
}

/** Options of one {@link Limiter.check} or {@link Limiter.peek}. */
export interface CheckOptions {
  /** Units this request consumes: an integer from 0 to the smallest limit. Default `1`. */
  cost?: number | undefined;
  /**
   * This call's limit, e.g. from the caller's plan. With a one-tier limiter it replaces that
   * tier's limit (and `window` its window); with several tiers give both, or `limits`.
   * Counts belong to the identifier, not to the limit: a new limit applies to what was already counted.
   */
  limit?: number | undefined;
  /** This call's window (see `limit`). */
  window?: Duration | undefined;
  /** This call's tiers, replacing the limiter's. Tiers are matched to what is stored by position (see docs/algorithms.md). */
  limits?: readonly TierOptions[] | undefined;
  /** This call's bound on requests in progress, replacing the limiter's; only on a limiter with `concurrency`. */
  concurrency?: number | undefined;
}

/** Options of {@link Limiter.wait}: a check's options, and how long to wait at most. */
export interface WaitOptions extends CheckOptions {
  /**
   * The longest wait, in milliseconds from the call: once the known wait goes past it, the call
   * rejects at once with a `WaitExceededError` (`SWL_WAIT_EXCEEDED`) instead of sleeping. Default:
   * no bound.
   */
  maxWaitMs?: number | undefined;
  /** Aborts the wait: the call rejects with the signal's reason, and leaves no timer behind. */
  signal?: AbortSignal | undefined;
}

/** A request in progress under a `concurrency` bound: the slot it holds, until released or expired. */
export interface Lease {
  /** The lease's id, unique across processes. */
  readonly id: string;
  /**
   * Gives the slot back. Resolves `true` when the lease was still held, `false` when it was gone
   * already (released before, or expired): releasing twice, or after expiry, changes nothing.
   */
  release(): Promise<boolean>;
  /**
   * Extends the lease to `leaseMs` from now (never shortens it), for a request that outlives its
   * lease. Resolves `false` when the lease was gone already: its slot may have been taken since.
   */
  renew(): Promise<boolean>;
}

/** The bound on requests in progress, as a check saw it. */
export interface ConcurrencyDecision {
  /** Most requests in progress at once. */
  readonly limit: number;
  /** Requests in progress for the identifier, this one included when it took a lease. */
  readonly inProgress: number;
  /** True when this bound refused the request (it then counted in no rate tier). */
  readonly refused: boolean;
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
  /** Milliseconds until this tier would allow a request of the same cost; `0` when it does now. */
  readonly retryAfterMs: number;
  /**
   * Epoch ms at which this tier next makes quota available (`remaining` grows by at least one),
   * assuming nothing else is counted; `now` when nothing is counted in it. As in the IETF
   * RateLimit draft's reset parameter, this is not the moment the whole quota is back.
   */
  readonly resetAt: number;
}

/** The outcome of a check. The top-level figures are those of the binding (most restrictive) tier. */
export interface Decision {
  /** Whether the request was allowed (and, unless it was a peek or cost 0, counted). */
  readonly allowed: boolean;
  /**
   * The identifier the request counted against (or would have): what `limiter.reset()` and
   * `limiter.refund()` take for it, e.g. `'ip:203.0.113.7'`.
   */
  readonly identifier: string;
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
   * Epoch ms at which the binding tier next makes quota available (its `remaining` grows),
   * assuming nothing else is counted: the reset of the IETF RateLimit draft. Never later than
   * `now + retryAfterMs` on a denial; `now` when nothing is counted.
   */
  readonly resetAt: number;
  /**
   * Milliseconds until this request would be allowed; `0` when allowed. Exact. `Infinity` when
   * its cost is above the smallest limit: such a request can never be allowed (the HTTP adapters
   * then send no `Retry-After`).
   */
  readonly retryAfterMs: number;
  /**
   * Index into `tiers` of the binding tier: the one that keeps the client waiting longest, then the
   * one with least left. `-1` on a limiter with `concurrency` and no rate tiers: the top-level
   * figures then describe the bound on requests in progress.
   */
  readonly tier: number;
  /** Every tier's view, in the order the tiers were given. */
  readonly tiers: readonly TierDecision[];
  /** The time of the decision (epoch ms), from the store's clock or the injected one. */
  readonly now: number;
  /** The cost that was checked. */
  readonly cost: number;
  /** True when this check counted its cost (allowed, a cost above 0, not a peek): what {@link Limiter.refund} takes back and {@link Limiter.settle} settles from. */
  readonly counted: boolean;
  /**
   * True while the identifier is blocked (`blockFor`), including on the denial that started the
   * block: `retryAfterMs` is then the exact time left on the block, and every tier reports no quota
   * until it ends.
   */
  readonly blocked: boolean;
  /** True when the limiter runs in shadow mode: the decision is reported, not enforced. */
  readonly shadow: boolean;
  /** True when the answer came from the local deny cache rather than the store. */
  readonly cached: boolean;
  /**
   * The bound on requests in progress, on a limiter with `concurrency`. A request it refuses has
   * `retryAfterMs` `Infinity`: no wait is known, it depends on requests ending. On a denial from
   * the deny cache (`cached`), the figures are those the store reported when it denied.
   */
  readonly concurrency?: ConcurrencyDecision | undefined;
  /** The slot an allowed check took, on a limiter with `concurrency` (not for a peek): release it when the request is over. */
  readonly lease?: Lease | undefined;
}

/** A configured rate limiter. Create with {@link createLimiter}. */
export interface Limiter {
  /** Checks and, when allowed, counts a request of `cost` (default 1) for `identifier`. */
  check(identifier: string, options?: CheckOptions): Promise<Decision>;
  /** Tells what a request of `cost` would get now, counting nothing. */
  peek(identifier: string, options?: CheckOptions): Promise<Decision>;
  /**
   * Takes back what `decision` (a check of `identifier`) counted, from the window it was counted
   * in, never below zero: for requests that should not count after all (see
   * `skipFailedRequests`). A decision that counted nothing is ignored.
   */
  refund(identifier: string, decision: Decision): Promise<void>;
  /**
   * Settles `decision` (a check of `identifier`) to what the request turned out to cost, once its
   * cost is known (tokens used, rows exported): when `actualCost` is lower than what the check
   * counted, the difference is given back to the windows it was counted in (as `refund` does,
   * which is `settle(identifier, decision, 0)`); when higher, the difference is charged now, past
   * the limit if need be, so the identifier's next requests wait exactly until that debt has
   * decayed. A check that counted nothing (a denial, a peek, cost 0) is settled from zero: the whole
   * `actualCost` is charged. A charge never starts a block (`blockFor`); the next denial does.
   * Settle each decision once.
   */
  settle(identifier: string, decision: Decision, actualCost: number): Promise<void>;
  /**
   * Waits for quota instead of being refused: resolves with the allowed (and counted) decision as
   * soon as a check passes, sleeping exactly each denial's `retryAfterMs` in between, never polling.
   * Rejects at once, without sleeping, with a `WaitExceededError` (`SWL_WAIT_EXCEEDED`) when the
   * known wait goes past `maxWaitMs` or no wait is known (a cost above the limit, requests in
   * progress at their bound), and with the signal's reason when `signal` aborts. The waiters of one
   * identifier in one process go first in, first out, and only the first of them checks the store.
   * For outbound calls to a shared, rate-limited API; sleeps in real time, whatever `clock` says.
   */
  wait(identifier: string, options?: WaitOptions): Promise<Decision>;
  /** Forgets everything counted for `identifier`. */
  reset(identifier: string): Promise<void>;
  /** The store key used for `identifier`. */
  keyFor(identifier: string): string;
  readonly store: Store;
  readonly algorithm: AlgorithmName;
  /** Buckets per window of `'precise-window'` (the `precision` option, or its default); the other algorithms ignore it. */
  readonly precision: number;
  readonly tiers: readonly Tier[];
  readonly prefix: string;
  readonly timeoutMs: number;
  /** Milliseconds of `blockFor`; 0 for none. */
  readonly blockFor: number;
  /** What is left when a block ends: `'keep'` the counts, or `'reset'` them. */
  readonly afterBlock: AfterBlock;
  readonly shadow: boolean;
  /** Most requests in progress per identifier; 0 for no bound. */
  readonly concurrency: number;
}
