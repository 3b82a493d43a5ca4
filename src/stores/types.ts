import type { AlgorithmScripts, RawReply, Tier } from '../algorithms/types';

/** What every store call carries: the script's inputs, with `now` left out to use the store's own clock. */
export interface StoreCall {
  /** Epoch ms from an injected clock; undefined lets the store read its own (Redis `TIME`, or `Date.now()`). */
  readonly now: number | undefined;
  readonly cost: number;
  readonly dryRun: boolean;
  readonly tiers: readonly Tier[];
}

/** A check: count `cost` if every tier allows it. */
export interface StoreCheck extends StoreCall {
  /** Milliseconds an identifier stays refused once denied; 0 for no block. */
  readonly blockFor: number;
}

/** A refund: take back `cost` that a check at `countedAt` counted with `tiers`. */
export interface StoreRefund extends StoreCall {
  readonly countedAt: number;
}

/**
 * Persistence for rate-limit state. A store runs an algorithm's scripts for one key
 * atomically and returns their {@link RawReply}; it knows nothing of HTTP.
 */
export interface Store {
  check(scripts: AlgorithmScripts, key: string, check: StoreCheck): Promise<RawReply>;
  refund(scripts: AlgorithmScripts, key: string, refund: StoreRefund): Promise<RawReply>;
  /** Forgets everything counted for `key`. */
  reset(key: string): Promise<void>;
  /**
   * Whether the limiter must bound this store's calls with a timer. False for stores
   * that answer synchronously.
   */
  readonly needsTimeout: boolean;
}
