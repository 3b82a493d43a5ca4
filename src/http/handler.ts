/**
 * The one path every HTTP request takes, for both frameworks: skip, identify, cost, check,
 * hooks, headers, then go on, deny or fail. An adapter supplies an {@link HttpPort}, the few
 * framework calls this path needs, and nothing else.
 */
import { secondsUntil } from '../headers';
import { RateLimiter } from '../limiter';
import { LIMITER_OPTIONS, resolveLimiterOptions, validateCost } from '../options/limiter';
import type { Decision, LimiterOptions } from '../types';
import { type HttpOptions, type ResolvedHttpOptions, resolveHttpOptions } from './options';
import { warnOnSharedPrefix } from './shared-prefix';

/** Continues the framework's chain: with an error, into its error handling. */
export type Proceed = (error?: Error) => void;

/** A denied request's answer, ready to send. */
export interface DenialResponse {
  readonly statusCode: number;
  /** Whole seconds, rounded up, as sent in `Retry-After`. */
  readonly retryAfter: number;
  readonly body: string | object;
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
}

/** A limiter with every HTTP option resolved once, at construction, and the adapter's port. */
export class HttpLimiter<Req, Res> {
  readonly limiter: RateLimiter;
  private readonly options: ResolvedHttpOptions<Req>;

  /** `options` must already have passed the adapter's unknown-key check. */
  constructor(
    options: HttpOptions<Req>,
    private readonly port: HttpPort<Req, Res>,
  ) {
    const limiterOptions: Record<string, unknown> = {};
    for (const key of LIMITER_OPTIONS) {
      const value = (options as Record<string, unknown>)[key];
      if (value !== undefined) limiterOptions[key] = value;
    }
    this.limiter = new RateLimiter(resolveLimiterOptions(limiterOptions as LimiterOptions));
    warnOnSharedPrefix(this.limiter);
    this.options = resolveHttpOptions(options, this.limiter.tiers);
  }

  /**
   * Limits one request. Errors of the app's own callbacks (identify, cost, skip, hooks) go
   * to `proceed(error)`; a store failure becomes `failMode`.
   */
  handle(request: Req, response: Res, proceed: Proceed): void {
    const { skip, identify, costOf } = this.options;
    let identifier: string;
    let cost: number;
    try {
      if (skip?.(request)) {
        proceed();
        return;
      }
      identifier = identify(request);
      cost = costOf === undefined ? this.options.fixedCost : validateCost(costOf(request), this.options.smallestLimit);
    } catch (error) {
      proceed(error as Error);
      return;
    }
    this.limiter
      .check(identifier, { cost })
      .then(
        (decision) => this.respond(decision, request, response, proceed),
        (error: unknown) => this.fail(error, request, response, proceed),
      )
      .catch((error: unknown) => proceed(error as Error));
  }

  private respond(decision: Decision, request: Req, response: Res, proceed: Proceed): void {
    const { onDecision, onNearLimit, nearLimitBand, writeHeaders } = this.options;
    onDecision?.(decision, request);
    if (onNearLimit !== undefined && decision.ratio >= nearLimitBand[0] && decision.ratio <= nearLimitBand[1]) {
      onNearLimit(decision, request);
    }
    let denial: DenialResponse | undefined;
    if (!decision.allowed) {
      const retryAfter = secondsUntil(decision.now + decision.retryAfterMs, decision.now);
      const { message } = this.options;
      const body = (typeof message === 'function' ? message(request, decision) : message) ?? { error: 'Too Many Requests', retryAfter };
      denial = { statusCode: this.options.statusCode, retryAfter, body, decision };
    }
    this.port.attach(request, decision);
    writeHeaders?.(decision, response, this.port.setHeader);
    if (denial === undefined) {
      proceed();
      return;
    }
    this.port.setHeader(response, 'Retry-After', String(denial.retryAfter));
    this.port.deny(request, response, denial, proceed);
  }

  private fail(error: unknown, request: Req, response: Res, proceed: Proceed): void {
    try {
      this.options.onError?.(error, request);
    } catch {
      // A failing error hook must not turn a degraded store into a crashed request.
    }
    if (this.options.failClosed) this.port.unavailable(response);
    else proceed();
  }
}
