import { randomBytes } from 'node:crypto';
import { ALGORITHMS } from '../algorithms';
import { RELEASE, RENEW } from '../algorithms/lease';
import type { AlgorithmName, AlgorithmScripts, LeaseScript, RawReply } from '../algorithms/types';
import { type Done, settling } from '../async';
import { OptionError } from '../errors';
import { LimiterMetrics } from '../metrics';
import { LEASE_CHANGE_REPLY, type LeaseCall, type ScriptCall } from '../protocol';
import type { CallbackStore, Store } from '../stores/types';
import { resolveTiers, smallestLimit, type Tier, tiersWithQuota } from '../tiers';
import { checkOptions, describeValue, type KnownKeys, keysOf, nonNegativeInteger, positiveInteger } from '../validate';
import { CircuitBreaker } from './breaker';
import { Deadlines } from './deadlines';
import { blockedMsOf, decodeDecision, neverAllowed, withoutQuota } from './decision';
import { DenyCache } from './deny-cache';
import { leaseKeyOf, rateKeyWithLeases, storeKey } from './keys';
import { DEFAULT_COST, LIMITER_OPTIONS, type ResolvedLimiterOptions, resolveLimiterOptions, validateCost } from './limiter-options';
import type { CheckOptions, Decision, Lease, Limiter, LimiterOptions, WaitOptions } from './types';
import { Waiters } from './wait';

/**
 * The limiter as the HTTP layer uses it: the public {@link Limiter}, plus a check whose inputs
 * the caller has prepared and validated, answered by callback.
 */
export interface LimiterCore extends Limiter {
  /** The smallest limit among `tiers`: no single request may cost more. */
  readonly smallestLimit: number;
  /** Milliseconds a lease lives unless renewed (with `concurrency`). */
  readonly leaseMs: number;
  /**
   * Checks `identifier` with a validated `cost` and `tiers` (undefined: the limiter's own): no
   * option object to read, and no promise. A denial the deny cache holds is returned at once (and
   * `done` is not called), so a flood of refused requests is answered synchronously; otherwise
   * this returns undefined and `done` gets the decision.
   */
  checkPrepared(
    identifier: string,
    cost: number,
    tiers: readonly Tier[] | undefined,
    done: Done<Decision>,
    concurrency?: number,
  ): Decision | undefined;
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
  readonly concurrency: number;
  readonly smallestLimit: number;
  readonly leaseMs: number;
  private readonly scripts: AlgorithmScripts;
  private readonly clock: (() => number) | undefined;
  private readonly denyCache: DenyCache | undefined;
  private readonly keyPrefix: string;
  private readonly deadlines: Deadlines;
  private readonly storeCheck: CheckThen;
  /** Undefined without the `metrics` option: then nothing is measured. */
  private readonly metrics: LimiterMetrics | undefined;
  /** Answers checks at once while the store keeps failing; undefined when turned off. */
  private readonly breaker: CircuitBreaker | undefined;
  private readonly refundLateCounts: boolean;
  /** The callers of `wait`, made on its first use. */
  private waiters: Waiters | undefined;
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
    this.concurrency = options.concurrency;
    this.leaseMs = options.leaseMs;
    this.storeCheck = checkThenOf(this.store);
    this.scripts = ALGORITHMS[this.algorithm];
    this.keyPrefix = `${this.prefix}:`;
    this.lastIdentifier = '';
    this.lastKey = this.keyOf('');
    // A store that counts its connections lets the breaker probe as soon as one is made again.
    const readies = options.store.readies?.bind(options.store);
    const breaker = options.breaker === undefined ? undefined : new CircuitBreaker(options.breaker, Date.now, readies);
    this.breaker = breaker;
    this.refundLateCounts = options.refundLateCounts;
    this.deadlines = new Deadlines(this.timeoutMs, breaker === undefined ? undefined : (error) => breaker.failed(error));
    this.smallestLimit = smallestLimit(this.tiers);
    this.denyCache = options.denyCacheSize > 0 ? new DenyCache(options.denyCacheSize) : undefined;
    this.metrics = options.metrics === undefined ? undefined : new LimiterMetrics(options.metrics, this.prefix);
  }

  keyFor(identifier: string): string {
    // A flood from one identifier asks for the same key request after request. Handing back the
    // same string object spares building it and, in the deny cache's Map, hashing it again (V8
    // keeps a string's hash in the string): the largest share of a cached denial's CPU time.
    if (identifier === this.lastIdentifier) return this.lastKey;
    const key = this.keyOf(identifier);
    this.lastIdentifier = identifier;
    this.lastKey = key;
    return key;
  }

  private keyOf(identifier: string): string {
    const key = storeKey(this.keyPrefix, identifier);
    return this.concurrency > 0 ? rateKeyWithLeases(key) : key;
  }

  check(identifier: string, options?: CheckOptions): Promise<Decision> {
    return this.checkOrPeek(identifier, options, false);
  }

  peek(identifier: string, options?: CheckOptions): Promise<Decision> {
    return this.checkOrPeek(identifier, options, true);
  }

  checkPrepared(
    identifier: string,
    cost: number,
    tiers: readonly Tier[] | undefined,
    done: Done<Decision>,
    concurrency = this.concurrency,
  ): Decision | undefined {
    const { metrics } = this;
    if (metrics !== undefined) return metrics.decided(this.checkUnmetered(identifier, cost, tiers, metrics.counting(done), concurrency));
    return this.checkUnmetered(identifier, cost, tiers, done, concurrency);
  }

  private checkUnmetered(
    identifier: string,
    cost: number,
    tiers: readonly Tier[] | undefined,
    done: Done<Decision>,
    concurrency: number,
  ): Decision | undefined {
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
      lease: this.leaseOf(concurrency),
    };
    const smallest = tiers === undefined ? this.smallestLimit : smallestLimit(tiers);
    if (cost > smallest || smallest === 0) {
      this.decideBeyondLimits(identifier, key, call, done);
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
    // A tier of limit 0 keeps no count: there is nothing to charge or give back in it.
    const tiers = tiersWithQuota(decision.tiers);
    if (actualCost === counted || tiers.length === 0) return Promise.resolve();
    this.denyCache?.delete(key);
    const call: ScriptCall = {
      now: this.clock?.(),
      cost: counted,
      dryRun: false,
      blockFor: 0,
      countedAt: decision.now,
      actualCost,
      tiers,
    };
    return this.bounded(this.store.settle(this.scripts, key, call)).then(() => {
      // A check in flight may have cached a denial the settlement has since made untrue.
      this.denyCache?.delete(key);
    });
  }

  wait(identifier: string, options?: WaitOptions): Promise<Decision> {
    let callOptions: CheckOptions | undefined;
    let maxWaitMs = Infinity;
    let signal: AbortSignal | undefined;
    try {
      if (options !== undefined) {
        checkOptions(options, WAIT_OPTIONS, 'wait');
        const { maxWaitMs: bound, signal: abort, ...rest } = options;
        if (bound !== undefined) maxWaitMs = nonNegativeInteger(bound, 'maxWaitMs');
        if (abort !== undefined && !(abort instanceof AbortSignal)) {
          throw new OptionError('SWL_INVALID_TYPE', `signal: must be an AbortSignal, got ${describeValue(abort)}`);
        }
        signal = abort;
        callOptions = rest;
      }
    } catch (error) {
      return Promise.reject(error);
    }
    this.waiters ??= new Waiters(
      (id, call) => this.check(id, call),
      (id, decision) => this.refund(id, decision),
    );
    return this.waiters.wait(identifier, callOptions, maxWaitMs, signal);
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
    let concurrency = this.concurrency;
    try {
      key = this.keyFor(identifier);
      if (options !== undefined) {
        checkOptions(options, CHECK_OPTIONS, dryRun ? 'peek' : 'check');
        if (options.limit !== undefined || options.window !== undefined || options.limits !== undefined) {
          tiers = callTiers(options, this.tiers);
        }
        if (options.cost !== undefined) cost = validateCost(options.cost);
        if (options.concurrency !== undefined) concurrency = this.callConcurrency(options.concurrency);
      }
    } catch (error) {
      return Promise.reject(error);
    }
    const lease = this.leaseOf(concurrency);
    const call: ScriptCall = { now: this.clock?.(), cost, dryRun, blockFor: this.blockFor, countedAt: 0, actualCost: 0, tiers, lease };
    // A peek decides nothing: only checks are counted.
    const metrics = dryRun ? undefined : this.metrics;
    return new Promise((resolve, reject) => {
      const done = metrics === undefined ? settling(resolve, reject) : metrics.counting(settling<Decision>(resolve, reject));
      const smallest = tiers === this.tiers ? this.smallestLimit : smallestLimit(tiers);
      if (cost > smallest || smallest === 0) this.decideBeyondLimits(identifier, key, call, done);
      else {
        const cached = this.checkKey(identifier, key, call, done);
        if (cached !== undefined) resolve(metrics === undefined ? cached : (metrics.decided(cached) as Decision));
      }
    });
  }

  /**
   * A cost above the smallest limit can never be allowed: it is refused without counting (and
   * without starting a block), with the identifier's counts as a peek sees them. A tier of limit
   * 0 refuses every cost above 0: it is left out of the peek, and with no other tier the store is
   * not asked at all.
   */
  private decideBeyondLimits(identifier: string, key: string, call: ScriptCall, done: Done<Decision>): void {
    const { tiers, cost } = call;
    const withQuota = tiersWithQuota(tiers);
    let decide = (peek: Decision) => neverAllowed(peek, cost);
    if (withQuota !== tiers) {
      const context = { identifier, cost, now: call.now ?? Date.now(), shadow: this.shadow };
      if (withQuota.length === 0) {
        done(undefined, withoutQuota(undefined, tiers, context));
        return;
      }
      decide = (peek) => withoutQuota(peek, tiers, context);
    }
    const peek: ScriptCall = { ...call, cost: 0, dryRun: true, tiers: withQuota };
    const cached = this.checkKey(identifier, key, peek, (error, decision) =>
      decision === undefined ? done(error) : done(undefined, decide(decision)),
    );
    if (cached !== undefined) done(undefined, decide(cached));
  }

  /** The deny cache's answer if it holds one; else undefined, and `done` gets the store's. */
  private checkKey(identifier: string, key: string, call: ScriptCall, done: Done<Decision>): Decision | undefined {
    if (this.denyCache !== undefined) {
      const denied = this.denyCache.get(key, call.cost, call.tiers, call.now ?? Date.now());
      if (denied !== undefined) return denied;
    }
    const { breaker } = this;
    if (breaker !== undefined) {
      const refusal = breaker.refusal();
      if (refusal !== undefined) {
        done(refusal);
        return undefined;
      }
    }
    const pending = this.store.needsTimeout ? this.deadlines.start(done) : undefined;
    const { metrics } = this;
    const started = metrics === undefined ? 0 : performance.now();
    const answer: Done<RawReply> = (error, raw) => {
      // Measured even when it comes after the deadline: how long the store took is what it took.
      if (metrics !== undefined) metrics.storeAnswered(started, raw === undefined ? error : undefined);
      // A reply after the deadline does not reach the caller, who has had its timeout error.
      if (pending !== undefined && !this.deadlines.finish(pending)) {
        if (raw !== undefined && this.refundLateCounts) this.giveBackLate(identifier, key, raw, call);
        return;
      }
      // A failure that came at once (the connection is down) does not open the breaker: it spares
      // nobody a wait, and would only delay limiting once the store is back. It fails a probe.
      if (raw === undefined) {
        breaker?.failedAtOnce(error);
        done(error);
        return;
      }
      breaker?.succeeded();
      let decision: Decision;
      try {
        decision = this.decisionOf(identifier, key, raw, call);
      } catch (failure) {
        done(failure);
        return;
      }
      done(undefined, decision);
    };
    if (call.lease === undefined) this.storeCheck(this.scripts, key, call, answer);
    else (this.store as Required<Store>).checkLease(this.scripts, key, leaseKeyOf(key), call).then((raw) => answer(undefined, raw), answer);
    return undefined;
  }

  /**
   * A check that timed out was refused (or decided without the store), yet its late reply shows
   * the store counted it: gives back what it counted, and the lease it took.
   */
  private giveBackLate(identifier: string, key: string, raw: RawReply, call: ScriptCall): void {
    let decision: Decision;
    try {
      decision = decodeDecision(raw, {
        identifier,
        tiers: call.tiers,
        cost: call.cost,
        dryRun: call.dryRun,
        shadow: this.shadow,
        concurrency: call.lease?.concurrency ?? 0,
      });
    } catch {
      return;
    }
    if (!decision.allowed || call.dryRun) return;
    // Failures here have nowhere to go: the request was answered long ago.
    if (decision.counted) this.settle(identifier, decision, 0).then(undefined, ignore);
    if (call.lease !== undefined) this.changeLease(RELEASE, leaseKeyOf(key), call.lease.id).then(undefined, ignore);
  }

  /** Decodes a check's reply, and keeps the deny cache true to it. */
  private decisionOf(identifier: string, key: string, raw: RawReply, call: ScriptCall): Decision {
    const { tiers, cost, dryRun, lease } = call;
    let decision = decodeDecision(raw, { identifier, tiers, cost, dryRun, shadow: this.shadow, concurrency: lease?.concurrency ?? 0 });
    if (lease !== undefined && decision.allowed && !dryRun) {
      decision = { ...decision, lease: new HeldLease(this, leaseKeyOf(key), lease.id) };
    }
    if (this.denyCache !== undefined) {
      // With blockFor, only a blocked denial may be cached: another would answer the next check
      // without the script that starts (or, once a block has ended, renews) the block. A refusal
      // by the concurrency bound is never cached: a release may make it untrue at any moment.
      if (!decision.allowed && (this.blockFor === 0 || decision.blocked) && decision.concurrency?.refused !== true) {
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

  /** The lease a check asks for under a bound of `concurrency` (0: none). */
  private leaseOf(concurrency: number): LeaseCall | undefined {
    return concurrency > 0 ? { concurrency, leaseMs: this.leaseMs, id: newLeaseId() } : undefined;
  }

  /** A call's own bound on requests in progress: only on a limiter that keeps leases. */
  private callConcurrency(concurrency: unknown): number {
    if (this.concurrency === 0) {
      throw new OptionError(
        'SWL_CONFLICTING_OPTIONS',
        'concurrency: a call may change the bound only on a limiter created with concurrency',
      );
    }
    return positiveInteger(concurrency, 'concurrency');
  }

  /** Releases or renews a lease; true when it was live. */
  changeLease(script: LeaseScript, leaseKey: string, id: string): Promise<boolean> {
    const call: ScriptCall = {
      now: this.clock?.(),
      cost: 0,
      dryRun: false,
      blockFor: 0,
      countedAt: 0,
      actualCost: 0,
      tiers: NO_TIERS,
      lease: { concurrency: 0, leaseMs: this.leaseMs, id },
    };
    return this.bounded((this.store as Required<Store>).changeLease(script, leaseKey, call)).then(
      (raw) => raw[LEASE_CHANGE_REPLY.changed] === 1,
    );
  }
}

const NO_TIERS: readonly Tier[] = Object.freeze([]);

function ignore(): void {
  // on purpose: see the callers
}

/** A lease id: this process's random tag and a counter, unique across processes. */
const LEASE_TAG = `${randomBytes(6).toString('base64url')}.`;
let leaseCount = 0;
function newLeaseId(): string {
  leaseCount++;
  return LEASE_TAG + leaseCount.toString(36);
}

/** A lease an allowed check took: released or renewed through its limiter. */
class HeldLease implements Lease {
  constructor(
    private readonly limiter: RateLimiter,
    private readonly leaseKey: string,
    readonly id: string,
  ) {}

  release(): Promise<boolean> {
    return this.limiter.changeLease(RELEASE, this.leaseKey, this.id);
  }

  renew(): Promise<boolean> {
    return this.limiter.changeLease(RENEW, this.leaseKey, this.id);
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

const CHECK_OPTION_KEYS: KnownKeys<CheckOptions> = { cost: true, limit: true, window: true, limits: true, concurrency: true };
const CHECK_OPTIONS = keysOf<CheckOptions>(CHECK_OPTION_KEYS);
const WAIT_OPTIONS = keysOf<WaitOptions>({ ...CHECK_OPTION_KEYS, maxWaitMs: true, signal: true });

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
