/**
 * Waiting for quota: a client of a rate-limited partner API, shared by every process that calls
 * it. Each call waits (`limiter.wait`) until the shared limit has room, sleeping exactly the wait
 * the store tells, and gives up at once when that wait is past `maxWaitMs`.
 * `createPartnerClient` is what test/examples.test.ts runs, with two clients standing in for two processes.
 * Run: REDIS_URL=redis://127.0.0.1:6379 npx ts-node --transpile-only examples/outbound-client.ts
 */
import { Redis } from 'ioredis';
import { createLimiter, type Decision, type Duration, RedisStore, type Store, WaitExceededError } from '../src';

/** Sends one call to the partner API. */
export type Send<T> = (payload: T, signal?: AbortSignal) => Promise<unknown>;

export interface PartnerClientOptions<T> {
  readonly store: Store;
  /** The partner's limit: calls per `window`, for every process together. */
  readonly limit: number;
  readonly window: Duration;
  readonly send: Send<T>;
  /** The longest a call may wait for quota, in milliseconds. Default 30 s. */
  readonly maxWaitMs?: number;
  readonly prefix?: string;
  /** Which account at the partner the quota belongs to. */
  readonly account?: string;
}

/** Thrown when the partner's quota would not come back within `maxWaitMs`. */
export class PartnerBusyError extends Error {
  constructor(readonly retryAfterMs: number) {
    super(`the partner API has no quota for ${retryAfterMs} ms`);
  }
}

export interface PartnerClient<T> {
  /** Waits for quota, then sends; resolves with the answer and the decision that let it through. */
  call(payload: T, signal?: AbortSignal): Promise<{ answer: unknown; decision: Decision }>;
}

export function createPartnerClient<T>(options: PartnerClientOptions<T>): PartnerClient<T> {
  const { store, limit, window, send, maxWaitMs = 30_000, prefix = 'partner-api', account = 'account:main' } = options;
  // The sliding log never lets more than `limit` through in any window, measured from any moment.
  const limiter = createLimiter({ store, limit, window, prefix, algorithm: 'sliding-log' });
  return {
    async call(payload, signal) {
      let decision: Decision;
      try {
        decision = await limiter.wait(account, { maxWaitMs, signal });
      } catch (error) {
        if (error instanceof WaitExceededError) throw new PartnerBusyError(error.decision.retryAfterMs);
        throw error; // aborted (the signal's reason), or the store failed
      }
      return { answer: await send(payload, signal), decision };
    },
  };
}

if (require.main === module) {
  const client = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  const started = Date.now();
  const partner = createPartnerClient({
    store: new RedisStore({ client }),
    limit: 5,
    window: '1s',
    maxWaitMs: 5_000,
    send: async (n: number) => console.log(`call ${n} sent at +${Date.now() - started} ms`),
  });
  Promise.allSettled(Array.from({ length: 12 }, (_, n) => partner.call(n)))
    .then((results) => console.log(results.map((result) => result.status).join(' ')))
    .finally(() => client.quit());
}
