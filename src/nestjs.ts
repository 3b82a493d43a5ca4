/**
 * A storage for @nestjs/throttler 6: the throttler's guard, decorators and options stay as they
 * are, and each of its `increment` calls becomes one check of this package's limiter, on Redis or
 * in memory, counting by default as the throttler's own storage does. Nothing of NestJS is imported at run time: the throttler's types describe the
 * contract, and NestJS 11 (CommonJS) and 12 (ES modules) load this file alike.
 *
 * @example
 * ThrottlerModule.forRoot({
 *   throttlers: [{ limit: 100, ttl: 60_000 }],
 *   storage: new RatewardenThrottlerStorage({ store: new RedisStore({ client }) }),
 * });
 */
import type { ThrottlerStorage } from '@nestjs/throttler';
import type { AlgorithmName } from './algorithms/types';
import { createLimiter } from './core/limiter';
import type { AfterBlock, Limiter, LimiterOptions } from './core/types';
import { OptionError, Warnings } from './errors';
import { secondsUntil } from './http/headers';
import type { FailMode } from './http/http-options';
import { warnStoreFailing } from './http/misconfiguration';
import { LruMap } from './lru';
import type { MetricsOption } from './metrics';
import type { Store } from './stores/types';
import { checkOptions, describeValue, keysOf, oneOf, optionalFunction } from './validate';

/** Options of {@link RatewardenThrottlerStorage}. The limits come from the throttlers, per call. */
export interface RatewardenThrottlerStorageOptions {
  /** Where counts are kept: a `RedisStore`, or a `MemoryStore` (the default: a new one). */
  store?: Store | undefined;
  /**
   * The algorithm every throttler counts with. Default `'sliding-log'`: each hit counts for `ttl`
   * from the moment it was made, as the throttler documents `ttl` and counts in its own storage.
   * `'sliding-window'` keeps two counters per key instead of one entry per hit, and carries a
   * hit's weight into the next window (see docs/nestjs.md for what each changes).
   */
  algorithm?: AlgorithmName | undefined;
  /**
   * What is left when a `blockDuration` ends: `'reset'` (default) starts the key afresh, as the
   * throttler's own storage does; `'keep'` keeps the hits from before the block, so a client
   * still over the limit is blocked again.
   */
  afterBlock?: AfterBlock | undefined;
  /** Prefix of every key: `<prefix>:<throttler name>:<the guard's key>`. Default `'throttler'`. */
  prefix?: string | undefined;
  /** Longest wait for the store, in milliseconds. Default `500`. */
  timeoutMs?: number | undefined;
  /** Entries of the local deny cache (see the core option); `0` turns it off. Default `10_000`. */
  denyCacheSize?: number | undefined;
  /** A clock returning epoch milliseconds, for tests. Default: Redis `TIME` (or `Date.now()` in memory). */
  clock?: (() => number) | undefined;
  /** OpenTelemetry metrics of the checks (see the core option `metrics`). Default: none. */
  metrics?: MetricsOption | undefined;
  /**
   * When the store fails or times out: `'open'` (default) lets the request through (the guard
   * sees a fresh count), `'closed'` rejects `increment`, so the guard throws and NestJS answers
   * with its exception handling (500 unless a filter of yours maps the error).
   */
  failMode?: Exclude<FailMode, 'local'> | undefined;
  /** Called with a store failure (instead of the `SWL_STORE_FAILING` warning), and the guard's key. */
  onError?: ((error: unknown, key: string) => void) | undefined;
}

const OPTIONS = keysOf<RatewardenThrottlerStorageOptions>({
  store: true,
  algorithm: true,
  afterBlock: true,
  prefix: true,
  timeoutMs: true,
  denyCacheSize: true,
  clock: true,
  metrics: true,
  failMode: true,
  onError: true,
});

/** What `increment` answers (the throttler's `ThrottlerStorageRecord`, which its main entry does not export). */
export type ThrottlerStorageRecord = Awaited<ReturnType<ThrottlerStorage['increment']>>;

export const DEFAULT_THROTTLER_PREFIX = 'throttler';
/** The algorithm of the throttler's own storage: every hit counts for `ttl` from when it was made. */
const DEFAULT_THROTTLER_ALGORITHM: AlgorithmName = 'sliding-log';

/**
 * Most limiters kept, one per distinct `blockDuration` (a limiter's `blockFor` is its own): far
 * more than an app configures, and a bound if `blockDuration` is a function of the request.
 */
const MAX_LIMITERS = 64;

const SECOND = 1_000;

/**
 * A `ThrottlerStorage` of @nestjs/throttler over this package's limiter: pass it as
 * `ThrottlerModule.forRoot({ throttlers, storage })`. Each call checks the throttler's `limit`
 * per `ttl` (and, from a route, `@Throttle()`'s, or a function's answer) as it comes, with
 * `blockDuration` as `blockFor`; a denial counts nothing and comes back blocked, its
 * `timeToBlockExpire` the exact wait in whole seconds, rounded up, which the guard sends as
 * `Retry-After`. By default it counts as the throttler's own storage does: each hit lasts `ttl`
 * (a sliding log), and a key starts afresh when its block ends.
 */
export class RatewardenThrottlerStorage implements ThrottlerStorage {
  private readonly base: LimiterOptions;
  /** The limiter of each `blockDuration` (ms) seen, but 0. */
  private readonly limiters = new LruMap<Limiter>(MAX_LIMITERS);
  private readonly failClosed: boolean;
  /** The `afterBlock` of every limiter with a block. */
  private readonly afterBlock: AfterBlock;
  private readonly onError: RatewardenThrottlerStorageOptions['onError'];
  /** What this storage has warned about. */
  private readonly warnings = new Warnings();
  /** The limiter without a block: validates the options at construction, and is the one most calls use. */
  readonly limiter: Limiter;

  constructor(options: RatewardenThrottlerStorageOptions = {}) {
    checkOptions(options, OPTIONS, 'RatewardenThrottlerStorage');
    const { failMode = 'open', onError, afterBlock = 'reset', ...limiterOptions } = options;
    this.failClosed = oneOf(failMode, ['open', 'closed'] as const, 'failMode') === 'closed';
    this.onError = optionalFunction(onError, 'onError');
    this.afterBlock = oneOf(afterBlock, ['keep', 'reset'] as const, 'afterBlock');
    // The store object itself, shared by every limiter (a default MemoryStore included).
    this.limiter = createLimiter({ prefix: DEFAULT_THROTTLER_PREFIX, algorithm: DEFAULT_THROTTLER_ALGORITHM, ...limiterOptions });
    this.base = { ...limiterOptions, algorithm: this.limiter.algorithm, prefix: this.limiter.prefix, store: this.limiter.store };
  }

  /**
   * The throttler's call: `ttl` and `blockDuration` in milliseconds, as the guard passes them
   * (`blockDuration` is the throttler's, or its `ttl` when it has none; `0` for no block).
   * `timeToExpire` and `timeToBlockExpire` come back in whole seconds, rounded up.
   */
  async increment(key: string, ttl: number, limit: number, blockDuration: number, throttlerName: string): Promise<ThrottlerStorageRecord> {
    const window = milliseconds(ttl, 'ttl', throttlerName);
    if (window < SECOND) this.warnShortTtl(window, throttlerName);
    const limiter = this.limiterFor(milliseconds(blockDuration, 'blockDuration', throttlerName, true));
    let decision: Awaited<ReturnType<Limiter['check']>>;
    try {
      // As a string: a ttl under a second is meant (the throttler's unit is the millisecond), not a slip.
      decision = await limiter.check(`${throttlerName}:${key}`, { limit, window: `${window}ms` });
    } catch (error) {
      if (error instanceof OptionError || this.failClosed) throw error;
      this.storeFailed(error, key);
      return { totalHits: 0, timeToExpire: 0, isBlocked: false, timeToBlockExpire: 0 };
    }
    const { now, remaining } = decision;
    const timeToExpire = secondsUntil(decision.resetAt, now);
    if (decision.allowed) return { totalHits: limit - remaining, timeToExpire, isBlocked: false, timeToBlockExpire: 0 };
    // The guard reads a refusal from `isBlocked` alone; `totalHits` past the limit keeps its Remaining header at 0.
    return {
      totalHits: limit - remaining + 1,
      timeToExpire,
      isBlocked: true,
      // A limit of 0 is never passed: the guard, which needs a number, tells the client to come back in a ttl.
      timeToBlockExpire: secondsUntil(now + (decision.retryAfterMs === Infinity ? window : decision.retryAfterMs), now),
    };
  }

  /** A ttl under a second is almost always seconds meant as milliseconds, as a `window` of 60 is. */
  private warnShortTtl(ttl: number, throttlerName: string): void {
    this.warnings.once(
      'SWL_SHORT_DURATION',
      () =>
        `ttl: the "${throttlerName}" throttler's ttl ${ttl} is read as ${ttl} ms, as @nestjs/throttler reads it. For ${ttl} s write seconds(${ttl}) (from @nestjs/throttler) or ${ttl * SECOND}.`,
      `${throttlerName}=${ttl}`,
    );
  }

  private limiterFor(blockFor: number): Limiter {
    if (blockFor === 0) return this.limiter;
    const name = String(blockFor);
    let limiter = this.limiters.get(name);
    if (limiter === undefined) {
      limiter = createLimiter({ ...this.base, blockFor: `${blockFor}ms`, afterBlock: this.afterBlock });
      this.limiters.set(name, limiter);
    }
    return limiter;
  }

  private storeFailed(error: unknown, key: string): void {
    if (this.onError === undefined) {
      warnStoreFailing(error, this.failClosed ? 'closed' : 'open', this.warnings);
      return;
    }
    try {
      this.onError(error, key);
    } catch {
      // A failing error hook must not turn a degraded store into a failed request.
    }
  }
}

/** A duration the guard passed, in whole milliseconds; `0` allowed only where it means none. */
function milliseconds(value: unknown, option: string, throttlerName: string, zero = false): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < (zero ? 0 : 1)) {
    throw new OptionError(
      'SWL_INVALID_DURATION',
      `${option}: the "${throttlerName}" throttler's ${option} must be a ${zero ? 'non-negative' : 'positive'} whole number of milliseconds, got ${describeValue(value)}`,
    );
  }
  return value;
}

export * from './index';
