import { ALGORITHMS } from '../algorithms';
import { RELEASE } from '../algorithms/lease';
import type { AlgorithmName, AlgorithmScripts, LeaseScript, RawReply } from '../algorithms/types';
import type { Done } from '../async';
import { RateLimitTimeoutError, type Warnings } from '../errors';
import { LimiterMetrics } from '../metrics';
import { LEASE_CHANGE_REPLY, type LeaseCall, type ScriptCall } from '../protocol';
import type { CallbackStore, Store } from '../stores/types';
import { smallestLimit, type Tier, tiersWithQuota } from '../tiers';
import { checkOptions } from '../validate';
import { CircuitBreaker } from './breaker';
import { type CallInputs, callInputs, checkDecision, waitInputs } from './call-options';
import { Deadlines, type Gate, type Pending } from './deadlines';
import { blockedMsOf, type DecodingLimiter, decodeDecision, neverAllowed, withoutQuota } from './decision';
import { DenyCache } from './deny-cache';
import { KeyCache, leaseKeyOf } from './keys';
import { type ChangeLease, HeldLease, LeaseIds } from './leases';
import { LIMITER_OPTIONS, type ResolvedLimiterOptions, resolveLimiterOptions, validateCost } from './limiter-options';
import type { AfterBlock, CheckOptions, Decision, Limiter, LimiterOptions, WaitOptions } from './types';
import { Waiters } from './wait';

/**
 * One check on its way through the limiter: its inputs, prepared and validated by the caller, and
 * where its answer goes. The HTTP layer hands one per request; `check()` and `peek()` make their
 * own around a promise.
 */
export interface PreparedCheck {
  readonly identifier: string;
  /** A validated cost. */
  readonly cost: number;
  /** This check's own tiers; undefined: the limiter's. */
  readonly tiers: readonly Tier[] | undefined;
  /** This check's own bound on requests in progress; undefined: the limiter's. */
  readonly concurrency: number | undefined;
  /**
   * Called once: with the decision, or with the error alone. A denial the deny cache holds is
   * answered before `run` returns, so a flood of refused requests is answered synchronously.
   */
  answered(error: unknown, decision?: Decision): void;
}

/** The limiter as the HTTP layer uses it: the public {@link Limiter}, plus a check it has prepared itself. */
export interface LimiterCore extends Limiter {
  /** The smallest limit among `tiers`: no single request may cost more. */
  readonly smallestLimit: number;
  /** Milliseconds a lease lives unless renewed (with `concurrency`). */
  readonly leaseMs: number;
  /** Runs `check`, with no option object to read and no promise; it answers through `check.answered`. */
  run(check: PreparedCheck): void;
}

/** What a script call may change from a check's: the rest is a check's (counting, with the limiter's block). */
interface CallChanges {
  readonly now?: number | undefined;
  readonly dryRun?: boolean;
  readonly blockFor?: number;
  readonly countedAt?: number;
  readonly actualCost?: number;
  readonly lease?: LeaseCall | undefined;
}

const PEEK: CallChanges = { dryRun: true };

type RunCheck = CallbackStore['checkWithCallback'];

/** The limiter: runs an algorithm's scripts through a store, bounded by a timeout, behind a deny cache. */
class RateLimiter implements LimiterCore {
  readonly store: Store;
  readonly algorithm: AlgorithmName;
  readonly precision: number;
  readonly tiers: readonly Tier[];
  readonly prefix: string;
  readonly timeoutMs: number;
  readonly blockFor: number;
  readonly afterBlock: AfterBlock;
  readonly shadow: boolean;
  readonly concurrency: number;
  readonly smallestLimit: number;
  readonly leaseMs: number;
  /** What this limiter has warned about. */
  readonly warnings: Warnings;
  private readonly scripts: AlgorithmScripts;
  /** What decoding this limiter's replies needs to know of it. */
  private readonly decoding: DecodingLimiter;
  /** Whether a block this limiter starts wipes the counts (`afterBlock: 'reset'`). */
  private readonly blockResets: boolean;
  private readonly clock: (() => number) | undefined;
  private readonly denyCache: DenyCache | undefined;
  private readonly keys: KeyCache;
  private readonly leaseIds = new LeaseIds();
  private readonly deadlines: Deadlines;
  private readonly runStoreCheck: RunCheck;
  /** Undefined without the `metrics` option: then nothing is measured. */
  private readonly metrics: LimiterMetrics | undefined;
  /** Answers checks at once while the store keeps failing; undefined when turned off. */
  private readonly breaker: CircuitBreaker | undefined;
  private readonly refundLateCounts: boolean;
  /** The callers of `wait`, made on its first use. */
  private waiters: Waiters | undefined;
  private readonly changeLeaseOf: ChangeLease = (script, leaseKey, id) => this.changeLease(script, leaseKey, id);

  constructor(options: ResolvedLimiterOptions) {
    this.store = options.store;
    this.algorithm = options.algorithm;
    this.precision = options.precision;
    this.tiers = options.tiers;
    this.prefix = options.prefix;
    this.timeoutMs = options.timeoutMs;
    this.clock = options.clock;
    this.blockFor = options.blockFor;
    this.afterBlock = options.afterBlock;
    this.blockResets = options.afterBlock === 'reset';
    this.shadow = options.shadow;
    this.concurrency = options.concurrency;
    this.leaseMs = options.leaseMs;
    this.warnings = options.warnings;
    this.runStoreCheck = storeCheckOf(this.store);
    this.scripts = ALGORITHMS[this.algorithm];
    this.decoding = { layout: this.scripts.tierLayout, shadow: this.shadow };
    this.keys = new KeyCache(this.prefix, this.concurrency > 0);
    // A store that counts its connections lets the breaker probe as soon as one is made again.
    const { store } = options;
    const connectionsMade = (store.connectionsMade ?? store.readies)?.bind(store);
    const breaker = options.breaker === undefined ? undefined : new CircuitBreaker(options.breaker, Date.now, connectionsMade);
    this.breaker = breaker;
    this.refundLateCounts = options.refundLateCounts;
    this.deadlines = new Deadlines(this.timeoutMs, breaker === undefined ? undefined : (error) => breaker.failed(error));
    this.smallestLimit = smallestLimit(this.tiers);
    this.denyCache = options.denyCacheSize > 0 ? new DenyCache(options.denyCacheSize) : undefined;
    this.metrics = options.metrics === undefined ? undefined : new LimiterMetrics(options.metrics, this.prefix);
  }

  keyFor(identifier: string): string {
    return this.keys.keyFor(identifier);
  }

  check(identifier: string, options?: CheckOptions): Promise<Decision> {
    return this.promised(identifier, options, false);
  }

  peek(identifier: string, options?: CheckOptions): Promise<Decision> {
    return this.promised(identifier, options, true);
  }

  run(check: PreparedCheck): void {
    this.decide(check, false);
  }

  /** `check()` and `peek()`: the options validated, then the one path every check takes. */
  private promised(identifier: string, options: CheckOptions | undefined, dryRun: boolean): Promise<Decision> {
    let inputs: CallInputs;
    try {
      this.keyFor(identifier);
      inputs = callInputs(options, this, dryRun ? 'peek' : 'check');
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise((resolve, reject) => this.decide(new PromisedCheck(identifier, inputs, resolve, reject), dryRun));
  }

  /** The one path of every check and peek: the key, the call, then the store (or no store, for a cost that can never fit). */
  private decide(check: PreparedCheck, dryRun: boolean): void {
    let key: string;
    try {
      key = this.keyFor(check.identifier);
    } catch (error) {
      check.answered(error);
      return;
    }
    const tiers = check.tiers ?? this.tiers;
    const lease = this.leaseOf(check.concurrency ?? this.concurrency);
    const call = this.scriptCall(check.cost, tiers, dryRun ? (lease === undefined ? PEEK : { dryRun, lease }) : lease && { lease });
    // A peek decides nothing: only checks are counted.
    const answer = dryRun || this.metrics === undefined ? check : new MeteredCheck(check, this.metrics);
    const smallest = tiers === this.tiers ? this.smallestLimit : smallestLimit(tiers);
    if (call.cost > smallest || smallest === 0) this.decideBeyondLimits(answer, key, call);
    else this.ask(answer, key, call);
  }

  /** The one place a script call is made: a check's, with `changes`. */
  private scriptCall(cost: number, tiers: readonly Tier[], changes: CallChanges | undefined): ScriptCall {
    return {
      now: changes?.now ?? this.clock?.(),
      cost,
      dryRun: changes?.dryRun ?? false,
      blockFor: changes?.blockFor ?? this.blockFor,
      blockResets: this.blockResets,
      countedAt: changes?.countedAt ?? 0,
      actualCost: changes?.actualCost ?? 0,
      tiers,
      precision: this.precision,
      lease: changes?.lease,
    };
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
    const call = this.scriptCall(counted, tiers, { blockFor: 0, countedAt: decision.now, actualCost });
    return this.bounded(() => this.store.settle(this.scripts, key, call)).then(() => {
      // A check in flight may have cached a denial the settlement has since made untrue.
      this.denyCache?.delete(key);
    });
  }

  wait(identifier: string, options?: WaitOptions): Promise<Decision> {
    let inputs: ReturnType<typeof waitInputs>;
    try {
      inputs = waitInputs(options);
    } catch (error) {
      return Promise.reject(error);
    }
    this.waiters ??= new Waiters(
      (id, call) => this.check(id, call),
      (id, decision) => this.refund(id, decision),
    );
    return this.waiters.wait(identifier, inputs.check, inputs.maxWaitMs, inputs.signal);
  }

  reset(identifier: string): Promise<void> {
    let key: string;
    try {
      key = this.keyFor(identifier);
    } catch (error) {
      return Promise.reject(error);
    }
    this.denyCache?.delete(key);
    return this.bounded(() => this.store.reset(key));
  }

  /**
   * A cost above the smallest limit can never be allowed: it is refused without counting (and
   * without starting a block), with the identifier's counts as a peek sees them. A tier of limit
   * 0 refuses every cost above 0: it is left out of the peek, and with no other tier the store is
   * not asked at all.
   */
  private decideBeyondLimits(check: PreparedCheck, key: string, call: ScriptCall): void {
    const { tiers, cost } = call;
    const withQuota = tiersWithQuota(tiers);
    const context =
      withQuota === tiers ? undefined : { identifier: check.identifier, cost, now: call.now ?? Date.now(), shadow: this.shadow };
    if (context !== undefined && withQuota.length === 0) {
      check.answered(undefined, withoutQuota(undefined, tiers, context));
      return;
    }
    const refusal: PreparedCheck = {
      identifier: check.identifier,
      cost: 0,
      tiers: withQuota,
      concurrency: undefined,
      answered: (error, peek) => {
        if (peek === undefined) check.answered(error);
        else check.answered(undefined, context === undefined ? neverAllowed(peek, cost) : withoutQuota(peek, tiers, context));
      },
    };
    this.ask(refusal, key, this.scriptCall(0, withQuota, { now: call.now, dryRun: true, lease: call.lease }));
  }

  /** Answers `check` from the deny cache when it holds a denial; else asks the store, within the timeout. */
  private ask(check: PreparedCheck, key: string, call: ScriptCall): void {
    if (this.denyCache !== undefined) {
      const denied = this.denyCache.get(key, call.cost, call.tiers, call.now ?? Date.now());
      if (denied !== undefined) {
        check.answered(undefined, denied);
        return;
      }
    }
    const { breaker } = this;
    if (breaker !== undefined) {
      const refusal = breaker.refusal();
      if (refusal !== undefined) {
        check.answered(refusal);
        return;
      }
    }
    const pending = this.store.needsTimeout ? this.deadlines.start(check) : undefined;
    const { metrics } = this;
    const started = metrics === undefined ? 0 : performance.now();
    const replied: Done<RawReply> = (error, raw) => {
      // Measured even when it comes after the deadline: how long the store took is what it took.
      if (metrics !== undefined) metrics.storeAnswered(started, raw === undefined ? error : undefined);
      // A reply after the deadline does not reach the caller, who has had its timeout error.
      if (pending !== undefined && !this.deadlines.finish(pending)) {
        if (raw !== undefined && this.refundLateCounts) this.giveBackLate(check.identifier, key, raw, call);
        return;
      }
      // A failure that came at once (the connection is down) does not open the breaker: it spares
      // nobody a wait, and would only delay limiting once the store is back. It fails a probe. A
      // timeout the store reports itself (a client's own request timeout, as GLIDE's) is a timeout.
      if (raw === undefined) {
        if (error instanceof RateLimitTimeoutError) breaker?.failed(error);
        else breaker?.failedAtOnce(error);
        check.answered(error);
        return;
      }
      breaker?.succeeded();
      let decision: Decision;
      try {
        decision = this.decisionOf(check.identifier, key, raw, call);
      } catch (failure) {
        check.answered(failure);
        return;
      }
      check.answered(undefined, decision);
    };
    if (pending === undefined || this.store.whenConnected === undefined) this.sendCheck(key, call, replied, pending);
    else this.deadlines.sendThrough(pending, this.gate, () => this.sendCheck(key, call, replied, pending));
  }

  /** Hands a check to the store; one the store holds back unsent is withdrawn if `pending` times out first. */
  private sendCheck(key: string, call: ScriptCall, replied: Done<RawReply>, pending: Pending | undefined): void {
    if (call.lease === undefined) {
      const held = this.runStoreCheck(this.scripts, key, call, replied);
      if (held !== undefined && pending !== undefined && !pending.settled) pending.held = held;
    } else
      (this.store as Required<Store>).checkLease(this.scripts, key, leaseKeyOf(key), call).then((raw) => replied(undefined, raw), replied);
  }

  /** The store's `whenConnected`, looked up on every call (as its checks are). */
  private readonly gate: Gate = (connected) => this.store.whenConnected?.(connected);

  /**
   * A check that timed out was refused (or decided without the store), yet its late reply shows
   * the store counted it: gives back what it counted, and the lease it took.
   */
  private giveBackLate(identifier: string, key: string, raw: RawReply, call: ScriptCall): void {
    let decision: Decision;
    try {
      decision = decodeDecision(raw, call, identifier, this.decoding);
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
    const { dryRun, lease } = call;
    let decision = decodeDecision(raw, call, identifier, this.decoding);
    if (lease !== undefined && decision.allowed && !dryRun) {
      decision = { ...decision, lease: new HeldLease(this.changeLeaseOf, leaseKeyOf(key), lease.id) };
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

  /** A store call (`call` makes it), bounded by `timeoutMs`, and held back while the store connects. */
  private bounded<T>(call: () => Promise<T>): Promise<T> {
    return this.store.needsTimeout ? this.deadlines.bound(call, this.gate) : call();
  }

  /** The lease a check asks for under a bound of `concurrency` (0: none). */
  private leaseOf(concurrency: number): LeaseCall | undefined {
    return concurrency > 0 ? { concurrency, leaseMs: this.leaseMs, id: this.leaseIds.next() } : undefined;
  }

  /** Releases or renews a lease; true when it was live. */
  private changeLease(script: LeaseScript, leaseKey: string, id: string): Promise<boolean> {
    const call = this.scriptCall(0, NO_TIERS, { blockFor: 0, lease: { concurrency: 0, leaseMs: this.leaseMs, id } });
    return this.bounded(() => (this.store as Required<Store>).changeLease(script, leaseKey, call)).then(
      (raw) => raw[LEASE_CHANGE_REPLY.changed] === 1,
    );
  }
}

const NO_TIERS: readonly Tier[] = Object.freeze([]);

function ignore(): void {
  // on purpose: see the callers
}

/** A check of the public API: its answer settles a promise. */
class PromisedCheck implements PreparedCheck {
  readonly cost: number;
  readonly tiers: readonly Tier[];
  readonly concurrency: number;

  constructor(
    readonly identifier: string,
    inputs: CallInputs,
    private readonly resolve: (decision: Decision) => void,
    private readonly reject: (error: unknown) => void,
  ) {
    this.cost = inputs.cost;
    this.tiers = inputs.tiers;
    this.concurrency = inputs.concurrency;
  }

  answered(error: unknown, decision?: Decision): void {
    if (decision === undefined) this.reject(error);
    else this.resolve(decision);
  }
}

/** A check whose outcome the limiter's `metrics` count before it is answered. */
class MeteredCheck implements PreparedCheck {
  constructor(
    private readonly check: PreparedCheck,
    private readonly metrics: LimiterMetrics,
  ) {}

  get identifier(): string {
    return this.check.identifier;
  }

  get cost(): number {
    return this.check.cost;
  }

  get tiers(): readonly Tier[] | undefined {
    return this.check.tiers;
  }

  get concurrency(): number | undefined {
    return this.check.concurrency;
  }

  answered(error: unknown, decision?: Decision): void {
    this.metrics.record(error, decision);
    this.check.answered(error, decision);
  }
}

/** How the limiter runs a store's check: its callback form where it has one, else its promise. */
function storeCheckOf(store: Store): RunCheck {
  const callbackStore = store as Partial<CallbackStore>;
  // Looked up on every call, not bound once, so a store's method replaced later (a spy) is the one used.
  if (typeof callbackStore.checkWithCallback === 'function')
    return (scripts, key, call, done) => (store as CallbackStore).checkWithCallback(scripts, key, call, done);
  return (scripts, key, call, done) => {
    let reply: Promise<RawReply>;
    try {
      reply = store.check(scripts, key, call);
    } catch (error) {
      done(error);
      return undefined;
    }
    reply.then(
      (raw) => (raw === undefined ? done(new TypeError('store.check() resolved to undefined, not a script reply')) : done(undefined, raw)),
      done,
    );
    return undefined;
  };
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
