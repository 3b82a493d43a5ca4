/**
 * Waiting for quota instead of being refused, for outbound calls to a rate-limited API shared by
 * many processes. A waiter sleeps exactly the `retryAfterMs` its denial gives, never a fixed
 * polling period. In one process, the waiters of one identifier queue first in, first out: only the
 * first checks the store, the others wait behind it, so quota coming back wakes one check, not a
 * stampede; an allowed waiter lets the next check at once. Across processes, quota goes to whichever
 * check reaches the store first.
 */
import type { CheckOptions, Decision } from './types';

/** The longest delay a Node.js timer keeps: a longer wait sleeps this long, then checks again. */
const LONGEST_TIMER_MS = 2 ** 31 - 1;

/** One caller of `wait`. */
interface Waiter {
  readonly options: CheckOptions | undefined;
  /** Epoch ms (local clock) past which it must not be kept waiting. */
  readonly deadline: number;
  readonly signal: AbortSignal | undefined;
  readonly resolve: (decision: Decision) => void;
  readonly reject: (error: unknown) => void;
  timer: NodeJS.Timeout | undefined;
  onAbort: (() => void) | undefined;
}

/** The queues of waiters of one limiter, per identifier. */
export class Waiters {
  private readonly queues = new Map<string, Waiter[]>();

  constructor(
    private readonly check: (identifier: string, options: CheckOptions | undefined) => Promise<Decision>,
    private readonly refund: (identifier: string, decision: Decision) => Promise<void>,
  ) {}

  wait(identifier: string, options: CheckOptions | undefined, maxWaitMs: number, signal: AbortSignal | undefined): Promise<Decision> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<Decision>((resolve, reject) => {
      const waiter: Waiter = { options, deadline: Date.now() + maxWaitMs, signal, resolve, reject, timer: undefined, onAbort: undefined };
      if (signal !== undefined) {
        waiter.onAbort = () => this.abort(identifier, waiter);
        signal.addEventListener('abort', waiter.onAbort, { once: true });
      }
      const queue = this.queues.get(identifier);
      if (queue === undefined) {
        this.queues.set(identifier, [waiter]);
        this.attempt(identifier, waiter);
      } else queue.push(waiter);
    });
  }

  /** The first waiter of its queue checks; it is answered, or sleeps its exact wait and checks again. */
  private attempt(identifier: string, waiter: Waiter): void {
    waiter.timer = undefined;
    this.check(identifier, waiter.options).then(
      (decision) => {
        if (!this.isFirst(identifier, waiter)) {
          // Aborted while its check was at the store: what that check took is not used.
          if (decision.counted) this.refund(identifier, decision).then(undefined, () => undefined);
          decision.lease?.release().then(undefined, () => undefined);
          return;
        }
        if (decision.allowed) {
          this.settle(identifier, waiter, () => waiter.resolve(decision));
          return;
        }
        if (decision.retryAfterMs === Infinity) {
          // No wait is known (a cost above the limit, or requests in progress at their bound).
          this.settle(identifier, waiter, () => waiter.reject(new WaitExceededError(decision, waiter.deadline)));
          return;
        }
        const wakeAt = Date.now() + decision.retryAfterMs;
        // Whoever waits behind cannot pass before this waiter: the ones the known wait already
        // takes past their bound fail now, without sleeping.
        const queue = this.queues.get(identifier) ?? [];
        for (const behind of [...queue]) {
          if (wakeAt > behind.deadline) {
            const error = new WaitExceededError(decision, behind.deadline);
            if (behind === waiter) this.settle(identifier, waiter, () => waiter.reject(error));
            else {
              this.remove(identifier, behind);
              behind.reject(error);
            }
          }
        }
        if (this.isFirst(identifier, waiter)) this.sleepUntil(identifier, waiter, wakeAt);
      },
      (error: unknown) => {
        if (this.isFirst(identifier, waiter)) this.settle(identifier, waiter, () => waiter.reject(error));
      },
    );
  }

  /**
   * Checks again at `wakeAt` (epoch ms). Node's timers run on a monotonic clock and may fire a
   * millisecond before `Date.now()` reaches the moment: then it sleeps the rest, rather than spend
   * a store check on a denial that is known already.
   */
  private sleepUntil(identifier: string, waiter: Waiter, wakeAt: number): void {
    const left = wakeAt - Date.now();
    if (left <= 0) {
      this.attempt(identifier, waiter);
      return;
    }
    waiter.timer = setTimeout(() => this.sleepUntil(identifier, waiter, wakeAt), Math.min(left, LONGEST_TIMER_MS));
  }

  private isFirst(identifier: string, waiter: Waiter): boolean {
    return this.queues.get(identifier)?.[0] === waiter;
  }

  /** Answers the first waiter and lets the next one check at once. */
  private settle(identifier: string, waiter: Waiter, answer: () => void): void {
    this.remove(identifier, waiter);
    answer();
    const next = this.queues.get(identifier)?.[0];
    if (next !== undefined) this.attempt(identifier, next);
  }

  private abort(identifier: string, waiter: Waiter): void {
    const first = this.isFirst(identifier, waiter);
    if (first) this.settle(identifier, waiter, () => waiter.reject(waiter.signal?.reason));
    else {
      this.remove(identifier, waiter);
      waiter.reject(waiter.signal?.reason);
    }
  }

  /** Takes `waiter` out of its queue, with its timer and its abort listener. */
  private remove(identifier: string, waiter: Waiter): void {
    if (waiter.timer !== undefined) clearTimeout(waiter.timer);
    waiter.timer = undefined;
    if (waiter.onAbort !== undefined) waiter.signal?.removeEventListener('abort', waiter.onAbort);
    const queue = this.queues.get(identifier);
    if (queue === undefined) return;
    const at = queue.indexOf(waiter);
    if (at >= 0) queue.splice(at, 1);
    if (queue.length === 0) this.queues.delete(identifier);
  }
}

/** `limiter.wait()` gave up: the known wait for quota goes past `maxWaitMs`, or none is known. */
export class WaitExceededError extends Error {
  override readonly name = 'WaitExceededError';
  readonly code = 'SWL_WAIT_EXCEEDED';

  constructor(
    /** The denial that told the wait. */
    readonly decision: Decision,
    deadline: number,
  ) {
    super(
      decision.retryAfterMs === Infinity
        ? 'no wait for quota is known (a cost above the limit, or requests in progress at their bound)'
        : `quota comes back in ${decision.retryAfterMs} ms, past maxWaitMs (${Math.max(0, deadline - Date.now())} ms left)`,
    );
  }
}
