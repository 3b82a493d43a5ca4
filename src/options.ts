/**
 * Option parsing shared by the core and the adapters: durations, integers and
 * the check for unknown keys. Every failure is a `TypeError` whose message
 * starts with the option's name, thrown when the limiter is constructed.
 */

/** A duration in milliseconds, or a string such as `'500ms'`, `'1s'`, `'1m'`, `'1h'`, `'1d'`, `'1.5h'`. */
export type Duration = number | string;

const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const DURATION = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$/;

/** Turns a {@link Duration} into a positive whole number of milliseconds, or throws naming `option`. */
export function parseDuration(value: unknown, option: string): number {
  let ms: number;
  if (typeof value === 'number') {
    ms = value;
  } else if (typeof value === 'string') {
    const match = DURATION.exec(value);
    if (!match) {
      throw new TypeError(
        `${option}: cannot parse ${JSON.stringify(value)} as a duration; use milliseconds or a string like '1s', '1m', '1h', '1d'`,
      );
    }
    // In exact decimal arithmetic: as doubles, '1.001s' would be 1000.9999999999999 ms.
    const [whole, fraction = ''] = match[1].split('.');
    const scaled = BigInt(whole + fraction) * BigInt(UNIT_MS[match[2]]);
    const scale = 10n ** BigInt(fraction.length);
    ms = scaled % scale === 0n ? Number(scaled / scale) : Number(match[1]) * UNIT_MS[match[2]];
  } else {
    throw new TypeError(`${option}: expected milliseconds or a duration string like '1m', got ${describe(value)}`);
  }
  if (!Number.isInteger(ms) || ms <= 0) {
    throw new TypeError(`${option}: must be a positive whole number of milliseconds, got ${describe(value)}`);
  }
  return ms;
}

export function positiveInteger(value: unknown, option: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value <= 0) {
    throw new TypeError(`${option}: must be a positive integer, got ${describe(value)}`);
  }
  return value;
}

export function nonNegativeInteger(value: unknown, option: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new TypeError(`${option}: must be a non-negative integer, got ${describe(value)}`);
  }
  return value;
}

export function optionalFunction<T>(value: T | undefined, option: string): T | undefined {
  if (value !== undefined && typeof value !== 'function') {
    throw new TypeError(`${option}: must be a function, got ${describe(value)}`);
  }
  return value;
}

export function oneOf<T extends string | number | boolean>(value: unknown, allowed: readonly T[], option: string): T {
  if (!allowed.includes(value as T)) {
    throw new TypeError(`${option}: must be one of ${allowed.map((a) => JSON.stringify(a)).join(', ')}, got ${describe(value)}`);
  }
  return value as T;
}

/** Throws for any key of `options` not in `known`: a misspelt option must not be silently ignored. */
export function rejectUnknownKeys(options: object, known: ReadonlySet<string>, where: string): void {
  for (const key of Object.keys(options)) {
    if (!known.has(key)) {
      throw new TypeError(`${key}: unknown option for ${where} (known: ${[...known].sort().join(', ')})`);
    }
  }
}

export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'function') return 'a function';
  if (value === null) return 'null';
  if (typeof value === 'object') return Array.isArray(value) ? 'an array' : 'an object';
  return String(value);
}
