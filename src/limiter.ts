import { ALGORITHMS } from './algorithms';
import type { AlgorithmName, AlgorithmScripts, RawReply, Tier } from './algorithms/types';
import { type Done, settling } from './callback';
import { blockedMs, toDecision } from './decision';
import { DenyCache } from './deny-cache';
import { OptionError } from './errors';
import { storeKey } from './keys';
import {
  DEFAULT_COST,
  LIMITER_OPTIONS,
  type ResolvedLimiterOptions,
  resolveLimiterOptions,
  resolveTiers,
  smallestLimit,
  validateCost,
} from './options/limiter';
import { checkOptions, describeValue, keysOf } from './options/validate';
import { type CallbackStore, checkWithCallback } from './stores/callback';
import type { Store } from './stores/types';
import { Deadlines } from './timeout';
import type { CheckOptions, Decision, Limiter, LimiterOptions } from './types';

/** The limiter: runs an algorithm's scripts through a store, bounded by a timeout, in front of a deny cache. */
export class RateLimiter implements Limiter {
  readonly store: Store;
  readonly algorithm: AlgorithmName;
  readonly tiers: readonly Tier[];
  readonly prefix: string;
  readonly timeoutMs: number;
  readonly blockFor: number;
  readonly shadow: boolean;
  private readonly scripts: AlgorithmScripts;
  private readonly clock: (() => number) | undefined;
  /** The smallest limit among `tiers`: no single request may cost more. */
  readonly smallestLimit: number;
  private readonly denyCache: DenyCache | undefined;
  private readonly keyPrefix: string;
  private readonly deadlines: Deadlines;
  private readonly storeCheck: CallbackStore['checkThen'];
  /** The identifier {@link keyFor} was last asked for, and its key (primed with `''`, so never undefined). */
  private lastIdentifier: string;
  private lastKey: string;

  constructor(options: ResolvedLimiterOptions) {
    this.store = options.store;
    this.algorithm = options.algorithm;
    this.tiers = options.tiers;
    this.prefix = options.prefix;
    this.timeoutMs = options.timeoutMs;
    this.clock = options.clock;
    this.blockFor = options.blockFor;
    this.shadow = options.shadow;
    this.storeCheck = checkWithCallback(this.store);
    this.scripts = ALGORITHMS[this.algorithm];
    this.keyPrefix = `${this.prefix}:`;
    this.lastIdentifier = '';
    this.lastKey = storeKey(this.keyPrefix, '');
    this.deadlines = new Deadlines(this.timeoutMs);
    this.smallestLimit = smallestLimit(this.tiers);
    this.denyCache = options.denyCacheSize > 0 ? new DenyCache(options.denyCacheSize) : undefined;
  }

  keyFor(identifier: string): string {
    // A flood from one identifier asks for the same key request after request. Handing back the
    // same string object spares building it and, in the deny cache's Map, hashing it again (V8
    // keeps a string's hash in the string): the largest share of a cached denial's CPU time.
    if (identifier === this.lastIdentifier) return this.lastKey;
    const key = storeKey(this.keyPrefix, identifier);
    this.lastIdentifier = identifier;
    this.lastKey = key;
    return key;
  }

  check(identifier: string, options?: CheckOptions): Promise<Decision> {
    return this.run(identifier, options, false);
  }

  peek(identifier: string, options?: CheckOptions): Promise<Decision> {
    return this.run(identifier, options, true);
  }

  /**
   * A check whose cost and tiers the caller has validated already (the HTTP layer): no option
   * object to read, and no promise. `tiers` undefined means the limiter's own. A denial the deny
   * cache holds is returned at once (and `done` is not called), so a flood of refused requests is
   * answered synchronously; otherwise this returns undefined and `done` gets the decision.
   */
  checkValidated(identifier: string, cost: number, tiers: readonly Tier[] | undefined, done: Done<Decision>): Decision | undefined {
    let key: string;
    try {
      key = this.keyFor(identifier);
    } catch (error) {
      done(error);
      return undefined;
    }
    return this.decide(key, cost, tiers ?? this.tiers, false, done);
  }

  refund(identifier: string, decision: Decision): Promise<void> {
    let key: string;
    try {
      key = this.keyFor(identifier);
      checkDecision(decision);
    } catch (error) {
      return Promise.reject(error);
    }
    if (!decision.counted) return Promise.resolve();
    this.denyCache?.delete(key);
    const refund = { now: this.clock?.(), cost: decision.cost, dryRun: false, countedAt: decision.now, tiers: decision.tiers };
    return this.bounded(this.store.refund(this.scripts, key, refund)).then(() => {
      // A check in flight may have cached a denial the refund has since made untrue.
      this.denyCache?.delete(key);
    });
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
    let cost = DEFAULT_COST;
    let tiers = this.tiers;
    try {
      key = this.keyFor(identifier);
      if (options !== undefined) {
        checkOptions(options, CHECK_OPTIONS, dryRun ? 'peek' : 'check');
        if (options.limit !== undefined || options.window !== undefined || options.limits !== undefined) {
          tiers = callTiers(options, this.tiers);
        }
        if (options.cost !== undefined) {
          cost = validateCost(options.cost, tiers === this.tiers ? this.smallestLimit : smallestLimit(tiers));
        }
      }
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise((resolve, reject) => {
      const cached = this.decide(key, cost, tiers, dryRun, settling(resolve, reject));
      if (cached !== undefined) resolve(cached);
    });
  }

  /** The deny cache's answer if it holds one; else undefined, and `done` gets the store's. */
  private decide(key: string, cost: number, tiers: readonly Tier[], dryRun: boolean, done: Done<Decision>): Decision | undefined {
    const now = this.clock?.();
    if (this.denyCache !== undefined) {
      const denied = this.denyCache.get(key, cost, tiers, now ?? Date.now());
      if (denied !== undefined) return denied;
    }
    const pending = this.store.needsTimeout ? this.deadlines.start(done) : undefined;
    this.storeCheck(this.scripts, key, { now, cost, dryRun, blockFor: this.blockFor, tiers }, (error, raw) => {
      // A reply after the deadline changes nothing: the caller has had its timeout error.
      if (pending !== undefined && !this.deadlines.finish(pending)) return;
      if (raw === undefined) {
        done(error);
        return;
      }
      let decision: Decision;
      try {
        decision = this.decided(key, raw, tiers, cost, dryRun, now);
      } catch (failure) {
        done(failure);
        return;
      }
      done(undefined, decision);
    });
    return undefined;
  }

  private decided(key: string, raw: RawReply, tiers: readonly Tier[], cost: number, dryRun: boolean, now: number | undefined): Decision {
    const decision = toDecision(raw, tiers, cost, dryRun, this.shadow);
    if (this.denyCache !== undefined) {
      // With blockFor, only a blocked denial may be cached: another would answer the next check
      // without the script that starts (or, once a block has ended, renews) the block.
      if (!decision.allowed && (this.blockFor === 0 || decision.blocked)) {
        this.denyCache.remember(key, decision, now ?? Date.now(), blockedMs(raw));
      }
      // Counting pushes back when a cached denial (of another cost) could first be allowed.
      else if (decision.counted) this.denyCache.delete(key);
    }
    return decision;
  }

  private bounded<T>(promise: Promise<T>): Promise<T> {
    return this.store.needsTimeout ? this.deadlines.bound(promise) : promise;
  }
}

const CHECK_OPTIONS = keysOf<CheckOptions>({ cost: true, limit: true, window: true, limits: true });

/** Throws unless `decision` has what a refund reads: `counted`, `cost`, `now` and the `tiers` it was decided with. */
function checkDecision(decision: Decision): void {
  const candidate = decision as Partial<Decision> | null;
  if (
    candidate === null ||
    typeof candidate !== 'object' ||
    typeof candidate.counted !== 'boolean' ||
    !Number.isSafeInteger(candidate.cost) ||
    !Number.isFinite(candidate.now) ||
    !Array.isArray(candidate.tiers) ||
    !candidate.tiers.every((tier) => Number.isSafeInteger(tier?.limit) && Number.isSafeInteger(tier?.window))
  ) {
    throw new OptionError('SWL_INVALID_TYPE', `decision: must be a decision returned by check(), got ${describeValue(decision)}`);
  }
}

/**
 * The tiers of one call: `limits`, or `limit`/`window` over the limiter's single tier (with
 * several tiers, both must be given).
 */
function callTiers(options: CheckOptions, tiers: readonly Tier[]): readonly Tier[] {
  if (options.limits !== undefined || tiers.length === 1) {
    const single = options.limits === undefined ? tiers[0] : undefined;
    return resolveTiers({
      limits: options.limits,
      limit: options.limit ?? single?.limit,
      window: options.window ?? single?.window,
    });
  }
  if (options.limit === undefined || options.window === undefined) {
    throw new OptionError('SWL_INVALID_LIMIT', 'limit: a limiter with several tiers takes limit and window together, or limits');
  }
  return resolveTiers({ limit: options.limit, window: options.window });
}

/**
 * Creates a rate limiter. Options are validated here, once: a mistake throws an
 * `OptionError` (a `TypeError`) naming the option.
 *
 * @example
 * const limiter = createLimiter({ store: new RedisStore({ client }), limit: 100, window: '1m' });
 * const decision = await limiter.check('user:42');
 */
export function createLimiter(options: LimiterOptions = {}): Limiter {
  checkOptions(options, LIMITER_OPTIONS, 'createLimiter');
  return new RateLimiter(resolveLimiterOptions(options));
}
