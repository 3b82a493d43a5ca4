import { createHash } from 'node:crypto';
import { algorithms } from './algorithms';
import type { Algorithm, AlgorithmName, RawReply, Tier } from './algorithms/types';
import { DenyCache } from './deny-cache';
import {
  type Duration,
  describe,
  nonNegativeInteger,
  oneOf,
  optionalFunction,
  parseDuration,
  positiveInteger,
  rejectUnknownKeys,
} from './options';
import { MemoryStore } from './stores/memory';
import type { Store } from './stores/types';

/** One limit among several (see {@link LimiterOptions.limits}). */
export interface TierOptions {
  /** Most units of cost allowed per window: a positive integer. */
  limit: number;
  /** Window length: milliseconds, or a string such as `'1s'`, `'1m'`, `'1h'`, `'1d'`. */
  window: Duration;
}

/** Options of {@link createLimiter}. */
export interface LimiterOptions {
  /** Where counts are kept: a `RedisStore`, or a `MemoryStore` (the default: a new one per limiter). */
  store?: Store;
  /** Most units of cost allowed per `window`: a positive integer. Use either `limit`/`window` or `limits`. */
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
  /** Longest wait for the store, in milliseconds, before a check fails with a {@link RateLimitTimeoutError}. Default `500`. */
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

/** The store did not answer within `timeoutMs`. */
export class RateLimitTimeoutError extends Error {
  override readonly name = 'RateLimitTimeoutError';
}

/** Keys of {@link LimiterOptions}, for the unknown-key check (adapters extend it). */
export const LIMITER_OPTIONS: ReadonlySet<string> = new Set([
  'store',
  'limit',
  'window',
  'limits',
  'algorithm',
  'prefix',
  'clock',
  'timeoutMs',
  'denyCacheSize',
]);
const TIER_OPTIONS = new Set(['limit', 'window']);
const ALGORITHMS: readonly AlgorithmName[] = ['sliding-window', 'fixed-window', 'sliding-log'];
/** Identifiers longer than this are replaced by their hash, so keys stay short. */
const MAX_IDENTIFIER_LENGTH = 128;
/** A surrogate outside a pair: encoded as UTF-8 for Redis it becomes U+FFFD, so distinct identifiers would share a key. */
const LONE_SURROGATE = /\p{Surrogate}/u;

/** Validates and resolves the tiers: `limits`, or `limit` with `window`. */
export function resolveTiers(options: Pick<LimiterOptions, 'limit' | 'window' | 'limits'>): Tier[] {
  if (options.limits !== undefined) {
    if (options.limit !== undefined || options.window !== undefined) {
      throw new TypeError('limits: give either limits or limit/window, not both');
    }
    if (!Array.isArray(options.limits) || options.limits.length === 0) {
      throw new TypeError(`limits: must be a non-empty array of { limit, window }, got ${describe(options.limits)}`);
    }
    return options.limits.map((tier, i) => {
      if (tier === null || typeof tier !== 'object') throw new TypeError(`limits[${i}]: must be an object { limit, window }`);
      rejectUnknownKeys(tier, TIER_OPTIONS, `limits[${i}]`);
      return makeTier(tier.limit, tier.window === undefined ? '1m' : tier.window, `limits[${i}].`);
    });
  }
  return [makeTier(options.limit === undefined ? 100 : options.limit, options.window === undefined ? '1m' : options.window, '')];
}

/** The smallest limit among `tiers`: no single request may cost more. */
export function smallestLimit(tiers: readonly Tier[]): number {
  return Math.min(...tiers.map((tier) => tier.limit));
}

/** Returns `cost` if it is an integer from 0 to `smallest`, else throws a `TypeError` naming `cost`. */
export function validateCost(cost: unknown, smallest: number): number {
  if (typeof cost !== 'number' || !Number.isInteger(cost) || cost < 0 || cost > smallest) {
    throw new TypeError(`cost: must be an integer from 0 to ${smallest} (the smallest limit), got ${describe(cost)}`);
  }
  return cost;
}

function makeTier(limitOption: unknown, windowOption: unknown, path: string): Tier {
  const limit = positiveInteger(limitOption, `${path}limit`);
  const window = parseDuration(windowOption, `${path}window`);
  // Scripts compare limit * window exactly in double precision.
  if (limit * window > Number.MAX_SAFE_INTEGER / 4) {
    throw new TypeError(`${path}limit: limit x window (ms) must stay below 2^51, got ${limit} x ${window}`);
  }
  return { limit, window };
}

class SlidingWindowLimiter implements Limiter {
  readonly store: Store;
  readonly algorithm: AlgorithmName;
  readonly tiers: readonly Tier[];
  readonly prefix: string;
  readonly timeoutMs: number;
  private readonly implementation: Algorithm;
  private readonly clock: (() => number) | undefined;
  private readonly smallestLimit: number;
  private readonly denyCache: DenyCache | undefined;
  private readonly keyPrefix: string;

  constructor(options: LimiterOptions) {
    this.tiers = Object.freeze(resolveTiers(options));
    this.store = options.store ?? new MemoryStore();
    if (typeof this.store.check !== 'function' || typeof this.store.reset !== 'function') {
      throw new TypeError('store: must be a RedisStore, a MemoryStore or another Store implementation');
    }
    this.algorithm = oneOf(options.algorithm === undefined ? 'sliding-window' : options.algorithm, ALGORITHMS, 'algorithm');
    this.implementation = algorithms[this.algorithm];
    const prefix = options.prefix === undefined ? 'rl' : options.prefix;
    if (typeof prefix !== 'string' || prefix.length === 0 || /[{}\s]/.test(prefix)) {
      throw new TypeError(`prefix: must be a non-empty string without braces or white space, got ${describe(prefix)}`);
    }
    this.prefix = prefix;
    this.keyPrefix = `${prefix}:`;
    this.clock = optionalFunction(options.clock, 'clock');
    this.timeoutMs = options.timeoutMs === undefined ? 500 : positiveInteger(options.timeoutMs, 'timeoutMs');
    const denyCacheSize = options.denyCacheSize === undefined ? 10_000 : nonNegativeInteger(options.denyCacheSize, 'denyCacheSize');
    this.denyCache = denyCacheSize > 0 ? new DenyCache(denyCacheSize) : undefined;
    this.smallestLimit = smallestLimit(this.tiers);
  }

  keyFor(identifier: string): string {
    if (typeof identifier !== 'string') throw new TypeError(`identifier: must be a string, got ${describe(identifier)}`);
    const illFormed = LONE_SURROGATE.test(identifier);
    if (illFormed || identifier.length > MAX_IDENTIFIER_LENGTH) {
      // An ill-formed identifier is hashed from its UTF-16 code units, which keep it distinct.
      const bytes = illFormed ? Buffer.from(identifier, 'utf16le') : identifier;
      identifier = `sha256:${createHash('sha256').update(bytes).digest('base64url')}`;
    }
    return this.keyPrefix + identifier;
  }

  check(identifier: string, options?: CheckOptions): Promise<Decision> {
    return this.run(identifier, options, false);
  }

  peek(identifier: string, options?: CheckOptions): Promise<Decision> {
    return this.run(identifier, options, true);
  }

  reset(identifier: string): Promise<void> {
    let key: string;
    try {
      key = this.keyFor(identifier);
    } catch (error) {
      return Promise.reject(error);
    }
    this.denyCache?.delete(key);
    return this.bounded(this.store.reset(key));
  }

  private run(identifier: string, options: CheckOptions | undefined, dryRun: boolean): Promise<Decision> {
    let key: string;
    let cost: number;
    try {
      key = this.keyFor(identifier);
      cost = options?.cost === undefined ? 1 : validateCost(options.cost, this.smallestLimit);
    } catch (error) {
      return Promise.reject(error);
    }
    const now = this.clock?.();
    if (this.denyCache !== undefined) {
      const denied = this.denyCache.get(key, cost, now ?? Date.now());
      if (denied !== undefined) return Promise.resolve(denied);
    }
    const reply = this.store.check(this.implementation, key, { now, cost, dryRun, tiers: this.tiers });
    return this.bounded(reply).then((raw) => {
      const decision = toDecision(raw, this.tiers, cost);
      if (this.denyCache !== undefined) {
        if (!decision.allowed) this.denyCache.remember(key, decision, now ?? Date.now());
        // Counting pushes back when a cached denial (of another cost) could first be allowed.
        else if (cost > 0 && !dryRun) this.denyCache.delete(key);
      }
      return decision;
    });
  }

  private bounded<T>(promise: Promise<T>): Promise<T> {
    if (!this.store.needsTimeout) return promise;
    const timeoutMs = this.timeoutMs;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new RateLimitTimeoutError(`rate limit store did not answer within ${timeoutMs} ms`)),
        timeoutMs,
      );
      promise.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });
  }
}

/** Turns an algorithm's raw reply into a {@link Decision}. */
export function toDecision(raw: RawReply, tiers: readonly Tier[], cost: number): Decision {
  const allowed = raw[0] === 1;
  const now = Number(raw[1]);
  const tierDecisions: TierDecision[] = new Array(tiers.length);
  let binding = 0;
  let latest = 0;
  for (let i = 0; i < tiers.length; i++) {
    const { limit, window } = tiers[i];
    const estimated = Number(raw[2 + 3 * i]) / Number(raw[3 + 3 * i]);
    const waitMs = Number(raw[4 + 3 * i]);
    if (waitMs > latest) latest = waitMs;
    tierDecisions[i] = { limit, window, estimated, remaining: Math.max(0, Math.floor(limit - estimated)), resetAt: now + waitMs };
    const best = tierDecisions[binding];
    const tier = tierDecisions[i];
    // The binding tier is the one that keeps the client waiting longest, then the one with least left.
    if (tier.resetAt > best.resetAt || (tier.resetAt === best.resetAt && tier.remaining < best.remaining)) binding = i;
  }
  const top = tierDecisions[binding];
  return {
    allowed,
    limit: top.limit,
    window: top.window,
    remaining: top.remaining,
    estimated: top.estimated,
    ratio: top.estimated / top.limit,
    resetAt: now + latest,
    retryAfterMs: allowed ? 0 : latest,
    tier: binding,
    tiers: tierDecisions,
    now,
    cost,
    cached: false,
  };
}

/**
 * Creates a rate limiter. Options are validated here, once: a mistake throws a
 * `TypeError` naming the option.
 *
 * @example
 * const limiter = createLimiter({ store: new RedisStore({ client }), limit: 100, window: '1m' });
 * const decision = await limiter.check('user:42');
 */
export function createLimiter(options: LimiterOptions = {}): Limiter {
  if (options === null || typeof options !== 'object') throw new TypeError(`options: expected an object, got ${describe(options)}`);
  rejectUnknownKeys(options, LIMITER_OPTIONS, 'createLimiter');
  return new SlidingWindowLimiter(options);
}

/** Builds a limiter from a bag of options that may hold other (adapter) keys, already checked by the caller. */
export function limiterFrom(options: LimiterOptions): Limiter {
  return new SlidingWindowLimiter(options);
}
