/**
 * The one path every HTTP request takes, whatever the framework: skip, identify, cost and
 * limits (each may be async), check, hooks, headers, then go on, deny or fail; and, for
 * `skipSuccessfulRequests` / `skipFailedRequests`, the refund once the response is done.
 * An adapter supplies an {@link HttpPort}, the few framework calls this path needs.
 */
import { type Awaitable, isPromiseLike, whenSettled, whenSettledOrFailed } from '../async';
import { type LimiterCore, limiterFromResolved, type PreparedCheck } from '../core/limiter';
import { type ResolvedLimiterOptions, resolveLimiterOptions, validateCost } from '../core/limiter-options';
import type { Decision, Lease, Limiter } from '../core/types';
import { MemoryStore } from '../stores/memory';
import type { Tier } from '../tiers';
import { positiveInteger } from '../validate';
import { secondsUntil } from './headers';
import {
  defaultDenialJson,
  type HttpOptions,
  JSON_CONTENT_TYPE,
  limiterOptionsOf,
  type ResolvedHttpOptions,
  resolveFailMode,
  resolveHttpOptions,
  TEXT_CONTENT_TYPE,
} from './http-options';
import { type CountedBy, warnIfCountedTwice, warnOnSharedPrefix, warnStoreFailing } from './misconfiguration';

/** Continues the framework's chain: with an error, into its error handling. */
export type Proceed = (error?: Error) => void;

/**
 * A denied request's answer, ready to send. Its body is text, sent as is with `contentType` (JSON
 * text for the default body, which is not serialized again; plain text for a `message` string), or
 * an object with no `contentType`, for the framework to send as JSON.
 */
type DenialResponse = {
  readonly statusCode: number;
  /** Whole seconds, rounded up, as sent in `Retry-After`; undefined (and no `Retry-After`) for a cost that can never fit. */
  readonly retryAfter: number | undefined;
  readonly decision: Decision;
} & ({ readonly body: string; readonly contentType: string } | { readonly body: object; readonly contentType: undefined });

/** The denial that sends `message`, the option's value (undefined: the default JSON body). */
function denialOf(
  message: string | object | undefined,
  statusCode: number,
  retryAfter: number | undefined,
  decision: Decision,
): DenialResponse {
  if (message === undefined)
    return { statusCode, retryAfter, decision, body: defaultDenialJson(retryAfter), contentType: JSON_CONTENT_TYPE };
  if (typeof message === 'string') return { statusCode, retryAfter, decision, body: message, contentType: TEXT_CONTENT_TYPE };
  return { statusCode, retryAfter, decision, body: message, contentType: undefined };
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
  /**
   * The object that keeps, under {@link COUNTED}, the limiters that counted a request: the request
   * itself unless that is costly. `response` is given when the shared path has it at hand.
   */
  countsHolder(request: Req, response?: Res): object;
}

/** The property holding a request's {@link CountedBy} list, on its port's `countsHolder` (declared by the Fastify plugin as a request decorator). */
export const COUNTED: unique symbol = Symbol('ratewarden.counted');

type RequestRecord = { [COUNTED]?: CountedBy };

/**
 * Forgets what the limiters that counted a request (the list on `holder`) counted for it (each
 * identifier's whole count, as `limiter.reset()` does): every one of them, or those `which` picks.
 */
export function resetEveryCount(holder: object, which?: (limiter: Limiter) => boolean): Promise<void> {
  const resets: Promise<void>[] = [];
  for (let counted = (holder as RequestRecord)[COUNTED]; counted !== undefined; counted = counted.next) {
    if (which === undefined || which(counted.limiter)) resets.push(counted.limiter.reset(counted.identifier));
  }
  return Promise.all(resets).then(() => undefined);
}

/**
 * Where a failure goes. Each is reported (to `onError`; a store failure with no `onError`, as a
 * warning); then a request still waiting for its answer gets one.
 */
enum Failure {
  /** The app's own function (identify, cost, skip, limits, message...) threw or rejected: the framework's error handling answers. */
  App,
  /** The store failed a check: `failMode` answers. */
  Check,
  /** The store failed after the answer (a settlement, a lease renewal or release): reported only. */
  StoreLater,
  /** The app's function failed after the answer (`costAfter`, `skipSuccessfulRequests`...): reported only. */
  AppLater,
}

/**
 * One request on the shared path: what it is checked with, once known, and where the answer
 * goes. The limiter answers it through `answered` (no closure per request).
 */
class HttpCheck<Req, Res> implements PreparedCheck {
  identifier = '';
  cost = 0;
  /** This request's own tiers, when limits depend on the request. */
  tiers: readonly Tier[] | undefined = undefined;
  /** This request's own bound on requests in progress, when it depends on the request. */
  concurrency: number | undefined = undefined;
  /** Which limiter decides it: the store's, or the local one of `failMode: 'local'` while the store fails. */
  limiter: LimiterCore;

  constructor(
    private readonly owner: HttpLimiter<Req, Res>,
    readonly request: Req,
    readonly response: Res,
    readonly proceed: Proceed,
  ) {
    this.limiter = owner.limiter;
  }

  answered(error: unknown, decision?: Decision): void {
    this.owner.answered(this, error, decision);
  }
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
    this.options = resolveHttpOptions(options, this.limiter, port.statusOf, this.limiterOptions.warnings);
    // With limits that depend on the request, two limiters on one prefix may well differ on purpose.
    if (this.options.tiersOf === undefined) warnOnSharedPrefix(this.limiter);
  }

  /**
   * Limits one request. A throw or rejection of the app's own functions (identify, cost,
   * skip, limits, message) goes to `onError` and to `proceed(error)`, never to an unhandled
   * rejection and never to a silent allow; a store failure becomes `failMode`.
   */
  handle(request: Req, response: Res, proceed: Proceed): void {
    const check = new HttpCheck(this, request, response, proceed);
    const { skip, costOf, tiersOf, concurrencyOf, identify } = this.options;
    check.cost = this.options.fixedCost;
    if (skip === undefined && costOf === undefined && tiersOf === undefined && concurrencyOf === undefined) {
      // Static options: only the identifier to find.
      let identifier: string | Promise<string>;
      try {
        identifier = identify(request);
      } catch (error) {
        this.failed(check, error, Failure.App);
        return;
      }
      if (typeof identifier === 'string') this.run(check, identifier);
      else {
        identifier.then(
          (settled) => this.run(check, settled),
          (error: unknown) => this.failed(check, error, Failure.App),
        );
      }
      return;
    }
    let prepared: boolean | PromiseLike<boolean>;
    try {
      prepared = this.prepare(check);
    } catch (error) {
      this.failed(check, error, Failure.App);
      return;
    }
    if (prepared === false) proceed();
    else if (prepared === true) check.limiter.run(check);
    else {
      prepared.then(
        (ready) => (ready ? check.limiter.run(check) : proceed()),
        (error: unknown) => this.failed(check, error, Failure.App),
      );
    }
  }

  private run(check: HttpCheck<Req, Res>, identifier: string): void {
    check.identifier = identifier;
    check.limiter.run(check);
  }

  /** Skip, identify, cost and limits, in that order, into `check`; false when the request is skipped. */
  private prepare(check: HttpCheck<Req, Res>): boolean | PromiseLike<boolean> {
    const { skip } = this.options;
    if (skip === undefined) return this.identify(check);
    const skipped = skip(check.request);
    if (isPromiseLike(skipped)) return Promise.resolve(skipped).then((yes) => (yes ? false : this.identify(check)));
    return skipped ? false : this.identify(check);
  }

  private identify(check: HttpCheck<Req, Res>): true | PromiseLike<true> {
    const identifier = this.options.identify(check.request);
    if (typeof identifier === 'string') {
      check.identifier = identifier;
      return this.measure(check);
    }
    return identifier.then((settled) => {
      check.identifier = settled;
      return this.measure(check);
    });
  }

  /** The cost and, when they depend on the request, the tiers and the bound on requests in progress of an identified request. */
  private measure(check: HttpCheck<Req, Res>): true | PromiseLike<true> {
    const { costOf, tiersOf, concurrencyOf } = this.options;
    if (costOf === undefined && tiersOf === undefined && concurrencyOf === undefined) return true;
    const { request } = check;
    return whenSettled(costOf === undefined ? check.cost : costOf(request), (cost) =>
      whenSettled(tiersOf === undefined ? undefined : tiersOf(request), (tiers) =>
        whenSettled(concurrencyOf === undefined ? undefined : concurrencyOf(request), (concurrency): true => {
          check.cost = validateCost(cost);
          check.tiers = tiers;
          check.concurrency = concurrency === undefined ? undefined : positiveInteger(concurrency, 'concurrency');
          return true;
        }),
      ),
    );
  }

  /** The limiter's answer to `check`: a failure of the store's limiter goes to `failMode`; a decision is answered. */
  answered(check: HttpCheck<Req, Res>, error: unknown, decision: Decision | undefined): void {
    const fromStore = check.limiter === this.limiter;
    if (decision === undefined) {
      this.failed(check, error, fromStore ? Failure.Check : Failure.App);
      return;
    }
    // The store answers again: the local counts are dropped, not merged. A cached denial is no answer of the store.
    if (fromStore && this.local !== undefined && !decision.cached) this.dropLocal();
    try {
      this.respond(check, decision);
    } catch (failure) {
      this.failed(check, failure, Failure.App);
    }
  }

  /** `failMode: 'local'`: decides with this process's own limiter, as the store would with only this process's requests. */
  private decideLocally(check: HttpCheck<Req, Res>): void {
    if (this.local === undefined) {
      const store = new MemoryStore();
      this.local = { store, limiter: limiterFromResolved({ ...this.limiterOptions, store, breaker: undefined, refundLateCounts: false }) };
    }
    check.limiter = this.local.limiter;
    check.limiter.run(check);
  }

  private dropLocal(): void {
    this.local?.store.shutdown();
    this.local = undefined;
  }

  private respond(check: HttpCheck<Req, Res>, decision: Decision): void {
    const { onDecision, onNearLimit, nearLimitBand, settleAfter } = this.options;
    const { request } = check;
    // First, so that no throw below can keep the slot from being given back.
    if (decision.lease !== undefined) this.holdLease(check, decision.lease);
    onDecision?.(decision, request);
    if (onNearLimit !== undefined && decision.ratio >= nearLimitBand[0] && decision.ratio <= nearLimitBand[1]) {
      onNearLimit(decision, request);
    }
    if (decision.counted) {
      const record = this.port.countsHolder(request, check.response) as RequestRecord;
      const counted: CountedBy = { limiter: check.limiter, identifier: check.identifier, next: record[COUNTED] };
      if (counted.next !== undefined) warnIfCountedTwice(counted, this.limiterOptions.warnings);
      record[COUNTED] = counted;
    }
    // In shadow mode a would-be denial is reported (onDecision, request.rateLimit), never enforced.
    if (decision.allowed || decision.shadow) {
      // A shadow would-be denial counted nothing and is charged nothing: shadow mode counts as enforcing would.
      if (settleAfter !== undefined && (decision.counted || (this.options.settlesEveryRequest && decision.allowed))) {
        this.port.whenDone(check.response, (finished) => this.afterResponse(check, decision, finished));
      }
      this.sendHeaders(check, decision);
      check.proceed();
      return;
    }
    // A cost that can never fit waits forever: no Retry-After would make it pass.
    const retryAfter = decision.retryAfterMs === Infinity ? undefined : secondsUntil(decision.now + decision.retryAfterMs, decision.now);
    const { message } = this.options;
    const body = typeof message === 'function' ? message(request, decision) : message;
    if (isPromiseLike(body)) {
      Promise.resolve(body).then(
        (settled) => this.deny(check, decision, retryAfter, settled),
        (error: unknown) => this.failed(check, error, Failure.App),
      );
    } else this.deny(check, decision, retryAfter, body);
  }

  private deny(check: HttpCheck<Req, Res>, decision: Decision, retryAfter: number | undefined, body: string | object | undefined): void {
    const statusCode = decision.concurrency?.refused === true ? this.options.concurrencyStatusCode : this.options.statusCode;
    const denial = denialOf(body, statusCode, retryAfter, decision);
    this.sendHeaders(check, decision);
    if (retryAfter !== undefined) this.port.setHeader(check.response, 'Retry-After', String(retryAfter));
    this.port.deny(check.request, check.response, denial, check.proceed);
  }

  private sendHeaders(check: HttpCheck<Req, Res>, decision: Decision): void {
    this.port.attach(check.request, decision);
    this.options.writeHeaders?.(decision, check.response, this.port.setHeader);
  }

  /**
   * Holds `lease` while the response is in progress: renewed every `leaseMs / 2`, released once
   * when the response is over (sent in full, or the connection closed first).
   */
  private holdLease(check: HttpCheck<Req, Res>, lease: Lease): void {
    const storeFailed = (error: unknown) => this.failed(check, error, Failure.StoreLater);
    const renewal = setInterval(() => {
      lease.renew().then(undefined, storeFailed);
    }, this.limiter.leaseMs / 2);
    renewal.unref();
    this.port.whenDone(check.response, () => {
      clearInterval(renewal);
      lease.release().then(undefined, storeFailed);
    });
  }

  /**
   * Forgets what this limiter counted for `request` (its identifier's whole count, as
   * `limiter.reset()` does), e.g. after a successful login; nothing when it counted nothing.
   */
  resetRequest(request: Req): Promise<void> {
    return resetEveryCount(this.port.countsHolder(request), (limiter) => limiter === this.limiter || limiter === this.local?.limiter);
  }

  /** After the response: settles the request to what it cost (0 when it should not have counted). */
  private afterResponse(check: HttpCheck<Req, Res>, decision: Decision, finished: boolean): void {
    const settleAfter = this.options.settleAfter as NonNullable<ResolvedHttpOptions<Req, Res>['settleAfter']>;
    let actual: Awaitable<number | undefined>;
    try {
      actual = settleAfter(check.request, check.response, finished);
    } catch (error) {
      this.failed(check, error, Failure.AppLater);
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
          this.failed(check, error, Failure.AppLater);
          return;
        }
        check.limiter
          .settle(check.identifier, decision, actualCost)
          .then(undefined, (error: unknown) => this.failed(check, error, Failure.StoreLater));
      },
      (error) => this.failed(check, error, Failure.AppLater),
    );
  }

  /** The one place a failure goes: reported, then, for a request still waiting, answered (see {@link Failure}). */
  private failed(check: HttpCheck<Req, Res>, error: unknown, failure: Failure): void {
    const { onError, failMode } = this.options;
    const fromStore = failure === Failure.Check || failure === Failure.StoreLater;
    // A store failure must not pass in silence; a failing error hook must not turn a degraded store into a crashed request.
    if (fromStore && onError === undefined) warnStoreFailing(error, failMode, this.limiterOptions.warnings);
    else {
      try {
        onError?.(error, check.request);
      } catch {
        // Ignored on purpose: see above.
      }
    }
    if (failure === Failure.App) check.proceed(error instanceof Error ? error : new Error(String(error)));
    else if (failure === Failure.Check) {
      if (failMode === 'closed') this.port.unavailable(check.response);
      else if (failMode === 'open') check.proceed();
      else this.decideLocally(check);
    }
  }
}
