/**
 * The one path every HTTP request takes, for both frameworks: skip, identify, cost and
 * limits (each may be async), check, hooks, headers, then go on, deny or fail; and, for
 * `skipSuccessfulRequests` / `skipFailedRequests`, the refund once the response is done.
 * An adapter supplies an {@link HttpPort}, the few framework calls this path needs.
 */
import { type Awaitable, isPromiseLike, whenSettled, whenSettledOrFailed } from '../async';
import { type LimiterCore, limiterFromResolved } from '../core/limiter';
import { type ResolvedLimiterOptions, resolveLimiterOptions, validateCost } from '../core/limiter-options';
import type { Decision, Lease } from '../core/types';
import { MemoryStore } from '../stores/memory';
import type { Tier } from '../tiers';
import { positiveInteger } from '../validate';
import { secondsUntil } from './headers';
import {
  defaultDenialJson,
  type HttpOptions,
  limiterOptionsOf,
  type ResolvedHttpOptions,
  resolveFailMode,
  resolveHttpOptions,
} from './http-options';
import { type CountedBy, warnIfCountedTwice, warnOnSharedPrefix, warnStoreFailing } from './misconfiguration';

/** Continues the framework's chain: with an error, into its error handling. */
export type Proceed = (error?: Error) => void;

/** A denied request's answer, ready to send. */
interface DenialResponse {
  readonly statusCode: number;
  /** Whole seconds, rounded up, as sent in `Retry-After`; undefined (and no `Retry-After`) for a cost that can never fit. */
  readonly retryAfter: number | undefined;
  /** Text, an object for the framework to send as JSON, or JSON text already (see `bodyIsJson`). */
  readonly body: string | object;
  /** `true` for the default body: `body` is JSON text, sent as `application/json` without serializing it again. */
  readonly bodyIsJson: boolean;
  readonly decision: Decision;
}

/** The framework calls the shared path needs. */
export interface HttpPort<Req, Res> {
  setHeader(response: Res, name: string, value: string): void;
  /** Keeps the decision on the request (`req.rateLimit`, `request.rateLimit`). */
  attach(request: Req, decision: Decision): void;
  /** Answers a denied request; its rate-limit headers and `Retry-After` are already set. */
  deny(request: Req, response: Res, denial: DenialResponse, proceed: Proceed): void;
  /** Answers `503` while the store fails, with `failMode: 'closed'`. */
  unavailable(response: Res): void;
  /** Calls `done` once the response is over: `true` when it was sent in full, `false` when the connection closed first. */
  whenDone(response: Res, done: (finished: boolean) => void): void;
  /** The status of a response. */
  statusOf(response: Res): number;
}

/** What one request is checked with. */
interface Check {
  readonly identifier: string;
  readonly cost: number;
  /** This request's own tiers, when limits depend on the request. */
  readonly tiers: readonly Tier[] | undefined;
  /** This request's own bound on requests in progress, when it depends on the request. */
  readonly concurrency: number | undefined;
}

/** The request property holding its {@link CountedBy} list (declared by the Fastify plugin as a request decorator). */
export const COUNTED: unique symbol = Symbol('ratewarden.counted');

type RequestRecord = { [COUNTED]?: CountedBy };

/** Forgets what every limiter that counted `request` counted for it (see `HttpLimiter.resetRequest`). */
export function resetEveryCount(request: object): Promise<void> {
  const resets: Promise<void>[] = [];
  for (let counted = (request as RequestRecord)[COUNTED]; counted !== undefined; counted = counted.next) {
    resets.push(counted.limiter.reset(counted.identifier));
  }
  return Promise.all(resets).then(() => undefined);
}

/** A limiter with every HTTP option resolved once, at construction, and the adapter's port. */
export class HttpLimiter<Req, Res> {
  readonly limiter: LimiterCore;
  private readonly options: ResolvedHttpOptions<Req, Res>;
  private readonly limiterOptions: ResolvedLimiterOptions;
  /**
   * With `failMode: 'local'`, the limiter of this process that decides while the store fails
   * (made on the first failure), and its store; dropped, counts and all, once the store answers.
   */
  private local: { readonly limiter: LimiterCore; readonly store: MemoryStore } | undefined;

  /** `options` must already have passed the adapter's unknown-key check. */
  constructor(
    options: HttpOptions<Req, Res>,
    private readonly port: HttpPort<Req, Res>,
  ) {
    // A check that timed out was refused (or decided locally) unless the limiter fails open: its late count is given back.
    const refundLateCounts = resolveFailMode(options.failMode) !== 'open';
    this.limiterOptions = { ...resolveLimiterOptions(limiterOptionsOf(options as HttpOptions<unknown, unknown>)), refundLateCounts };
    this.limiter = limiterFromResolved(this.limiterOptions);
    this.options = resolveHttpOptions(options, this.limiter, port.statusOf);
    // With limits that depend on the request, two limiters on one prefix may well differ on purpose.
    if (this.options.tiersOf === undefined) warnOnSharedPrefix(this.limiter);
  }

  /**
   * Limits one request. A throw or rejection of the app's own functions (identify, cost,
   * skip, limits, message) goes to `onError` and to `proceed(error)`, never to an unhandled
   * rejection and never to a silent allow; a store failure becomes `failMode`.
   */
  handle(request: Req, response: Res, proceed: Proceed): void {
    const { skip, costOf, tiersOf, concurrencyOf, identify, fixedCost } = this.options;
    if (skip === undefined && costOf === undefined && tiersOf === undefined && concurrencyOf === undefined) {
      // Static options: only the identifier to find, no object built before the check.
      let identifier: string | Promise<string>;
      try {
        identifier = identify(request);
      } catch (error) {
        this.hookFailed(error, request, proceed);
        return;
      }
      if (typeof identifier === 'string') this.check(identifier, fixedCost, undefined, undefined, request, response, proceed);
      else {
        identifier.then(
          (settled) => this.check(settled, fixedCost, undefined, undefined, request, response, proceed),
          (error: unknown) => this.hookFailed(error, request, proceed),
        );
      }
      return;
    }
    let check: Check | undefined | PromiseLike<Check | undefined>;
    try {
      check = this.prepare(request);
    } catch (error) {
      this.hookFailed(error, request, proceed);
      return;
    }
    if (check === undefined) proceed();
    else if (isPromiseLike(check)) {
      check.then(
        (settled) => (settled === undefined ? proceed() : this.checkPrepared(settled, request, response, proceed)),
        (error: unknown) => this.hookFailed(error, request, proceed),
      );
    } else this.checkPrepared(check, request, response, proceed);
  }

  /** Skip, identify, cost and limits, in that order; undefined when the request is skipped. */
  private prepare(request: Req): Check | undefined | PromiseLike<Check | undefined> {
    const { skip } = this.options;
    if (skip === undefined) return this.identify(request);
    const skipped = skip(request);
    if (isPromiseLike(skipped)) return Promise.resolve(skipped).then((yes) => (yes ? undefined : this.identify(request)));
    return skipped ? undefined : this.identify(request);
  }

  private identify(request: Req): Check | PromiseLike<Check> {
    const identifier = this.options.identify(request);
    return typeof identifier === 'string' ? this.measure(identifier, request) : identifier.then((id) => this.measure(id, request));
  }

  /** The cost and, when they depend on the request, the tiers and the bound on requests in progress of an identified request. */
  private measure(identifier: string, request: Req): Check | PromiseLike<Check> {
    const { costOf, tiersOf, concurrencyOf, fixedCost } = this.options;
    if (costOf === undefined && tiersOf === undefined && concurrencyOf === undefined) {
      return { identifier, cost: fixedCost, tiers: undefined, concurrency: undefined };
    }
    return whenSettled(costOf === undefined ? fixedCost : costOf(request), (cost) =>
      whenSettled(tiersOf === undefined ? undefined : tiersOf(request), (tiers) =>
        whenSettled(concurrencyOf === undefined ? undefined : concurrencyOf(request), (concurrency) => ({
          identifier,
          cost: validateCost(cost),
          tiers,
          concurrency: concurrency === undefined ? undefined : positiveInteger(concurrency, 'concurrency'),
        })),
      ),
    );
  }

  private checkPrepared(check: Check, request: Req, response: Res, proceed: Proceed): void {
    this.check(check.identifier, check.cost, check.tiers, check.concurrency, request, response, proceed);
  }

  private check(
    identifier: string,
    cost: number,
    tiers: readonly Tier[] | undefined,
    concurrency: number | undefined,
    request: Req,
    response: Res,
    proceed: Proceed,
  ): void {
    const answer = (error: unknown, decision?: Decision): void => {
      if (decision === undefined) {
        this.fail(error, request, response, proceed);
        if (this.options.failMode === 'local') this.decideLocally({ identifier, cost, tiers, concurrency }, request, response, proceed);
        return;
      }
      // The store answers again: the local counts are dropped, not merged.
      if (this.local !== undefined) this.dropLocal();
      this.answer(this.limiter, decision, identifier, request, response, proceed);
    };
    const cached = this.limiter.checkPrepared(identifier, cost, tiers, answer, concurrency);
    if (cached !== undefined) this.answer(this.limiter, cached, identifier, request, response, proceed);
  }

  /** `failMode: 'local'`: decides with this process's own limiter, as the store would with only this process's requests. */
  private decideLocally({ identifier, cost, tiers, concurrency }: Check, request: Req, response: Res, proceed: Proceed): void {
    if (this.local === undefined) {
      const store = new MemoryStore();
      this.local = { store, limiter: limiterFromResolved({ ...this.limiterOptions, store, breaker: undefined, refundLateCounts: false }) };
    }
    const { limiter } = this.local;
    const answer = (error: unknown, decision?: Decision): void => {
      if (decision === undefined) this.hookFailed(error, request, proceed);
      else this.answer(limiter, decision, identifier, request, response, proceed);
    };
    const cached = limiter.checkPrepared(identifier, cost, tiers, answer, concurrency);
    if (cached !== undefined) this.answer(limiter, cached, identifier, request, response, proceed);
  }

  private dropLocal(): void {
    this.local?.store.shutdown();
    this.local = undefined;
  }

  /** Answers `decision`, made by `limiter` (the store's, or the local one of `failMode: 'local'`). */
  private answer(limiter: LimiterCore, decision: Decision, identifier: string, request: Req, response: Res, proceed: Proceed): void {
    try {
      this.respond(limiter, decision, identifier, request, response, proceed);
    } catch (error) {
      this.hookFailed(error, request, proceed);
    }
  }

  private respond(limiter: LimiterCore, decision: Decision, identifier: string, request: Req, response: Res, proceed: Proceed): void {
    const { onDecision, onNearLimit, nearLimitBand, settleAfter } = this.options;
    // First, so that no throw below can keep the slot from being given back.
    if (decision.lease !== undefined) this.holdLease(decision.lease, request, response);
    onDecision?.(decision, request);
    if (onNearLimit !== undefined && decision.ratio >= nearLimitBand[0] && decision.ratio <= nearLimitBand[1]) {
      onNearLimit(decision, request);
    }
    if (decision.counted) {
      const record = request as RequestRecord;
      const counted: CountedBy = { limiter, identifier, next: record[COUNTED] };
      if (counted.next !== undefined) warnIfCountedTwice(counted);
      record[COUNTED] = counted;
    }
    // In shadow mode a would-be denial is reported (onDecision, request.rateLimit), never enforced.
    if (decision.allowed || decision.shadow) {
      // A shadow would-be denial counted nothing and is charged nothing: shadow mode counts as enforcing would.
      if (settleAfter !== undefined && (decision.counted || (this.options.chargesAfter && decision.allowed))) {
        this.port.whenDone(response, (finished) =>
          this.afterResponse(limiter, settleAfter, identifier, decision, request, response, finished),
        );
      }
      this.sendHeaders(decision, request, response);
      proceed();
      return;
    }
    // A cost that can never fit waits forever: no Retry-After would make it pass.
    const retryAfter = decision.retryAfterMs === Infinity ? undefined : secondsUntil(decision.now + decision.retryAfterMs, decision.now);
    const { message } = this.options;
    const body = typeof message === 'function' ? message(request, decision) : message;
    if (isPromiseLike(body)) {
      Promise.resolve(body).then(
        (settled) => this.deny(decision, retryAfter, settled, request, response, proceed),
        (error: unknown) => this.hookFailed(error, request, proceed),
      );
    } else this.deny(decision, retryAfter, body, request, response, proceed);
  }

  private deny(
    decision: Decision,
    retryAfter: number | undefined,
    body: string | object | undefined,
    request: Req,
    response: Res,
    proceed: Proceed,
  ): void {
    const denial: DenialResponse = {
      statusCode: decision.concurrency?.refused === true ? this.options.concurrencyStatusCode : this.options.statusCode,
      retryAfter,
      body: body ?? defaultDenialJson(retryAfter),
      bodyIsJson: body === undefined,
      decision,
    };
    this.sendHeaders(decision, request, response);
    if (retryAfter !== undefined) this.port.setHeader(response, 'Retry-After', String(retryAfter));
    this.port.deny(request, response, denial, proceed);
  }

  private sendHeaders(decision: Decision, request: Req, response: Res): void {
    this.port.attach(request, decision);
    this.options.writeHeaders?.(decision, response, this.port.setHeader);
  }

  /**
   * Holds `lease` while the response is in progress: renewed every `leaseMs / 2`, released once
   * when the response is over (sent in full, or the connection closed first).
   */
  private holdLease(lease: Lease, request: Req, response: Res): void {
    const renewal = setInterval(() => {
      lease.renew().then(undefined, (error: unknown) => this.storeFailed(error, request));
    }, this.limiter.leaseMs / 2);
    renewal.unref();
    this.port.whenDone(response, () => {
      clearInterval(renewal);
      lease.release().then(undefined, (error: unknown) => this.storeFailed(error, request));
    });
  }

  /**
   * Forgets what this limiter counted for `request` (its identifier's whole count, as
   * `limiter.reset()` does), e.g. after a successful login; nothing when it counted nothing.
   */
  resetRequest(request: Req): Promise<void> {
    const resets: Promise<void>[] = [];
    for (let counted = (request as RequestRecord)[COUNTED]; counted !== undefined; counted = counted.next) {
      if (counted.limiter === this.limiter || counted.limiter === this.local?.limiter)
        resets.push(counted.limiter.reset(counted.identifier));
    }
    return Promise.all(resets).then(() => undefined);
  }

  /** After the response: settles the request to what it cost (0 when it should not have counted). */
  private afterResponse(
    limiter: LimiterCore,
    settleAfter: NonNullable<ResolvedHttpOptions<Req, Res>['settleAfter']>,
    identifier: string,
    decision: Decision,
    request: Req,
    response: Res,
    finished: boolean,
  ): void {
    let actual: Awaitable<number | undefined>;
    try {
      actual = settleAfter(request, response, finished);
    } catch (error) {
      this.report(error, request);
      return;
    }
    whenSettledOrFailed(
      actual,
      (cost) => {
        if (cost === undefined) return;
        let actualCost: number;
        try {
          actualCost = validateCost(cost, Infinity, 'costAfter');
        } catch (error) {
          this.report(error, request);
          return;
        }
        limiter.settle(identifier, decision, actualCost).then(undefined, (error: unknown) => this.storeFailed(error, request));
      },
      (error) => this.report(error, request),
    );
  }

  private hookFailed(error: unknown, request: Req, proceed: Proceed): void {
    this.report(error, request);
    proceed(error instanceof Error ? error : new Error(String(error)));
  }

  /** A check the store failed: reported, then answered by `failMode` (`'local'`: by the caller, with the local limiter). */
  private fail(error: unknown, request: Req, response: Res, proceed: Proceed): void {
    this.storeFailed(error, request);
    const { failMode } = this.options;
    if (failMode === 'closed') this.port.unavailable(response);
    else if (failMode === 'open') proceed();
  }

  /** A store failure goes to `onError`; with none, it must not pass in silence. */
  private storeFailed(error: unknown, request: Req): void {
    if (this.options.onError === undefined) warnStoreFailing(error, this.options.failMode);
    else this.report(error, request);
  }

  /** Hands `error` to `onError`; a failing error hook must not turn a degraded store into a crashed request. */
  private report(error: unknown, request: Req): void {
    try {
      this.options.onError?.(error, request);
    } catch {
      // Ignored on purpose: see above.
    }
  }
}
