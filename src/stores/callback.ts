import type { AlgorithmScripts, RawReply } from '../algorithms/types';
import type { Done } from '../callback';
import type { Store, StoreCheck } from './types';

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
