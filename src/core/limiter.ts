import { ALGORITHMS } from '../algorithms';
import type { AlgorithmName, AlgorithmScripts, RawReply } from '../algorithms/types';
import { type Done, settling } from '../async';
import { OptionError } from '../errors';
import type { ScriptCall } from '../protocol';
import type { CallbackStore, Store } from '../stores/types';
import { resolveTiers, smallestLimit, type Tier } from '../tiers';
import { checkOptions, describeValue, keysOf } from '../validate';
import { Deadlines } from './deadlines';
import { blockedMsOf, decodeDecision, neverAllowed } from './decision';
import { DenyCache } from './deny-cache';
import { storeKey } from './keys';
import { DEFAULT_COST, LIMITER_OPTIONS, type ResolvedLimiterOptions, resolveLimiterOptions, validateCost } from './limiter-options';
import type { CheckOptions, Decision, Limiter, LimiterOptions } from './types';

/**
 * The limiter as the HTTP layer uses it: the public {@link Limiter}, plus a check whose inputs
 * the caller has prepared and validated, answered by callback.
 */
export interface LimiterCore extends Limiter {
  /** The smallest limit among `tiers`: no single request may cost more. */
  readonly smallestLimit: number;
  /**
   * Checks `identifier` with a validated `cost` and `tiers` (undefined: the limiter's own): no
   * option object to read, and no promise. A denial the deny cache holds is returned at once (and
   * `done` is not called), so a flood of refused requests is answered synchronously; otherwise
   * this returns undefined and `done` gets the decision.
   */
  checkPrepared(identifier: string, cost: number, tiers: readonly Tier[] | undefined, done: Done<Decision>): Decision | undefined;
}

type CheckThen = CallbackStore['checkThen'];

/** The limiter: runs an algorithm's scripts through a store, bounded by a timeout, behind a deny cache. */
class RateLimiter implements LimiterCore {
  readonly store: Store;
  readonly algorithm: AlgorithmName;
  readonly tiers: readonly Tier[];
  readonly prefix: string;
  readonly timeoutMs: number;
  readonly blockFor: number;
  readonly shadow: boolean;
  readonly smallestLimit: number;
  private readonly scripts: AlgorithmScripts;
  private readonly clock: (() => number) | undefined;
  private readonly denyCache: DenyCache | undefined;
  private readonly keyPrefix: string;
  private readonly deadlines: Deadlines;
  private readonly storeCheck: CheckThen;
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
    this.storeCheck = checkThenOf(this.store);
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
    return this.checkOrPeek(identifier, options, false);
  }

  peek(identifier: string, options?: CheckOptions): Promise<Decision> {
    return this.checkOrPeek(identifier, options, true);
  }

  checkPrepared(identifier: string, cost: number, tiers: readonly Tier[] | undefined, done: Done<Decision>): Decision | undefined {
    let key: string;
    try {
      key = this.keyFor(identifier);
    } catch (error) {
      done(error);
      return undefined;
    }
    const call: ScriptCall = {
      now: this.clock?.(),
      cost,
      dryRun: false,
      blockFor: this.blockFor,
      countedAt: 0,
      actualCost: 0,
      tiers: tiers ?? this.tiers,
    };
    if (cost > (tiers === undefined ? this.smallestLimit : smallestLimit(tiers))) {
      this.refuseOversized(identifier, key, call, done);
      return undefined;
    }
    return this.checkKey(identifier, key, call, done);
  }

  refund(identifier: string, decision: Decision): Promise<void> {
    return this.settle(identifier, decision, 0);
  }

  settle(identifier: string, decision: Decision, actualCost: number): Promise<void> {
    let key: string;
    try {
      key = this.keyFor(identifier);
      checkDecision(decision);
      validateCost(actualCost, Infinity, 'actualCost');
    } catch (error) {
      return Promise.reject(error);
    }
    // What the check counted: its cost if it counted (allowed, not a peek), else nothing.
    const counted = decision.counted ? decision.cost : 0;
    if (actualCost === counted) return Promise.resolve();
    this.denyCache?.delete(key);
    const call: ScriptCall = {
      now: this.clock?.(),
      cost: counted,
      dryRun: false,
      blockFor: 0,
      countedAt: decision.now,
      actualCost,
      tiers: decision.tiers,
    };
    return this.bounded(this.store.settle(this.scripts, key, call)).then(() => {
      // A check in flight may have cached a denial the settlement has since made untrue.
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

  private checkOrPeek(identifier: string, options: CheckOptions | undefined, dryRun: boolean): Promise<Decision> {
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
        if (options.cost !== undefined) cost = validateCost(options.cost);
      }
    } catch (error) {
      return Promise.reject(error);
    }
    const call: ScriptCall = { now: this.clock?.(), cost, dryRun, blockFor: this.blockFor, countedAt: 0, actualCost: 0, tiers };
    return new Promise((resolve, reject) => {
      const done = settling(resolve, reject);
      if (cost > (tiers === this.tiers ? this.smallestLimit : smallestLimit(tiers))) this.refuseOversized(identifier, key, call, done);
      else {
        const cached = this.checkKey(identifier, key, call, done);
        if (cached !== undefined) resolve(cached);
      }
    });
  }

  /**
   * A cost above the smallest limit can never be allowed: it is refused without counting (and
   * without starting a block), with the identifier's counts as a peek sees them.
   */
  private refuseOversized(identifier: string, key: string, call: ScriptCall, done: Done<Decision>): void {
    const peek: ScriptCall = { ...call, cost: 0, dryRun: true };
    const cached = this.checkKey(identifier, key, peek, (error, decision) =>
      decision === undefined ? done(error) : done(undefined, neverAllowed(decision, call.cost)),
    );
    if (cached !== undefined) done(undefined, neverAllowed(cached, call.cost));
  }

  /** The deny cache's answer if it holds one; else undefined, and `done` gets the store's. */
  private checkKey(identifier: string, key: string, call: ScriptCall, done: Done<Decision>): Decision | undefined {
    if (this.denyCache !== undefined) {
      const denied = this.denyCache.get(key, call.cost, call.tiers, call.now ?? Date.now());
      if (denied !== undefined) return denied;
    }
    const pending = this.store.needsTimeout ? this.deadlines.start(done) : undefined;
    this.storeCheck(this.scripts, key, call, (error, raw) => {
      // A reply after the deadline changes nothing: the caller has had its timeout error.
      if (pending !== undefined && !this.deadlines.finish(pending)) return;
      if (raw === undefined) {
        done(error);
        return;
      }
      let decision: Decision;
      try {
        decision = this.decisionOf(identifier, key, raw, call);
      } catch (failure) {
        done(failure);
        return;
      }
      done(undefined, decision);
    });
    return undefined;
  }

  /** Decodes a check's reply, and keeps the deny cache true to it. */
  private decisionOf(identifier: string, key: string, raw: RawReply, call: ScriptCall): Decision {
    const decision = decodeDecision(raw, { identifier, tiers: call.tiers, cost: call.cost, dryRun: call.dryRun, shadow: this.shadow });
    if (this.denyCache !== undefined) {
      // With blockFor, only a blocked denial may be cached: another would answer the next check
      // without the script that starts (or, once a block has ended, renews) the block.
      if (!decision.allowed && (this.blockFor === 0 || decision.blocked)) {
        this.denyCache.remember(key, decision, call.now ?? Date.now(), blockedMsOf(raw));
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

/** How the limiter runs a store's check: its callback form where it has one, else its promise. */
function checkThenOf(store: Store): CheckThen {
  const callbackStore = store as Partial<CallbackStore>;
  // Looked up on every call, not bound once, so a store's method replaced later (a spy) is the one used.
  if (typeof callbackStore.checkThen === 'function')
    return (scripts, key, call, done) => (store as CallbackStore).checkThen(scripts, key, call, done);
  return (scripts, key, call, done) => {
    let reply: Promise<RawReply>;
    try {
      reply = store.check(scripts, key, call);
    } catch (error) {
      done(error);
      return;
    }
    reply.then(
      (raw) => (raw === undefined ? done(new TypeError('store.check() resolved to undefined, not a script reply')) : done(undefined, raw)),
      done,
    );
  };
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

/** A limiter from options already validated (the HTTP adapters validate theirs first). */
export function limiterFromResolved(options: ResolvedLimiterOptions): LimiterCore {
  return new RateLimiter(options);
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
