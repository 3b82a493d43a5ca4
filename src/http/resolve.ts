/** Resolution of the {@link HttpOptions}, once per limiter: every check here runs at construction (or route registration). */
import type { Tier } from '../algorithms/types';
import { OptionError } from '../errors';
import { createHeaderWriter, type HeaderWriter } from '../headers';
import { byIp, resolveIdentify } from '../identify';
import { DEFAULT_COST, LIMITER_OPTIONS, resolveTiers, smallestLimit, validateCost } from '../options/limiter';
import { describeValue, oneOf, optionalFunction } from '../options/validate';
import type { Duration, LimiterOptions } from '../types';
import {
  type Awaitable,
  DEFAULT_FAIL_MODE,
  DEFAULT_NEAR_LIMIT_BAND,
  DEFAULT_STATUS_CODE,
  FIRST_FAILED_STATUS,
  type HttpOptions,
} from './options';

/** The HTTP options resolved once, so a request does no option lookups. */
export interface ResolvedHttpOptions<Req, Res> {
  readonly identify: (request: Req) => string | Promise<string>;
  /** The cost of every request, when `cost` is not a function. */
  readonly fixedCost: number;
  readonly costOf: ((request: Req) => Awaitable<number>) | undefined;
  /** The tiers of one request, when `limit`, `window` or `limits` is a function; validated. */
  readonly tiersOf: ((request: Req) => Awaitable<readonly Tier[]>) | undefined;
  readonly skip: ((request: Req) => Awaitable<boolean>) | undefined;
  /** Whether a finished request's count is given back, when `skipSuccessfulRequests` or `skipFailedRequests` is set. */
  readonly refundWhen: ((request: Req, response: Res, finished: boolean) => Awaitable<boolean>) | undefined;
  readonly writeHeaders: HeaderWriter | undefined;
  readonly statusCode: number;
  readonly message: HttpOptions<Req, Res>['message'];
  readonly onDecision: HttpOptions<Req, Res>['onDecision'];
  readonly onNearLimit: HttpOptions<Req, Res>['onNearLimit'];
  readonly nearLimitBand: readonly [number, number];
  readonly onError: HttpOptions<Req, Res>['onError'];
  readonly failClosed: boolean;
}

/** The limiter options among `options`, without request-dependent ones (the limiter's own tiers then take the defaults). */
export function limiterOptionsOf(options: HttpOptions<unknown, unknown>): LimiterOptions {
  const limiterOptions: Record<string, unknown> = {};
  for (const key of LIMITER_OPTIONS) {
    const value = (options as Record<string, unknown>)[key];
    if (value !== undefined && typeof value !== 'function') limiterOptions[key] = value;
  }
  if (typeof options.clock === 'function') limiterOptions.clock = options.clock;
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
): ResolvedHttpOptions<Req, Res> {
  const identify = resolveIdentify(options.identify, byIp() as unknown as (request: Req) => string | undefined);
  const tiersOf = requestTiers(options);
  const smallest = smallestLimit(tiers);
  const cost = options.cost;
  // With request-dependent tiers, a fixed cost is checked against each request's tiers instead.
  const fixedCost = typeof cost === 'function' || cost === undefined ? DEFAULT_COST : validateCost(cost, tiersOf ? Infinity : smallest);
  const skip = optionalFunction(options.skip, 'skip');
  const refundWhen = resolveRefund(options, statusOf);
  // A shadow limiter must not change what clients see: no headers unless asked for.
  const writeHeaders =
    shadow && options.headers === undefined
      ? undefined
      : createHeaderWriter(options.headers, options.resetFormat, tiersOf ? undefined : tiers);
  const statusCode = options.statusCode ?? DEFAULT_STATUS_CODE;
  if (!Number.isInteger(statusCode) || statusCode < 400 || statusCode > 599) {
    throw new OptionError('SWL_INVALID_NUMBER', `statusCode: must be an HTTP error status (400-599), got ${describeValue(statusCode)}`);
  }
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
    refundWhen,
    writeHeaders,
    statusCode,
    message: options.message,
    onDecision,
    onNearLimit,
    nearLimitBand: band,
    onError: optionalFunction(options.onError, 'onError'),
    failClosed: oneOf(options.failMode ?? DEFAULT_FAIL_MODE, ['open', 'closed'] as const, 'failMode') === 'closed',
  };
}

/**
 * The tiers of one request when `limit`, `window` or `limits` is a function of it: the
 * functions' answers are validated like static options, and an invalid answer (a bug in the
 * app) rejects with an `OptionError` naming the option.
 */
function requestTiers<Req, Res>(options: HttpOptions<Req, Res>): ((request: Req) => Awaitable<readonly Tier[]>) | undefined {
  const { limit, window, limits } = options;
  if (typeof limit !== 'function' && typeof window !== 'function' && typeof limits !== 'function') return undefined;
  if (limits !== undefined && (limit !== undefined || window !== undefined)) {
    throw new OptionError('SWL_CONFLICTING_OPTIONS', 'limits: give either limits or limit/window, not both');
  }
  if (typeof limits === 'function') {
    return (request) => then(limits(request), (answer) => resolveTiers({ limits: answered(answer, 'limits') }));
  }
  // Static parts are validated now, so a mistake there fails at construction.
  if (typeof limit !== 'function' || typeof window !== 'function') {
    resolveTiers({ limit: typeof limit === 'function' ? 1 : limit, window: typeof window === 'function' ? 1 : window });
  }
  const tiersOf = (limitAnswer: number | undefined, windowAnswer: Duration | undefined): Tier[] =>
    resolveTiers({
      limit: typeof limit === 'function' ? answered(limitAnswer, 'limit') : limitAnswer,
      window: typeof window === 'function' ? answered(windowAnswer, 'window') : windowAnswer,
    });
  return (request) => {
    const limitAnswer = typeof limit === 'function' ? limit(request) : limit;
    const windowAnswer = typeof window === 'function' ? window(request) : window;
    if (isPromiseLike(limitAnswer) || isPromiseLike(windowAnswer)) {
      return Promise.all([limitAnswer, windowAnswer]).then(([l, w]) => tiersOf(l, w));
    }
    return tiersOf(limitAnswer, windowAnswer);
  };
}

/** A function's answer for `option`: nothing is a bug in the app, not a request for the default. */
function answered<T>(answer: T | undefined, option: string): T {
  if (answer === undefined || answer === null) {
    throw new OptionError('SWL_INVALID_LIMIT', `${option}: the function of the request answered ${describeValue(answer)}`);
  }
  return answer;
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
    return then(judge(request, response), (succeeded) => (succeeded ? skipSuccessfulRequests : skipFailedRequests));
  };
}

export function isPromiseLike<T>(value: Awaitable<T>): value is PromiseLike<T> {
  return typeof (value as PromiseLike<T> | null)?.then === 'function';
}

/** `next(value)` at once when `value` is plain, after it settles when it is a promise: sync options stay synchronous. */
export function then<T, U>(value: Awaitable<T>, next: (settled: T) => Awaitable<U>): Awaitable<U> {
  return isPromiseLike(value) ? Promise.resolve(value).then(next) : next(value);
}
