/**
 * How results travel. The hot path hands a check's answer from the Redis reply to the HTTP
 * answer by one completion callback ({@link Done}) instead of a chain of promises (measured by
 * bench/allocations.ts); the app's own functions (identify, cost, limits...) may answer at once
 * or with a promise ({@link Awaitable}), and a plain answer stays synchronous.
 */

/**
 * Called once when a call completes: with the value on success (a value is never `undefined`),
 * or with the error alone on failure.
 */
export type Done<T> = (error: unknown, value?: T) => void;

/** A `Done` that settles a promise: the value resolves it, an error alone rejects it. */
export function promiseCallback<T>(resolve: (value: T) => void, reject: (error: unknown) => void): Done<T> {
  return (error, value) => (value === undefined ? reject(error) : resolve(value));
}

/** Calls `call` on every item, even when one throws; the first error is thrown once all have run. */
export function callEach<T>(items: readonly T[], call: (item: T, index: number) => void): void {
  let failed = false;
  let first: unknown;
  for (let i = 0; i < items.length; i++) {
    try {
      call(items[i], i);
    } catch (error) {
      if (!failed) first = error;
      failed = true;
    }
  }
  if (failed) throw first;
}

/** A value, or a promise of it: what the request-dependent options may return. */
export type Awaitable<T> = T | PromiseLike<T>;

export function isPromiseLike<T>(value: Awaitable<T>): value is PromiseLike<T> {
  return typeof (value as PromiseLike<T> | null)?.then === 'function';
}

/** `next(value)` at once when `value` is plain, after it settles when it is a promise: sync options stay synchronous. */
export function whenSettled<T, U>(value: Awaitable<T>, next: (settled: T) => Awaitable<U>): Awaitable<U> {
  return isPromiseLike(value) ? Promise.resolve(value).then(next) : next(value);
}

/** `next(value)` at once when `value` is plain, after it settles when it is a promise; `failed` gets a rejection. */
export function whenSettledOrFailed<T>(value: Awaitable<T>, next: (settled: T) => void, failed: (error: unknown) => void): void {
  if (isPromiseLike(value)) Promise.resolve(value).then(next, failed);
  else next(value);
}
