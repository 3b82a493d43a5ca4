import type { AlgorithmScripts, LeaseScript, RawReply } from '../algorithms/types';
import type { Done } from '../async';
import type { ScriptCall } from '../protocol';

/**
 * Persistence for rate-limit state: `RedisStore` and `MemoryStore` implement it. A store runs an
 * algorithm's scripts for one key atomically and answers their reply; it knows nothing of HTTP.
 *
 * A supported extension point for wrappers (instrumentation, fault injection, a store that
 * delegates to another): the scripts, the call and the reply are the package's own, to be
 * passed through unchanged.
 */
export interface Store {
  /** Counts `call.cost` for `key` if every tier allows it. */
  check(scripts: AlgorithmScripts, key: string, call: ScriptCall): Promise<RawReply>;
  /** Settles a check that counted `call.cost` at `call.countedAt` with `call.tiers` to `call.actualCost`. */
  settle(scripts: AlgorithmScripts, key: string, call: ScriptCall): Promise<RawReply>;
  /**
   * Checks `key` and takes a lease in `leaseKey` (one Cluster slot), in one step: needed by a
   * limiter with `concurrency` (both stores of this package have it).
   */
  checkLease?(scripts: AlgorithmScripts, key: string, leaseKey: string, call: ScriptCall): Promise<RawReply>;
  /** Releases or renews the lease `call.lease` names in `leaseKey` (with `checkLease`). */
  changeLease?(script: LeaseScript, leaseKey: string, call: ScriptCall): Promise<RawReply>;
  /** Forgets everything counted for `key`. */
  reset(key: string): Promise<void>;
  /** Whether the limiter must bound this store's calls with a timer. False for stores that answer synchronously. */
  readonly needsTimeout: boolean;
  /**
   * While the store cannot take calls yet but soon will (a `RedisStore` whose client is making its
   * first connection): calls `connected` once it can, and answers a function that stops waiting,
   * which the limiter calls when the call's `timeoutMs` runs out first. `undefined` when a call can
   * be made now. The limiter sends every call through it, so none fails at once (or waits past its
   * deadline in a client's queue) just because the app started a moment ago.
   */
  whenConnected?(connected: () => void): (() => void) | undefined;
  /** Whether keys live on several servers (a Redis Cluster): the limiter's circuit breaker is then off unless asked for. */
  readonly sharded?: boolean | undefined;
  /**
   * How many times the store's connection has been made (it grows with each reconnection): an
   * open circuit breaker probes at once when it changes, instead of waiting out its interval.
   */
  connectionsMade?(): number;
  /** @deprecated Use {@link connectionsMade}: read when a store has only this. */
  readies?(): number;
}

/**
 * A check a store holds back before sending it (a batch waiting for its Redis server's answer to
 * the call before): withdrawn once its caller has had the timeout, it is then never sent, so
 * never counted after its caller was told it failed.
 */
export interface HeldCheck {
  withdraw(): void;
}

/** A store that can also answer a check through a callback, as `RedisStore` does: the limiter's hot path then builds no promise. */
export interface CallbackStore extends Store {
  /** Answers the check while the store holds it back unsent, `undefined` once it is sent (or answered). */
  checkWithCallback(scripts: AlgorithmScripts, key: string, call: ScriptCall, done: Done<RawReply>): HeldCheck | undefined;
}
