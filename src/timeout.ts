import { RateLimitTimeoutError } from './errors';

/** Settles like `promise`, or rejects with a {@link RateLimitTimeoutError} after `timeoutMs`, whichever comes first. */
export function withTimeout<T>(promise: Promise<T>, timeoutMs: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new RateLimitTimeoutError(`rate limit store did not answer within ${timeoutMs} ms`)), timeoutMs);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
