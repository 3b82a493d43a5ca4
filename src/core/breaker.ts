/**
 * The circuit breaker of a limiter's store calls: after a run of consecutive failures, checks
 * fail at once (a {@link CircuitOpenError}) instead of each waiting for its own timeout, for an
 * interval that doubles while the store keeps failing; then one check goes through as a probe,
 * and its success closes the breaker.
 */
import { CircuitOpenError, OptionError } from '../errors';
import { checkOptions, describeValue, keysOf, positiveInteger } from '../validate';

/** Options of a limiter's circuit breaker (`breaker`); `false` turns it off. */
export interface BreakerOptions {
  /** Consecutive store timeouts that open the breaker (a failure that comes at once spares no wait, and does not count). Default `5`. */
  failures?: number | undefined;
  /**
   * Milliseconds the breaker stays open the first time, before one check goes through as a
   * probe; each failed probe doubles it, up to `maxOpenMs`. Default `500`.
   */
  openMs?: number | undefined;
  /**
   * The longest the breaker stays open between two probes, in milliseconds: how late limiting can
   * resume after the store is back. Default `5000`. A `RedisStore` whose client reconnects ends the
   * wait at once: the next check probes.
   */
  maxOpenMs?: number | undefined;
}

const DEFAULT_BREAKER_FAILURES = 5;
const DEFAULT_BREAKER_OPEN_MS = 500;
export const DEFAULT_BREAKER_MAX_OPEN_MS = 5_000;

const OPTIONS = keysOf<BreakerOptions>({ failures: true, openMs: true, maxOpenMs: true });

/** {@link BreakerOptions} validated, every default applied. */
export interface ResolvedBreakerOptions {
  readonly failures: number;
  readonly openMs: number;
  readonly maxOpenMs: number;
}

/** Validates the `breaker` option: `undefined` (the defaults), `false` (none) or {@link BreakerOptions}. */
export function resolveBreakerOptions(options: BreakerOptions | false | undefined): ResolvedBreakerOptions | undefined {
  if (options === false) return undefined;
  if (options === undefined) {
    return { failures: DEFAULT_BREAKER_FAILURES, openMs: DEFAULT_BREAKER_OPEN_MS, maxOpenMs: DEFAULT_BREAKER_MAX_OPEN_MS };
  }
  if (typeof options !== 'object' || options === null || Array.isArray(options)) {
    throw new OptionError('SWL_INVALID_TYPE', `breaker: must be false or an object of options, got ${describeValue(options)}`);
  }
  checkOptions(options, OPTIONS, 'breaker');
  const failures = options.failures === undefined ? DEFAULT_BREAKER_FAILURES : positiveInteger(options.failures, 'breaker.failures');
  const openMs = options.openMs === undefined ? DEFAULT_BREAKER_OPEN_MS : positiveInteger(options.openMs, 'breaker.openMs');
  const maxOpenMs =
    options.maxOpenMs === undefined
      ? Math.max(openMs, DEFAULT_BREAKER_MAX_OPEN_MS)
      : positiveInteger(options.maxOpenMs, 'breaker.maxOpenMs');
  if (maxOpenMs < openMs) {
    throw new OptionError('SWL_INVALID_NUMBER', `breaker.maxOpenMs: must be at least openMs (${openMs}), got ${maxOpenMs}`);
  }
  return { failures, openMs, maxOpenMs };
}

/**
 * Closed: every call goes through, and failures are counted (a success resets the count). Open:
 * calls are refused at once until `openUntil`. Then half open: the first call goes through as the
 * probe, the others are refused until it is answered. The hot path (closed, succeeding) reads one
 * field before a call and one after.
 */
export class CircuitBreaker {
  /** Consecutive failures while closed. */
  private failures = 0;
  /** 0 while closed; else the time (by `now`) until which calls are refused. */
  private openUntil = 0;
  /** The interval of the current opening. */
  private openMs: number;
  /** Whether the probe of a half-open breaker is in flight. */
  private probing = false;
  /** The failure that opened the breaker (or failed its last probe): the refusals' `cause`. */
  private lastFailure: unknown;
  /**
   * The store's connections made when the breaker opened, or when its last probe was sent (see
   * `connectionsMade`): a probe sent before a reconnection fails for the old connection, and the next
   * call then probes at once.
   */
  private connectionsWhenOpened = 0;
  private connectionsAtProbe = 0;

  /**
   * `connectionsMade`: how many times the store's connection has been made, when the store tells. A new
   * connection since the breaker opened ends its interval: the next call goes through as the probe.
   */
  constructor(
    private readonly options: ResolvedBreakerOptions,
    private readonly now: () => number = Date.now,
    private readonly connectionsMade?: () => number,
  ) {
    this.openMs = options.openMs;
  }

  /** Whether the breaker is refusing calls now (open, or half open with its probe in flight). */
  get open(): boolean {
    return this.openUntil !== 0;
  }

  /**
   * Undefined when a call may go to the store (closed, or as the probe); else the error to
   * answer it with at once. A call that goes through must report {@link succeeded} or
   * {@link failed}.
   */
  refusal(): CircuitOpenError | undefined {
    if (this.openUntil === 0) return undefined;
    if (!this.probing && (this.now() >= this.openUntil || this.reconnected())) {
      this.probing = true;
      if (this.connectionsMade !== undefined) this.connectionsAtProbe = this.connectionsMade();
      return undefined;
    }
    return new CircuitOpenError(
      `the rate limit store failed ${this.options.failures} times in a row: deciding without it until a probe succeeds`,
      { cause: this.lastFailure },
    );
  }

  private reconnected(): boolean {
    return this.connectionsMade !== undefined && this.connectionsMade() !== this.connectionsWhenOpened;
  }

  /** Opens (or opens again) for `openMs` from now, as of `connectionsMade` connections made. */
  private openFor(error: unknown, connectionsMade: number): void {
    this.lastFailure = error;
    this.openUntil = this.now() + this.openMs;
    this.connectionsWhenOpened = connectionsMade;
  }

  succeeded(): void {
    if (this.failures === 0 && this.openUntil === 0) return;
    this.failures = 0;
    this.openUntil = 0;
    this.probing = false;
    this.openMs = this.options.openMs;
    this.lastFailure = undefined;
  }

  /** A call failed without waiting (the store refused it at once): only a probe's failure matters. */
  failedAtOnce(error: unknown): void {
    if (this.probing) this.failed(error);
  }

  /** A call timed out (or, while probing, the probe failed). */
  failed(error: unknown): void {
    if (this.openUntil === 0) {
      if (++this.failures < this.options.failures) return;
      this.openFor(error, this.connectionsMade?.() ?? 0);
      return;
    }
    // A call that went through before the breaker opened: it changes nothing.
    if (!this.probing) return;
    // The probe failed: open again, for twice as long.
    this.probing = false;
    this.openMs = Math.min(this.openMs * 2, this.options.maxOpenMs);
    this.openFor(error, this.connectionsAtProbe);
  }
}
