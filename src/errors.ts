/**
 * Every error and warning code this package uses, in one place. docs/reference.md lists them;
 * a test keeps that list and this one equal. Codes are stable: match on `error.code`,
 * not on messages. `SWL_` is for sliding-window-limiter, the project's name before the package
 * was called ratewarden: a code never changes, so they kept it.
 */
export const CODES = {
  SWL_INVALID_OPTIONS: 'An options argument is not an object.',
  SWL_UNKNOWN_OPTION: 'An options object has a key this package does not know: a misspelt option is never ignored.',
  SWL_CONFLICTING_OPTIONS: 'Two options that exclude each other were both given, such as `limits` with `limit` or `window`.',
  SWL_INVALID_LIMIT: 'A limit is not a non-negative integer, `limits` is not a non-empty array of tiers, or limit x window is too large.',
  SWL_INVALID_DURATION: 'A duration (such as `window`) is neither a positive whole number of milliseconds nor a string like `1m`.',
  SWL_INVALID_COST:
    'A cost is not a non-negative integer, or a fixed `cost` option is above the smallest limit. (A cost computed per request or per call that can never fit is a denial, not an error.)',
  SWL_INVALID_NUMBER: 'A numeric option (such as `timeoutMs`, `maxKeys`, `statusCode`, `nearLimitBand`) is out of range.',
  SWL_INVALID_CHOICE: 'An option that takes one of a few names (such as `algorithm`, `failMode`, `hook`, `headers`) got another value.',
  SWL_INVALID_FUNCTION: 'An option that takes a function (such as `skip`, `onError`, `clock`) got something else.',
  SWL_INVALID_PREFIX: 'A key prefix is empty or contains braces or white space.',
  SWL_INVALID_STORE: 'The `store` option is not a store, or the `client` of a `RedisStore` is not a supported Redis client.',
  SWL_INVALID_IDENTIFIER:
    'An identifier is not a string, or an `identify` function returned something other than a string, a number or nothing.',
  SWL_INVALID_TYPE:
    'An option has a type no guard above covers, such as a `message` that is neither a string, an object nor a function, or an empty `header` name.',
  SWL_TIMEOUT: 'The store did not answer within `timeoutMs` (a `RateLimitTimeoutError`).',
  SWL_STORE_UNAVAILABLE:
    "Redis cannot be reached: the connection is down or not yet up, or was lost before a check was answered (a `StoreUnavailableError`; the client's own error is its `cause`).",
  SWL_STORE_ERROR:
    "Redis answered a command with an error, such as READONLY (a replica), OOM (memory full under `noeviction`) or LOADING (a restart reading its data) (a `StoreError`; `error.reply` holds that first word, `cause` the client's error).",
  SWL_CIRCUIT_OPEN:
    "The store timed out `breaker.failures` times in a row, so the limiter's circuit breaker answers checks at once, without the store, until a probe check succeeds (a `CircuitOpenError`; the failure that opened it is its `cause`). The HTTP adapters answer by `failMode`.",
  SWL_STORE_FAILING:
    "Warning: the store failed and no `onError` is set, so requests were let through (`failMode: 'open'`) or refused (`'closed'`) without a word; emitted on the first failure and at most once a minute while failures continue.",
  SWL_WAIT_EXCEEDED:
    'The known wait for quota goes past `maxWaitMs`, or no wait is known (a cost above the limit, requests in progress at their bound), so `limiter.wait()` gave up at once without sleeping (a `WaitExceededError`, with the `decision`).',
  SWL_SHARED_PREFIX: 'Warning: two limiters with different limits share one store and one prefix, so they count into the same keys.',
  SWL_UNTRUSTED_FORWARDED:
    "Warning: a request carried X-Forwarded-For or Forwarded while the framework's `ip` was the socket's own peer: behind a proxy without Express's `trust proxy` or Fastify's `trustProxy`, every client shares one quota.",
  SWL_SHORT_DURATION:
    "Warning: a `window` or `blockFor` (or a NestJS throttler's `ttl`) was given as a number under 1000. Numbers are milliseconds (rate-limiter-flexible's `duration` is in seconds): write `'60s'` or `60_000` for a minute, or a string such as `'500ms'` to mean it.",
  SWL_COUNTED_TWICE:
    'Warning: two limiters (or one limiter mounted twice) counted the same request against the same key of the same store, so each request costs twice. Give each its own `prefix`, or mount it once.',
  SWL_ROUTES_NOT_LIMITED:
    'Warning: the Fastify plugin is global but routes were registered before it loaded (`register` not awaited before the routes, or called after them), so they are not limited.',
  SWL_EVICTING_MEMORY:
    'Warning: a Redis node the store reached has `maxmemory` set and a `maxmemory-policy` other than `noeviction`: under memory pressure it may evict rate-limit keys (every one has a TTL, so `volatile-*` policies evict them too), silently giving identifiers their quota back. Emitted once per Redis server process.',
  SWL_TRUST_ALL_PROXIES:
    "Warning: `byIp()` ran under Express's `trust proxy: true` or Fastify's `trustProxy: true`, which trusts every hop: any client can choose its IP with `X-Forwarded-For` and get a fresh quota per request. Set the number of proxies (`1`) or their addresses instead.",
  SWL_IOREDIS_QUEUE_UNSUPPORTED:
    "Warning: this ioredis version's command queue does not have the shape the store knows, so checks unanswered when a connection drops may still be counted after it reconnects.",
} as const;

export type Code = keyof typeof CODES;

/** An invalid option or argument. A `TypeError`, so existing `instanceof TypeError` checks keep working. */
export class OptionError extends TypeError {
  override readonly name = 'OptionError';
  constructor(
    readonly code: Code,
    message: string,
  ) {
    super(message);
  }
}

/** The store did not answer within `timeoutMs`. */
export class RateLimitTimeoutError extends Error {
  override readonly name = 'RateLimitTimeoutError';
  readonly code = 'SWL_TIMEOUT';
}

/** Redis cannot be reached right now; the adapters handle it through `failMode`. The client's own error, if any, is `cause`. */
export class StoreUnavailableError extends Error {
  override readonly name = 'StoreUnavailableError';
  readonly code = 'SWL_STORE_UNAVAILABLE';
}

/**
 * Redis answered with an error (READONLY, OOM, LOADING...); the adapters handle it through
 * `failMode`. `reply` is the first word of Redis's answer, `cause` the client's error.
 */
export class StoreError extends Error {
  override readonly name = 'StoreError';
  readonly code = 'SWL_STORE_ERROR';
  /** The first word of Redis's error reply: `'READONLY'`, `'OOM'`, `'LOADING'`, `'ERR'`... */
  readonly reply: string;

  constructor(reply: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.reply = reply;
  }
}

/** The {@link StoreError} of Redis's error reply `text`, whose first word is its `reply` unless another is given. */
export function storeErrorOf(text: string, options?: { cause?: unknown }, reply = /^[A-Z]+/.exec(text)?.[0] ?? 'ERR'): StoreError {
  return new StoreError(reply, `Redis answered with an error: ${text}`, options);
}

/**
 * The store failed too often in a row: the limiter's circuit breaker answers at once, without
 * the store, until a probe check succeeds. `cause` is the failure that opened it.
 */
export class CircuitOpenError extends Error {
  override readonly name = 'CircuitOpenError';
  readonly code = 'SWL_CIRCUIT_OPEN';
}

/** Emits a process warning carrying `code`. */
export function warn(code: Code, message: string): void {
  process.emitWarning(message, { code });
}

/**
 * What one owner (a limiter, an identify function, a NestJS storage) has warned about: each
 * owner warns of a thing once, or once an interval, whatever other owners warned of before it.
 * No warning is remembered by the process as a whole.
 */
export class Warnings {
  /** When each thing was last warned about (epoch ms), by its `about` key. */
  private readonly warnedAt = new Map<string, number>();

  /** Emits `message()` under `code`, unless this owner has already warned of `about` (by default, the code). */
  once(code: Code, message: () => string, about: string = code): void {
    if (this.warnedAt.has(about)) return;
    this.warnedAt.set(about, 0);
    warn(code, message());
  }

  /** Whether this owner has warned of `about` (a code, or the key given to {@link once}). */
  has(about: string): boolean {
    return this.warnedAt.has(about);
  }

  /** Emits `message()` under `code` unless this owner did less than `everyMs` before `now`. */
  atMostEvery(code: Code, everyMs: number, now: number, message: () => string): void {
    const last = this.warnedAt.get(code);
    if (last !== undefined && now - last < everyMs) return;
    this.warnedAt.set(code, now);
    warn(code, message());
  }
}
