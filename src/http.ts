/**
 * Everything the Express and Fastify adapters share: option validation and resolution,
 * the per-request check, headers, the 429 body and the failure policy. The adapters only
 * translate between their framework and {@link HttpLimiter}.
 */
import { createHeaderWriter, type HeadersOption, type HeaderWriter, type ResetFormat, type SetHeader, secondsUntil } from './headers';
import { byIp, type IdentifyOption, type RequestLike, resolveIdentify } from './identify';
import { type Decision, LIMITER_OPTIONS, type Limiter, type LimiterOptions, limiterFrom, smallestLimit, validateCost } from './limiter';
import { describe, oneOf, optionalFunction, rejectUnknownKeys } from './options';
import type { Store } from './stores/types';

/** Options shared by the Express middleware and the Fastify plugin. `Req` is the framework's request type. */
export interface HttpOptions<Req> extends LimiterOptions {
  /**
   * Who a request counts against: a function, or a list tried in order (first non-empty
   * answer wins), e.g. `[byApiKey(), byIp()]`. Default `byIp()`. Requests that nothing
   * identifies share the single identifier `anonymous`.
   */
  identify?: IdentifyOption<Req>;
  /** Units a request consumes: a number, or a function of the request. Default `1`. */
  cost?: number | ((request: Req) => number);
  /** Return true to let a request through without counting it (health checks, allow-lists). */
  skip?: (request: Req) => boolean;
  /** Which rate-limit headers to send: `'legacy'` (default), `'draft-6'`, `'draft-7'`, `'ietf'`, several, a custom function, or `false`. */
  headers?: HeadersOption;
  /** For the legacy `X-RateLimit-Reset`: `'epoch'` seconds (default) or `'delta'` seconds from now. */
  resetFormat?: ResetFormat;
  /** Status of a denied request. Default `429`. */
  statusCode?: number;
  /**
   * Body of a denied request: a string (sent as text), an object (sent as JSON) or a function
   * of the request and decision returning either. Default
   * `{ error: 'Too Many Requests', retryAfter: <seconds> }`.
   */
  message?: string | object | ((request: Req, decision: Decision) => string | object);
  /** Called with every decision (allowed or denied), e.g. for metrics. `decision.ratio` is `estimated / limit`. */
  onDecision?: (decision: Decision, request: Req) => void;
  /** Called only for decisions whose `ratio` lies inside `nearLimitBand`: where an estimate can be wrong. */
  onNearLimit?: (decision: Decision, request: Req) => void;
  /** The `[low, high]` band of `ratio` for `onNearLimit`. Default `[0.9, 1.1]`. */
  nearLimitBand?: readonly [number, number];
  /** Called when the store fails or times out; the request then passes (`failMode: 'open'`) or gets 503 (`'closed'`). */
  onError?: (error: unknown, request: Req) => void;
  /** What to do when the store fails or times out: `'open'` lets the request through (default), `'closed'` answers 503. */
  failMode?: 'open' | 'closed';
}

/** Keys every adapter accepts; adapters add their own (Express `handler`, Fastify `global`). */
export const HTTP_OPTIONS: ReadonlySet<string> = new Set([
  ...LIMITER_OPTIONS,
  'identify',
  'cost',
  'skip',
  'headers',
  'resetFormat',
  'statusCode',
  'message',
  'onDecision',
  'onNearLimit',
  'nearLimitBand',
  'onError',
  'failMode',
]);

/**
 * Options that decide what is counted where: a route overriding any of them gets its own
 * key space. (`timeoutMs`, `denyCacheSize` and `clock` change how a check is run, not
 * what it counts, so a route may change them and keep sharing the plugin's counts.)
 */
export const COUNTING_OPTIONS: readonly string[] = ['store', 'limit', 'window', 'limits', 'algorithm', 'prefix'];

/** The body and status of a denied request, ready to send. */
export interface Denial {
  readonly statusCode: number;
  /** Whole seconds, rounded up, for `Retry-After`. */
  readonly retryAfter: number;
  readonly body: string | object;
}

/** The result of the shared per-request step. */
export type Outcome =
  | { readonly kind: 'skip' }
  | { readonly kind: 'allow'; readonly decision: Decision }
  | { readonly kind: 'deny'; readonly decision: Decision; readonly denial: Denial }
  /** The store failed and `failMode` is `'open'`: let the request through without headers. */
  | { readonly kind: 'fail-open'; readonly error: unknown }
  /** The store failed and `failMode` is `'closed'`: answer 503. */
  | { readonly kind: 'fail-closed'; readonly error: unknown };

const SKIP: Outcome = Object.freeze({ kind: 'skip' });
/** Body of the 503 answered with `failMode: 'closed'` while the store is failing. */
export const SERVICE_UNAVAILABLE = Object.freeze({ error: 'Service Unavailable' });

/** Prefixes in use per store, to warn when two limiters with different limits would share keys. */
const prefixesInUse = new WeakMap<Store, Map<string, string>>();

/**
 * A limiter with everything an HTTP adapter needs resolved once, at construction, so a
 * request does no option lookups: identify, cost, headers, denial body and hooks.
 */
export class HttpLimiter<Req extends object> {
  readonly limiter: Limiter;
  readonly writeHeaders: HeaderWriter | undefined;
  private readonly identify: (request: Req) => string;
  private readonly fixedCost: number | undefined;
  private readonly costOf: ((request: Req) => number) | undefined;
  private readonly skip: ((request: Req) => boolean) | undefined;
  private readonly statusCode: number;
  private readonly message: HttpOptions<Req>['message'];
  private readonly onDecision: HttpOptions<Req>['onDecision'];
  private readonly onNearLimit: HttpOptions<Req>['onNearLimit'];
  private readonly nearLow: number;
  private readonly nearHigh: number;
  private readonly onError: HttpOptions<Req>['onError'];
  private readonly failClosed: boolean;
  private readonly smallestLimit: number;

  /** `options` must already have passed the adapter's unknown-key check. */
  constructor(options: HttpOptions<Req>) {
    const limiterOptions: Record<string, unknown> = {};
    for (const key of LIMITER_OPTIONS) {
      if ((options as Record<string, unknown>)[key] !== undefined) limiterOptions[key] = (options as Record<string, unknown>)[key];
    }
    this.limiter = limiterFrom(limiterOptions as LimiterOptions);
    this.smallestLimit = smallestLimit(this.limiter.tiers);
    warnOnSharedPrefix(this.limiter);

    this.identify = resolveIdentify(options.identify, byIp() as unknown as (request: Req) => string | undefined);
    if (typeof options.cost === 'function') {
      this.costOf = options.cost;
    } else if (options.cost !== undefined) {
      this.fixedCost = validateCost(options.cost, this.smallestLimit);
    }
    this.skip = optionalFunction(options.skip, 'skip');
    this.writeHeaders = createHeaderWriter(options.headers, options.resetFormat, this.limiter.tiers);
    const statusCode = options.statusCode ?? 429;
    if (!Number.isInteger(statusCode) || statusCode < 400 || statusCode > 599) {
      throw new TypeError(`statusCode: must be an HTTP error status (400-599), got ${describe(statusCode)}`);
    }
    this.statusCode = statusCode;
    if (options.message !== undefined && !['string', 'object', 'function'].includes(typeof options.message)) {
      throw new TypeError(`message: must be a string, an object or a function, got ${describe(options.message)}`);
    }
    this.message = options.message;
    this.onDecision = optionalFunction(options.onDecision, 'onDecision');
    this.onNearLimit = optionalFunction(options.onNearLimit, 'onNearLimit');
    const band = options.nearLimitBand ?? [0.9, 1.1];
    if (!Array.isArray(band) || band.length !== 2 || !band.every((n) => typeof n === 'number' && Number.isFinite(n)) || band[0] > band[1]) {
      throw new TypeError(`nearLimitBand: must be [low, high] with low <= high, got ${describe(band)}`);
    }
    [this.nearLow, this.nearHigh] = band;
    this.onError = optionalFunction(options.onError, 'onError');
    this.failClosed = oneOf(options.failMode ?? 'open', ['open', 'closed'] as const, 'failMode') === 'closed';
  }

  /**
   * Runs the check for one request. Never rejects for a store failure (that becomes a
   * `fail-open` or `fail-closed` outcome); throws synchronously only for programming
   * errors in user callbacks (identify, cost, skip), which the adapter hands to its
   * framework's error handling.
   */
  evaluate(request: Req): Outcome | Promise<Outcome> {
    if (this.skip?.(request)) return SKIP;
    const identifier = this.identify(request);
    const cost = this.costOf === undefined ? (this.fixedCost ?? 1) : validateCost(this.costOf(request), this.smallestLimit);
    return this.limiter.check(identifier, { cost }).then(
      (decision) => this.decide(decision, request),
      (error: unknown) => this.fail(error, request),
    );
  }

  /** Sets the configured rate-limit headers and, on a denial, `Retry-After`. */
  setHeaders<Target>(outcome: Outcome, target: Target, set: SetHeader<Target>): void {
    if (outcome.kind === 'allow' || outcome.kind === 'deny') this.writeHeaders?.(outcome.decision, target, set);
    if (outcome.kind === 'deny') set(target, 'Retry-After', String(outcome.denial.retryAfter));
  }

  private decide(decision: Decision, request: Req): Outcome {
    if (this.onDecision !== undefined) this.onDecision(decision, request);
    if (this.onNearLimit !== undefined && decision.ratio >= this.nearLow && decision.ratio <= this.nearHigh) {
      this.onNearLimit(decision, request);
    }
    if (decision.allowed) return { kind: 'allow', decision };
    const retryAfter = secondsUntil(decision.now + decision.retryAfterMs, decision.now);
    const message = typeof this.message === 'function' ? this.message(request, decision) : this.message;
    const body = message ?? { error: 'Too Many Requests', retryAfter };
    return { kind: 'deny', decision, denial: { statusCode: this.statusCode, retryAfter, body } };
  }

  private fail(error: unknown, request: Req): Outcome {
    if (this.onError !== undefined) {
      try {
        this.onError(error, request);
      } catch {
        // A failing error hook must not turn a degraded store into a crashed request.
      }
    }
    return this.failClosed ? { kind: 'fail-closed', error } : { kind: 'fail-open', error };
  }
}

/** Validates adapter options (unknown keys included) and builds the shared limiter. */
export function createHttpLimiter<Req extends object>(
  options: HttpOptions<Req>,
  known: ReadonlySet<string>,
  where: string,
): HttpLimiter<Req> {
  if (options === null || typeof options !== 'object') throw new TypeError(`options: expected an object, got ${describe(options)}`);
  rejectUnknownKeys(options, known, where);
  return new HttpLimiter<Req>(options);
}

function warnOnSharedPrefix(limiter: Limiter): void {
  let prefixes = prefixesInUse.get(limiter.store);
  if (prefixes === undefined) {
    prefixes = new Map();
    prefixesInUse.set(limiter.store, prefixes);
  }
  const shape = `${limiter.algorithm} ${limiter.tiers.map((tier) => `${tier.limit}/${tier.window}`).join(',')}`;
  const existing = prefixes.get(limiter.prefix);
  if (existing !== undefined && existing !== shape) {
    process.emitWarning(
      `Two rate limiters share the store and the prefix '${limiter.prefix}' with different limits (${existing} and ${shape}): they count into the same keys. Give each its own prefix.`,
      { code: 'SWL_SHARED_PREFIX' },
    );
  }
  prefixes.set(limiter.prefix, shape);
}

export type { RequestLike };
