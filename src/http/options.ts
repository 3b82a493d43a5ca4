/** The options the Express middleware and the Fastify plugin share: declared, listed and defaulted here, resolved in `resolve.ts`. */
import type { HeadersOption, ResetFormat } from '../headers';
import type { IdentifyOption } from '../identify';
import { LIMITER_OPTION_KEYS } from '../options/limiter';
import { type KnownKeys, keysOf } from '../options/validate';
import type { Decision, Duration, LimiterOptions, TierOptions } from '../types';

/** A value, or a promise of it: what the request-dependent options may return. */
export type Awaitable<T> = T | PromiseLike<T>;

/**
 * Options shared by the Express middleware and the Fastify plugin. `Req` and `Res` are the
 * framework's request and response (reply) types. Every function option may be async.
 */
export interface HttpOptions<Req, Res = unknown> extends Omit<LimiterOptions, 'limit' | 'window' | 'limits'> {
  /**
   * Most units of cost per `window`: a positive integer, or a function of the request, e.g.
   * `(req) => (req.user?.plan === 'pro' ? 1000 : 100)`. Default `100`. Counts belong to the
   * identifier, not to the limit: a client whose limit changes keeps what it has used.
   */
  limit?: number | ((request: Req) => Awaitable<number>);
  /** Window length (`'1m'`, milliseconds...), or a function of the request. Default `'1m'`. */
  window?: Duration | ((request: Req) => Awaitable<Duration>);
  /** Several tiers instead of `limit`/`window`, or a function of the request returning them. */
  limits?: readonly TierOptions[] | ((request: Req) => Awaitable<readonly TierOptions[]>);
  /**
   * Who a request counts against: a function, or a list tried in order (first non-empty
   * answer wins), e.g. `[byApiKey(), byIp()]`. Default `byIp()`. Requests that nothing
   * identifies share the single identifier `anonymous`.
   */
  identify?: IdentifyOption<Req>;
  /** Units a request consumes: a number, or a function of the request. Default `1`. */
  cost?: number | ((request: Req) => Awaitable<number>);
  /** Return true to let a request through without counting it (health checks, allow-lists). */
  skip?: (request: Req) => Awaitable<boolean>;
  /**
   * Give back what a request counted once its response shows it succeeded, e.g. to limit
   * failed logins only. The request is counted when it arrives (so a burst cannot slip past
   * the limit) and refunded after. Default `false`.
   */
  skipSuccessfulRequests?: boolean;
  /** Give back what a request counted once its response shows it failed; a client that went away counts as failed. Default `false`. */
  skipFailedRequests?: boolean;
  /** Whether a finished request succeeded, for the two options above. Default: its status is below 400. */
  requestWasSuccessful?: (request: Req, response: Res) => Awaitable<boolean>;
  /** Which rate-limit headers to send: `'legacy'` (default), `'draft-6'`, `'draft-7'`, `'ietf'`, several, a custom function, or `false`. */
  headers?: HeadersOption;
  /** For the legacy `X-RateLimit-Reset`: `'epoch'` seconds (default) or `'delta'` seconds from now. */
  resetFormat?: ResetFormat;
  /** Status of a denied request. Default `429`. */
  statusCode?: number;
  /**
   * Body of a denied request: a string (sent as text), an object (sent as JSON) or a function
   * of the request and decision returning either. Default
   * `{ error: 'Too Many Requests', retryAfter: <seconds> }`, sent as ready JSON text: in
   * Fastify, `preSerialization` hooks and a reply serializer see only a `message` object
   * (`onSend` hooks see every body).
   */
  message?: string | object | ((request: Req, decision: Decision) => Awaitable<string | object>);
  /** Called with every decision (allowed or denied), e.g. for metrics. `decision.ratio` is `estimated / limit`. */
  onDecision?: (decision: Decision, request: Req) => void;
  /** Called only for decisions whose `ratio` lies inside `nearLimitBand`: where an estimate can be wrong. */
  onNearLimit?: (decision: Decision, request: Req) => void;
  /** The `[low, high]` band of `ratio` for `onNearLimit`. Default `[0.9, 1.1]`. */
  nearLimitBand?: readonly [number, number];
  /**
   * Called when the store fails or times out (the request then passes with `failMode: 'open'`
   * or gets 503 with `'closed'`), when one of the app's own functions above throws or rejects
   * (the request then goes to the framework's error handling), or when a refund fails.
   */
  onError?: (error: unknown, request: Req) => void;
  /** What to do when the store fails or times out: `'open'` lets the request through (default), `'closed'` answers 503. */
  failMode?: FailMode;
}

/** What to do with a request when the store fails or times out. */
export type FailMode = 'open' | 'closed';

export const DEFAULT_STATUS_CODE = 429;
export const DEFAULT_NEAR_LIMIT_BAND: readonly [number, number] = [0.9, 1.1];
export const DEFAULT_FAIL_MODE: FailMode = 'open';
/** The status below which `requestWasSuccessful` calls a request successful by default. */
export const FIRST_FAILED_STATUS = 400;
/** The content type of a JSON body, as both frameworks send it. */
export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

/**
 * The default body of a denied request, `{ "error": "Too Many Requests", "retryAfter": <seconds> }`,
 * as ready JSON text: a flood of denials then skips the framework's serializer (in Fastify
 * 0.2 to 0.9 µs of a 14 to 15 µs denial on the bench machine, see bench/results.md).
 */
export function defaultDenialJson(retryAfter: number): string {
  return `{"error":"Too Many Requests","retryAfter":${retryAfter}}`;
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
export const HTTP_OPTIONS = keysOf<HttpOptions<unknown, unknown>>(HTTP_OPTION_KEYS);
