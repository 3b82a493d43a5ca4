/**
 * Completion callbacks of the hot path: a check's answer travels from the Redis reply to the
 * HTTP answer through these instead of a chain of promises (measured in `bench/micro.ts`).
 */

/**
 * Called once when a call completes: with the value on success (a value is never `undefined`),
 * or with the error alone on failure.
 */
export type Done<T> = (error: unknown, value?: T) => void;

/** A `Done` that settles a promise: the value resolves it, an error alone rejects it. */
export function settling<T>(resolve: (value: T) => void, reject: (error: unknown) => void): Done<T> {
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
