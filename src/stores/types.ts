import type { AlgorithmScripts, RawReply, Tier } from '../algorithms/types';

/** What a store is asked to run: the algorithm's inputs, with `now` left out to use the store's own clock. */
export interface StoreCheck {
  /** Epoch ms from an injected clock; undefined lets the store read its own (Redis `TIME`, or `Date.now()`). */
  readonly now: number | undefined;
  readonly cost: number;
  readonly dryRun: boolean;
  readonly tiers: readonly Tier[];
}

/**
 * Persistence for rate-limit state. A store runs an algorithm's check script for one key
 * atomically and returns its {@link RawReply}; it knows nothing of HTTP.
 */
export interface Store {
  check(scripts: AlgorithmScripts, key: string, check: StoreCheck): Promise<RawReply>;
  /** Forgets everything counted for `key`. */
  reset(key: string): Promise<void>;
  /**
   * Whether the limiter must bound this store's calls with a timer. False for stores
   * that answer synchronously.
   */
  readonly needsTimeout: boolean;
}
