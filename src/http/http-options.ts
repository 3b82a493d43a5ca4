/**
 * The options every HTTP adapter shares: declared (with their TSDoc), listed and defaulted here,
 * and resolved once per limiter, at construction (or Fastify route registration), so a request
 * does no option lookup.
 */
import { type Awaitable, isPromiseLike, whenSettled } from '../async';
import { DEFAULT_COST, LIMITER_OPTION_KEYS, LIMITER_OPTIONS, validateCost } from '../core/limiter-options';
import type { Decision, LimiterOptions } from '../core/types';
import { OptionError, type Warnings } from '../errors';
import { resolveTiers, smallestLimit, type Tier, type TierOptions } from '../tiers';
import { type Duration, describeValue, type KnownKeys, oneOf, optionalFunction } from '../validate';
import { createHeaderWriter, type HeadersOption, type HeaderWriter, type ResetFormat } from './headers';
import { byIp, type IdentifyOption, resolveIdentify } from './identify';

/**
 * Options shared by the Express middleware and the Fastify plugin. `Req` and `Res` are the
 * framework's request and response (reply) types. Every function option may be async.
 */
export interface HttpOptions<Req, Res = unknown> extends Omit<LimiterOptions, 'limit' | 'window' | 'limits' | 'concurrency'> {
  /**
   * Most units of cost per `window`: a non-negative integer, or a function of the request, e.g.
   * `(req) => (req.headers['x-plan'] === 'pro' ? 1000 : 100)`. Default `100`. Counts belong to
   * the identifier, not to the limit: a client whose limit changes keeps what it has used. A
   * limit of `0` refuses the request (429, without `Retry-After`: waiting would not help).
   */
  limit?: (number | ((request: Req) => Awaitable<number>)) | undefined;
  /** Window length (`'1m'`, milliseconds...), or a function of the request. Default `'1m'`. */
  window?: (Duration | ((request: Req) => Awaitable<Duration>)) | undefined;
  /** Several tiers instead of `limit`/`window`, or a function of the request returning them. */
  limits?: (readonly TierOptions[] | ((request: Req) => Awaitable<readonly TierOptions[]>)) | undefined;
  /**
   * Most requests in progress at once per identifier, across every process sharing the store: a
   * positive integer, or a function of the request. An allowed request holds a lease from its check
   * until its response is over (sent in full, or the connection closed first), renewed every
   * `leaseMs / 2` while it runs. A request over the bound is refused with `concurrencyStatusCode`
   * (429) and no `Retry-After`: no wait is known, it depends on other requests ending. Decided with
   * the rate tiers in one atomic step. Without `limit`, `window` or `limits`, only this bound applies
   * (and no rate-limit headers are sent). Default: no bound.
   */
  concurrency?: (number | ((request: Req) => Awaitable<number>)) | undefined;
  /** Status of a request refused by `concurrency`. Default `429`. */
  concurrencyStatusCode?: number | undefined;
  /**
   * Who a request counts against: a function, or a list tried in order (first non-empty
   * answer wins), e.g. `[byApiKey(), byIp()]`. Default `byIp()`. Requests that nothing
   * identifies share the single identifier `anonymous`.
   */
  identify?: IdentifyOption<Req> | undefined;
  /** Units a request consumes: a number, or a function of the request. Default `1`. */
  cost?: (number | ((request: Req) => Awaitable<number>)) | undefined;
  /** Return true to let a request through without counting it (health checks, allow-lists). */
  skip?: ((request: Req) => Awaitable<boolean>) | undefined;
  /**
   * Give back what a request counted once its response shows it succeeded, e.g. to limit
   * failed logins only. The request is counted when it arrives (so a burst cannot slip past
   * the limit) and refunded after. Default `false`.
   */
  skipSuccessfulRequests?: boolean | undefined;
  /** Give back what a request counted once its response shows it failed; a client that went away counts as failed. Default `false`. */
  skipFailedRequests?: boolean | undefined;
  /** Whether a finished request succeeded, for the two options above. Default: its status is below 400. */
  requestWasSuccessful?: ((request: Req, response: Res) => Awaitable<boolean>) | undefined;
  /**
   * What a request actually cost, known once its response is over (tokens used, rows exported,
   * bytes streamed). The request is checked on arrival with `cost` (then an estimate or a
   * reservation, possibly `0`), and settled to this: a lower cost gives the difference back to the
   * window it was counted in, a higher one charges the difference now, past the limit if need be,
   * so the identifier's next requests wait exactly until that debt has decayed (a response already
   * sent never becomes a denial). Called when the response is over, `finished` false when the
   * client went away first: the work may have been done all the same, so its cost is still yours to
   * say. A request `skipSuccessfulRequests` / `skipFailedRequests` gives back is settled to 0 instead.
   * A non-negative integer; anything else goes to `onError` and the request keeps what it counted.
   */
  costAfter?: ((request: Req, response: Res, finished: boolean) => Awaitable<number>) | undefined;
  /** Which rate-limit headers to send: `'legacy'` (default), `'draft-6'`, `'draft-7'`, `'ietf'`, several, a custom function, or `false`. */
  headers?: HeadersOption | undefined;
  /** For the legacy `X-RateLimit-Reset`: `'epoch'` seconds (default) or `'delta'` seconds from now. */
  resetFormat?: ResetFormat | undefined;
  /** Status of a denied request. Default `429`. */
  statusCode?: number | undefined;
  /**
   * Body of a denied request: a string (sent as `text/plain; charset=utf-8` by every adapter), an object (sent as JSON) or a function
   * of the request and decision returning either. Default
   * `{ error: 'Too Many Requests', retryAfter: <seconds> }`, sent as ready JSON text: in
   * Fastify, `preSerialization` hooks and a reply serializer see only a `message` object
   * (`onSend` hooks see every body).
   */
  message?: (string | object | ((request: Req, decision: Decision) => Awaitable<string | object>)) | undefined;
  /** Called with every decision (allowed or denied), e.g. for metrics. `decision.ratio` is `estimated / limit`. */
  onDecision?: ((decision: Decision, request: Req) => void) | undefined;
  /** Called only for decisions whose `ratio` lies inside `nearLimitBand`: where an estimate can be wrong. */
  onNearLimit?: ((decision: Decision, request: Req) => void) | undefined;
  /** The `[low, high]` band of `ratio` for `onNearLimit`. Default `[0.9, 1.1]`. */
  nearLimitBand?: readonly [number, number] | undefined;
  /**
   * Called when the store fails or times out, or the circuit breaker answers without it (the
   * request is then handled by `failMode`), when one of the app's own functions above throws or
   * rejects (the request then goes to the framework's error handling), or when a refund fails.
   */
  onError?: ((error: unknown, request: Req) => void) | undefined;
  /**
   * What to do with a request when the store fails or times out (or the circuit breaker answers
   * without it):
   *
   * - `'open'` (default): let it through, unlimited; a check that timed out but reached Redis
   *   stays counted (the request was served).
   * - `'closed'`: answer 503; a check that timed out but was counted late is given back.
   * - `'local'`: decide with a MemoryStore of this process under the same limits, with the usual
   *   headers and 429s. With N processes, a client spread over all of them gets up to N times the
   *   limit. Once the store answers again, it decides again, and the local counts are dropped, not
   *   merged into it; a late count in the store is given back.
   */
  failMode?: FailMode | undefined;
}

/** What to do with a request when the store fails or times out. */
export type FailMode = 'open' | 'closed' | 'local';

const DEFAULT_STATUS_CODE = 429;
const DEFAULT_NEAR_LIMIT_BAND: readonly [number, number] = [0.9, 1.1];
const DEFAULT_FAIL_MODE: FailMode = 'open';
/** The status below which `requestWasSuccessful` calls a request successful by default. */
const FIRST_FAILED_STATUS = 400;
/** The content type of the default denial body, JSON text sent as is by every adapter. */
export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

/** The content type of a denial's body given as a string. */
export const TEXT_CONTENT_TYPE = 'text/plain; charset=utf-8';

/**
 * The default body of a denied request, `{ "error": "Too Many Requests", "retryAfter": <seconds> }`
 * (`null` seconds for a cost that can never fit),
 * as ready JSON text: a flood of denials then skips the framework's serializer (measured by
 * `npm run bench`, scenario (c)).
 */
export function defaultDenialJson(retryAfter: number | undefined): string {
  return `{"error":"Too Many Requests","retryAfter":${retryAfter ?? null}}`;
}

/** Body of the 503 answered with `failMode: 'closed'` while the store is failing. */
export const SERVICE_UNAVAILABLE = Object.freeze({ error: 'Service Unavailable' });

/** Every key of {@link HttpOptions}; each adapter adds its own. */
export const HTTP_OPTION_KEYS: KnownKeys<HttpOptions<unknown, unknown>> = {
  ...LIMITER_OPTION_KEYS,
  identify: true,
  cost: true,
  skip: true,
  skipSuccessfulRequests: true,
  skipFailedRequests: true,
  requestWasSuccessful: true,
  costAfter: true,
  concurrency: true,
  concurrencyStatusCode: true,
  headers: true,
  resetFormat: true,
  statusCode: true,
  message: true,
  onDecision: true,
  onNearLimit: true,
  nearLimitBand: true,
  onError: true,
  failMode: true,
};

/** The HTTP options resolved once, so a request does no option lookups. */
export interface ResolvedHttpOptions<Req, Res> {
  readonly identify: (request: Req) => string | Promise<string>;
  /** The cost of every request, when `cost` is not a function. */
  readonly fixedCost: number;
  readonly costOf: ((request: Req) => Awaitable<number>) | undefined;
  /** The tiers of one request, when `limit`, `window` or `limits` is a function; validated. */
  readonly tiersOf: ((request: Req) => Awaitable<readonly Tier[]>) | undefined;
  readonly skip: ((request: Req) => Awaitable<boolean>) | undefined;
  /**
   * What a request that went on cost, once its response is over: 0 when `skipSuccessfulRequests` /
   * `skipFailedRequests` gives it back, `costAfter`'s answer, or undefined to keep what it counted.
   * Undefined when none of those options is set.
   */
  readonly settleAfter: ((request: Req, response: Res, finished: boolean) => Awaitable<number | undefined>) | undefined;
  /** Whether `costAfter` is set: then every request that went on is settled, counted or not. */
  readonly settlesEveryRequest: boolean;
  readonly writeHeaders: HeaderWriter | undefined;
  readonly statusCode: number;
  readonly concurrencyStatusCode: number;
  /** The bound on requests in progress of one request, when `concurrency` is a function. */
  readonly concurrencyOf: ((request: Req) => Awaitable<number>) | undefined;
  readonly message: HttpOptions<Req, Res>['message'];
  readonly onDecision: HttpOptions<Req, Res>['onDecision'];
  readonly onNearLimit: HttpOptions<Req, Res>['onNearLimit'];
  readonly nearLimitBand: readonly [number, number];
  readonly onError: HttpOptions<Req, Res>['onError'];
  readonly failMode: FailMode;
}

/** The limiter options among `options`, without request-dependent ones (the limiter's own tiers then take the defaults). */
export function limiterOptionsOf(options: HttpOptions<unknown, unknown>): LimiterOptions {
  const limiterOptions: Record<string, unknown> = {};
  for (const key of LIMITER_OPTIONS) {
    const value = (options as Record<string, unknown>)[key];
    if (value !== undefined && typeof value !== 'function') limiterOptions[key] = value;
  }
  if (typeof options.clock === 'function') limiterOptions.clock = options.clock;
  // A bound that depends on the request still makes the limiter keep leases; each request brings its own.
  if (typeof options.concurrency === 'function') limiterOptions.concurrency = 1;
  return limiterOptions as LimiterOptions;
}

/**
 * Resolves `options` for a limiter with its own `tiers` (and `shadow` mode). `statusOf` reads
 * a finished response's status, for the default `requestWasSuccessful`.
 */
export function resolveHttpOptions<Req, Res>(
  options: HttpOptions<Req, Res>,
  { tiers, shadow }: { readonly tiers: readonly Tier[]; readonly shadow: boolean },
  statusOf: (response: Res) => number,
  warnings: Warnings,
): ResolvedHttpOptions<Req, Res> {
  const identify = resolveIdentify(options.identify, byIp() as unknown as (request: Req) => string | undefined);
  const tiersOf = requestTiers(options, warnings);
  const smallest = smallestLimit(tiers);
  const cost = options.cost;
  // With request-dependent tiers, a fixed cost above a request's smallest limit refuses that
  // request; a limit of 0 refuses every request, whatever it costs.
  const fixedCost =
    typeof cost === 'function' || cost === undefined ? DEFAULT_COST : validateCost(cost, tiersOf || smallest === 0 ? Infinity : smallest);
  const skip = optionalFunction(options.skip, 'skip');
  const refundWhen = resolveRefund(options, statusOf);
  const costAfter = optionalFunction(options.costAfter, 'costAfter');
  // A shadow limiter must not change what clients see: no headers unless asked for.
  // Rate-limit headers describe rate tiers: a limiter that bounds requests in progress only has
  // none to describe (no header standard covers concurrency), unless a custom format says otherwise.
  const rateless = tiers.length === 0 && tiersOf === undefined && typeof options.headers !== 'function';
  const writeHeaders =
    (shadow && options.headers === undefined) || rateless
      ? undefined
      : createHeaderWriter(options.headers, options.resetFormat, tiersOf ? undefined : tiers);
  const statusCode = errorStatus(options.statusCode ?? DEFAULT_STATUS_CODE, 'statusCode');
  const concurrencyStatusCode = errorStatus(options.concurrencyStatusCode ?? DEFAULT_STATUS_CODE, 'concurrencyStatusCode');
  if (options.message !== undefined && !['string', 'object', 'function'].includes(typeof options.message)) {
    throw new OptionError('SWL_INVALID_TYPE', `message: must be a string, an object or a function, got ${describeValue(options.message)}`);
  }
  const onDecision = optionalFunction(options.onDecision, 'onDecision');
  const onNearLimit = optionalFunction(options.onNearLimit, 'onNearLimit');
  const band = options.nearLimitBand ?? DEFAULT_NEAR_LIMIT_BAND;
  if (!Array.isArray(band) || band.length !== 2 || !band.every((n) => typeof n === 'number' && Number.isFinite(n)) || band[0] > band[1]) {
    throw new OptionError('SWL_INVALID_NUMBER', `nearLimitBand: must be [low, high] with low <= high, got ${describeValue(band)}`);
  }
  return {
    identify,
    fixedCost,
    costOf: typeof cost === 'function' ? cost : undefined,
    tiersOf,
    skip,
    settleAfter: settleAfterOf(refundWhen, costAfter),
    settlesEveryRequest: costAfter !== undefined,
    writeHeaders,
    statusCode,
    concurrencyStatusCode,
    concurrencyOf: typeof options.concurrency === 'function' ? options.concurrency : undefined,
    message: options.message,
    onDecision,
    onNearLimit,
    nearLimitBand: band,
    onError: optionalFunction(options.onError, 'onError'),
    failMode: resolveFailMode(options.failMode),
  };
}

export function resolveFailMode(failMode: unknown): FailMode {
  return oneOf(failMode ?? DEFAULT_FAIL_MODE, ['open', 'closed', 'local'] as const, 'failMode');
}

/**
 * The tiers of one request when `limit`, `window` or `limits` is a function of it: the
 * functions' answers are validated like static options, and an invalid answer (a bug in the
 * app) rejects with an `OptionError` naming the option.
 */
function requestTiers<Req, Res>(
  options: HttpOptions<Req, Res>,
  warnings: Warnings,
): ((request: Req) => Awaitable<readonly Tier[]>) | undefined {
  const { limit, window, limits } = options;
  if (typeof limit !== 'function' && typeof window !== 'function' && typeof limits !== 'function') return undefined;
  if (limits !== undefined && (limit !== undefined || window !== undefined)) {
    throw new OptionError('SWL_CONFLICTING_OPTIONS', 'limits: give either limits or limit/window, not both');
  }
  if (typeof limits === 'function') {
    return (request) => whenSettled(limits(request), (answer) => resolveTiers({ limits: answered(answer, 'limits') }, warnings));
  }
  // Static parts are validated now, so a mistake there fails at construction.
  if (typeof limit !== 'function' || typeof window !== 'function') {
    resolveTiers({ limit: typeof limit === 'function' ? 1 : limit, window: typeof window === 'function' ? '1s' : window }, warnings);
  }
  const tiersOf = (limitAnswer: number | undefined, windowAnswer: Duration | undefined): Tier[] =>
    resolveTiers(
      {
        limit: typeof limit === 'function' ? answered(limitAnswer, 'limit') : limitAnswer,
        window: typeof window === 'function' ? answered(windowAnswer, 'window') : windowAnswer,
      },
      warnings,
    );
  return (request) => {
    const limitAnswer = typeof limit === 'function' ? limit(request) : limit;
    const windowAnswer = typeof window === 'function' ? window(request) : window;
    if (isPromiseLike(limitAnswer) || isPromiseLike(windowAnswer)) {
      return Promise.all([limitAnswer, windowAnswer]).then(([l, w]) => tiersOf(l, w));
    }
    return tiersOf(limitAnswer, windowAnswer);
  };
}

function errorStatus(status: unknown, option: string): number {
  if (typeof status !== 'number' || !Number.isInteger(status) || status < 400 || status > 599) {
    throw new OptionError('SWL_INVALID_NUMBER', `${option}: must be an HTTP error status (400-599), got ${describeValue(status)}`);
  }
  return status;
}

/** A function's answer for `option`: nothing is a bug in the app, not a request for the default. */
function answered<T>(answer: T | undefined, option: string): T {
  if (answer === undefined || answer === null) {
    throw new OptionError('SWL_INVALID_LIMIT', `${option}: the function of the request answered ${describeValue(answer)}`);
  }
  return answer;
}

/** What a finished request cost: 0 when it is given back, else `costAfter`'s answer, if any. */
function settleAfterOf<Req, Res>(
  refundWhen: ((request: Req, response: Res, finished: boolean) => Awaitable<boolean>) | undefined,
  costAfter: HttpOptions<Req, Res>['costAfter'],
): ResolvedHttpOptions<Req, Res>['settleAfter'] {
  if (refundWhen === undefined) return costAfter;
  if (costAfter === undefined)
    return (request, response, finished) => whenSettled(refundWhen(request, response, finished), (yes) => (yes ? 0 : undefined));
  return (request, response, finished) =>
    whenSettled(refundWhen(request, response, finished), (yes) => (yes ? 0 : costAfter(request, response, finished)));
}

function resolveRefund<Req, Res>(
  options: HttpOptions<Req, Res>,
  statusOf: (response: Res) => number,
): ((request: Req, response: Res, finished: boolean) => Awaitable<boolean>) | undefined {
  const { skipSuccessfulRequests = false, skipFailedRequests = false } = options;
  oneOf(skipSuccessfulRequests, [true, false], 'skipSuccessfulRequests');
  oneOf(skipFailedRequests, [true, false], 'skipFailedRequests');
  const judge =
    optionalFunction(options.requestWasSuccessful, 'requestWasSuccessful') ??
    ((_request: Req, response: Res) => statusOf(response) < FIRST_FAILED_STATUS);
  if (!skipSuccessfulRequests && !skipFailedRequests) return undefined;
  return (request, response, finished) => {
    // A response that never finished (the client went away) counts as failed.
    if (!finished) return skipFailedRequests;
    return whenSettled(judge(request, response), (succeeded) => (succeeded ? skipSuccessfulRequests : skipFailedRequests));
  };
}
