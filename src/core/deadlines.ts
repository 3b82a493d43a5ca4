import { callEach } from '../async';
import { RateLimitTimeoutError } from '../errors';
import type { HeldCheck } from '../stores/types';

/** One bounded call: settled by its store reply or by its deadline, whichever comes first. */
export interface Pending {
  /** On the monotonic clock (`performance.now()`): a change of the wall clock (or a mocked `Date.now`) moves no deadline. */
  readonly deadline: number;
  settled: boolean;
  /** Let go of once the call settles (see {@link Deadlines.finish}). */
  caller: Caller;
  /** Stops the call's wait for the store to connect, if it waits: called when the deadline comes first. */
  abandon?: (() => void) | undefined;
  /** The check, while the store holds it back unsent: withdrawn when the deadline comes first. */
  held?: HeldCheck | undefined;
}

/** A store's `whenConnected` (see `Store`): what holds a call back until the store can take it. */
export type Gate = (connected: () => void) => (() => void) | undefined;

/** Who waits for a bounded call: answered with the timeout error when the deadline comes first. */
export interface Caller {
  answered(error: Error): void;
}

/** The caller of a settled call: nobody waits any more. */
const NOBODY: Caller = { answered: () => undefined };

/** What a dropped slot holds, so the queue keeps no settled call alive. */
const DROPPED: Pending = { deadline: 0, settled: true, caller: NOBODY };

/** Past this many dropped slots at the front, the queue is compacted. */
const COMPACT_AFTER = 4096;

/**
 * Bounds calls by one fixed timeout with a single timer. Every call of a limiter waits the same
 * `timeoutMs`, so deadlines come in start order: a FIFO of pending calls and one timer armed for
 * the oldest replace a `setTimeout`/`clearTimeout` pair per call. Replies mostly come in the
 * order calls were sent, so settled calls leave from the front at once and die young.
 */
export class Deadlines {
  private queue: Pending[] = [];
  /** Index of the oldest entry not dropped yet. */
  private head = 0;
  private timer: NodeJS.Timeout | undefined;
  /** Whether the timer holds the event loop open: only while a call is pending. */
  private holding = false;

  /** `onTimeout`: called once for each call that expires, before its caller is answered (the limiter's circuit breaker counts it). */
  constructor(
    readonly timeoutMs: number,
    private readonly onTimeout?: (error: Error) => void,
  ) {}

  /**
   * Starts bounding a call: `caller` is answered with a {@link RateLimitTimeoutError} once
   * `timeoutMs` has passed, unless {@link finish} came first. A caller object (the check
   * itself) spares the hot path a promise and its closures per check.
   */
  start(caller: Caller): Pending {
    const pending: Pending = { deadline: performance.now() + this.timeoutMs, settled: false, caller };
    this.queue.push(pending);
    if (this.timer === undefined) this.arm(this.timeoutMs);
    else if (!this.holding) this.hold(true);
    return pending;
  }

  /** Ends a call that got its answer: false when its deadline had already failed it (drop the answer then). */
  finish(pending: Pending): boolean {
    if (pending.settled) return false;
    pending.settled = true;
    // A call settled behind an older one still pending stays queued until that one settles
    // (replies from several Cluster nodes come in any order; a stalled node's calls wait for their
    // deadline): let go of its caller, in the HTTP path a whole request, so that every request
    // answered meanwhile does not stay in memory for up to timeoutMs.
    pending.caller = NOBODY;
    pending.abandon = undefined;
    pending.held = undefined;
    this.dropSettled();
    return true;
  }

  /**
   * Sends a bounded call now, or, when `gate` holds it back (a store whose client is making its
   * first connection), once the gate opens: unless the deadline comes first, which stops the wait,
   * so the call is never sent after its caller has had its timeout.
   */
  sendThrough(pending: Pending, gate: Gate | undefined, send: () => void): void {
    const stop = gate?.(send);
    if (stop === undefined) send();
    else pending.abandon = stop;
  }

  /**
   * Settles like the promise `call` makes, or rejects with a {@link RateLimitTimeoutError} once
   * `timeoutMs` has passed; `call` runs now, or once `gate` opens (see {@link sendThrough}).
   */
  bound<T>(call: () => Promise<T>, gate?: Gate): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const pending = this.start({ answered: reject });
      this.sendThrough(pending, gate, () =>
        call().then(
          (value) => {
            if (this.finish(pending)) resolve(value);
          },
          (error: unknown) => {
            if (this.finish(pending)) reject(error);
          },
        ),
      );
    });
  }

  /** Drops settled calls from the front. */
  private dropSettled(): void {
    const { queue } = this;
    while (this.head < queue.length && queue[this.head].settled) queue[this.head++] = DROPPED;
    if (this.head === queue.length) {
      queue.length = 0;
      this.head = 0;
      // Nothing left to bound: the armed timer must not keep a process that is done from exiting.
      if (this.holding) this.hold(false);
    } else if (this.head > COMPACT_AFTER) {
      this.queue = queue.slice(this.head);
      this.head = 0;
    }
  }

  private arm(delay: number): void {
    // Referenced, like the timer of a single call: a bound must hold even for a store with no socket.
    this.timer = setTimeout(() => this.expire(), delay);
    this.holding = true;
  }

  private hold(holding: boolean): void {
    if (holding) this.timer?.ref();
    else this.timer?.unref();
    this.holding = holding;
  }

  /** Fails every call whose deadline has passed, then waits for the next oldest. */
  private expire(): void {
    this.timer = undefined;
    const now = performance.now();
    const { queue } = this;
    const expired: Pending[] = [];
    while (this.head < queue.length) {
      const pending = queue[this.head];
      if (!pending.settled && pending.deadline > now) break;
      queue[this.head++] = DROPPED;
      if (!pending.settled) {
        pending.settled = true;
        expired.push(pending);
      }
    }
    this.dropSettled();
    if (this.head < this.queue.length) this.arm(Math.max(1, this.queue[this.head].deadline - now));
    // Last, once the queue and timer are in order: a callback may run the app's own code (the
    // HTTP path goes on to the next handler), and one that throws must not leave the rest waiting.
    callEach(expired, (pending) => {
      pending.abandon?.();
      pending.held?.withdraw();
      const error = new RateLimitTimeoutError(`rate limit store did not answer within ${this.timeoutMs} ms`);
      this.onTimeout?.(error);
      pending.caller.answered(error);
    });
  }
}
