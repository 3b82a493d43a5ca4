/** The options the Express middleware and the Fastify plugin share: declared, listed, defaulted and resolved here. */

import type { Tier } from '../algorithms/types';
import { OptionError } from '../errors';
import { createHeaderWriter, type HeadersOption, type HeaderWriter, type ResetFormat } from '../headers';
import { byIp, type IdentifyOption, resolveIdentify } from '../identify';
import { DEFAULT_COST, LIMITER_OPTION_KEYS, smallestLimit, validateCost } from '../options/limiter';
import { describeValue, type KnownKeys, keysOf, oneOf, optionalFunction } from '../options/validate';
import type { Decision, LimiterOptions } from '../types';

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
  failMode?: FailMode;
}

/** What to do with a request when the store fails or times out. */
export type FailMode = 'open' | 'closed';

export const DEFAULT_STATUS_CODE = 429;
export const DEFAULT_NEAR_LIMIT_BAND: readonly [number, number] = [0.9, 1.1];
export const DEFAULT_FAIL_MODE: FailMode = 'open';
/** Body of the 503 answered with `failMode: 'closed'` while the store is failing. */
export const SERVICE_UNAVAILABLE = Object.freeze({ error: 'Service Unavailable' });

/** Every key of {@link HttpOptions}; each adapter adds its own. */
export const HTTP_OPTION_KEYS: KnownKeys<HttpOptions<unknown>> = {
  ...LIMITER_OPTION_KEYS,
  identify: true,
  cost: true,
  skip: true,
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
export const HTTP_OPTIONS = keysOf<HttpOptions<unknown>>(HTTP_OPTION_KEYS);

/** The HTTP options resolved once, for a limiter with `tiers`, so a request does no option lookups. */
export interface ResolvedHttpOptions<Req> {
  readonly identify: (request: Req) => string;
  /** The cost of every request, when `cost` is not a function. */
  readonly fixedCost: number;
  readonly costOf: ((request: Req) => number) | undefined;
  readonly smallestLimit: number;
  readonly skip: ((request: Req) => boolean) | undefined;
  readonly writeHeaders: HeaderWriter | undefined;
  readonly statusCode: number;
  readonly message: HttpOptions<Req>['message'];
  readonly onDecision: HttpOptions<Req>['onDecision'];
  readonly onNearLimit: HttpOptions<Req>['onNearLimit'];
  readonly nearLimitBand: readonly [number, number];
  readonly onError: HttpOptions<Req>['onError'];
  readonly failClosed: boolean;
}

export function resolveHttpOptions<Req>(options: HttpOptions<Req>, tiers: readonly Tier[]): ResolvedHttpOptions<Req> {
  const identify = resolveIdentify(options.identify, byIp() as unknown as (request: Req) => string | undefined);
  const smallest = smallestLimit(tiers);
  const cost = options.cost;
  const fixedCost = typeof cost === 'function' || cost === undefined ? DEFAULT_COST : validateCost(cost, smallest);
  const skip = optionalFunction(options.skip, 'skip');
  const writeHeaders = createHeaderWriter(options.headers, options.resetFormat, tiers);
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
    smallestLimit: smallest,
    skip,
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
