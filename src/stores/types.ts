import type { AlgorithmScripts, RawReply, Tier } from '../algorithms/types';
import type { Done } from '../callback';

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

/** A store that can also answer a check through a callback, as `RedisStore` does: the limiter's hot path then builds no promise. */
export interface CallbackStore extends Store {
  checkThen(scripts: AlgorithmScripts, key: string, check: StoreCheck, done: Done<RawReply>): void;
}

/** How the limiter runs a store's check: its callback form where it has one, else its promise. */
export function checkWithCallback(store: Store): CallbackStore['checkThen'] {
  const callbackStore = store as Partial<CallbackStore>;
  // Looked up on every call, not bound once, so a store's method replaced later (a spy) is the one used.
  if (typeof callbackStore.checkThen === 'function')
    return (scripts, key, check, done) => (store as CallbackStore).checkThen(scripts, key, check, done);
  return (scripts, key, check, done) => {
    let reply: Promise<RawReply>;
    try {
      reply = store.check(scripts, key, check);
    } catch (error) {
      done(error);
      return;
    }
    reply.then(
      (raw) => (raw === undefined ? done(new TypeError('store.check() resolved to undefined, not a script reply')) : done(undefined, raw)),
      done,
    );
  };
}
