/**
 * The guards every option goes through. Each failure is an {@link OptionError} whose
 * message starts with the option's name, thrown when a limiter is constructed (or a
 * Fastify route registered), never on a request.
 */
import { type Code, OptionError, type Warnings } from './errors';

/** A duration in milliseconds, or a string such as `'500ms'`, `'1s'`, `'1m'`, `'1h'`, `'1d'`, `'1.5h'`. */
export type Duration = number | string;

/**
 * The known keys of an options interface, as a record the compiler checks: a key missing
 * from it, or one the interface does not declare, fails to compile.
 */
export type KnownKeys<Options> = { readonly [Key in keyof Required<Options>]: true };

/** The keys of a {@link KnownKeys} record, for {@link checkOptions}. */
export function keysOf<Options>(known: KnownKeys<Options>): ReadonlySet<string> {
  return new Set(Object.keys(known));
}

/** Throws unless `options` is an object whose every key is in `known`: a misspelt option must not be silently ignored. */
export function checkOptions(options: unknown, known: ReadonlySet<string>, where: string): void {
  if (options === null || typeof options !== 'object' || Array.isArray(options)) {
    throw new OptionError('SWL_INVALID_OPTIONS', `options: ${where} expects an options object, got ${describeValue(options)}`);
  }
  for (const key of Object.keys(options)) {
    if (!known.has(key)) {
      const peer = PEER_OPTIONS[key];
      const hint = peer !== undefined && known.has(peer[0]) ? `; here it is ${peer[1]}` : '';
      throw new OptionError('SWL_UNKNOWN_OPTION', `${key}: unknown option for ${where}${hint} (known: ${[...known].sort().join(', ')})`);
    }
  }
}

/**
 * Options of express-rate-limit, @fastify/rate-limit and rate-limiter-flexible, with what this
 * package calls them: a leftover of a migration is named in the error (docs/migrating.md).
 */
const PEER_OPTIONS: Readonly<Record<string, readonly [option: string, hint: string]>> = {
  windowMs: ['window', "`window` (milliseconds, or a string such as '15m')"],
  timeWindow: ['window', "`window` (milliseconds, or a string such as '1m')"],
  duration: ['window', "`window`, in milliseconds or a string such as '60s' (duration was in seconds)"],
  max: ['limit', '`limit`'],
  points: ['limit', '`limit`'],
  keyGenerator: ['identify', '`identify` (a function of the request, or byIp(), byUser(fn), byApiKey())'],
  keyPrefix: ['prefix', '`prefix`'],
  nameSpace: ['prefix', '`prefix`'],
  standardHeaders: ['headers', "`headers` ('draft-6', 'draft-7' or 'ietf' for draft-8)"],
  legacyHeaders: ['headers', "`headers` ('legacy', the default, or false)"],
  passOnStoreError: ['failMode', "`failMode` ('open', the default, 'closed' or 'local')"],
  skipOnError: ['failMode', "`failMode` ('open', the default, 'closed' or 'local')"],
  blockDuration: ['blockFor', '`blockFor` (a duration, not seconds)'],
  storeClient: ['store', '`store: new RedisStore({ client })`'],
  redis: ['store', '`store: new RedisStore({ client })`'],
  allowList: ['skip', '`skip`, a function of the request'],
  errorResponseBuilder: ['message', '`message` (text, an object, or a function of the request and decision)'],
  onExceeded: ['onDecision', '`onDecision` (check decision.allowed)'],
  onExceeding: ['onDecision', '`onDecision` (check decision.allowed)'],
};

const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const DURATION = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/;

/**
 * Turns a {@link Duration} into a positive whole number of milliseconds, or throws naming
 * `option`; a bare number under 1000 is warned about through `warnings`, once per option and value.
 */
export function parseDuration(value: unknown, option: string, warnings: Warnings): number {
  let ms: number;
  if (typeof value === 'number') {
    ms = value;
  } else if (typeof value === 'string') {
    const match = DURATION.exec(value);
    if (!match) {
      throw new OptionError(
        'SWL_INVALID_DURATION',
        `${option}: cannot parse ${JSON.stringify(value)} as a duration; use milliseconds or a string like '1s', '1m', '1h', '1d'`,
      );
    }
    // In exact decimal arithmetic: as doubles, '1.001s' would be 1000.9999999999999 ms.
    const [whole, fraction = ''] = match[1].split('.');
    const scaled = BigInt(whole + fraction) * BigInt(UNIT_MS[match[2]]);
    const scale = 10n ** BigInt(fraction.length);
    ms = scaled % scale === 0n ? Number(scaled / scale) : Number(match[1]) * UNIT_MS[match[2]];
  } else {
    throw new OptionError(
      'SWL_INVALID_DURATION',
      `${option}: expected milliseconds or a duration string like '1m', got ${describeValue(value)}`,
    );
  }
  if (!Number.isInteger(ms) || ms <= 0) {
    throw new OptionError(
      'SWL_INVALID_DURATION',
      `${option}: must be a positive whole number of milliseconds, got ${describeValue(value)}`,
    );
  }
  // An option named in milliseconds (leaseMs) says its unit already.
  if (typeof value === 'number' && ms < SECOND && !option.endsWith('Ms')) warnShortDuration(option, ms, warnings);
  return ms;
}

const SECOND = 1_000;

/** A number under 1000 is almost always seconds meant as milliseconds (rate-limiter-flexible's `duration` is in seconds). */
function warnShortDuration(option: string, ms: number, warnings: Warnings): void {
  // Once per value, so a limit computed per request warns once, not per request.
  warnings.once(
    'SWL_SHORT_DURATION',
    () =>
      `${option}: ${ms} is read as ${ms} ms. For ${ms} s write '${ms}s' (or ${ms * SECOND}); to mean milliseconds without this warning, write '${ms}ms'.`,
    `${option}=${ms}`,
  );
}

export function positiveInteger(value: unknown, option: string, code: Code = 'SWL_INVALID_NUMBER'): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) {
    throw new OptionError(code, `${option}: must be a positive integer, got ${describeValue(value)}`);
  }
  return value;
}

export function nonNegativeInteger(value: unknown, option: string, code: Code = 'SWL_INVALID_NUMBER'): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new OptionError(code, `${option}: must be a non-negative integer, got ${describeValue(value)}`);
  }
  return value;
}

export function optionalFunction<T>(value: T | undefined, option: string): T | undefined {
  if (value !== undefined && typeof value !== 'function') {
    throw new OptionError('SWL_INVALID_FUNCTION', `${option}: must be a function, got ${describeValue(value)}`);
  }
  return value;
}

export function oneOf<T extends string | number | boolean>(value: unknown, allowed: readonly T[], option: string): T {
  if (!allowed.includes(value as T)) {
    throw new OptionError(
      'SWL_INVALID_CHOICE',
      `${option}: must be one of ${allowed.map((a) => JSON.stringify(a)).join(', ')}, got ${describeValue(value)}`,
    );
  }
  return value as T;
}

/** A short description of a value for error messages: strings quoted, objects by kind, never their contents. */
export function describeValue(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'function') return 'a function';
  if (value === null) return 'null';
  if (typeof value === 'object') return Array.isArray(value) ? 'an array' : 'an object';
  return String(value);
}
