/**
 * What a {@link RedisStore} needs of a Redis client, and what both client adapters share: the
 * scripts' SHA-1s (one cache per process: a SHA-1 is a function of the script's body alone) and
 * the `EVALSHA`-then-`EVAL` fallback. One small adapter per client kind (ioredis.ts,
 * node-redis.ts) implements the rest, so the store logic is written once.
 */
import { createHash } from 'node:crypto';
import type { CheckScript } from '../../algorithms/types';
import { RateLimitTimeoutError, StoreError, StoreUnavailableError, storeErrorOf } from '../../errors';
import type { ClusterRouting } from './batch';

export interface RedisClientAdapter {
  /** Why a command sent now would not go to Redis at once (to fail instead of queueing it), or `undefined`. */
  unavailable(): string | undefined;
  /**
   * Runs a script (`lua`) on its keys, all in one Cluster slot: `EVALSHA`, falling back to `EVAL`
   * when Redis answers `NOSCRIPT`.
   */
  run(lua: string, keys: readonly string[], argv: readonly (string | number)[]): Promise<unknown>;
  del(key: string): Promise<unknown>;
  /** Runs a check script's batch form on several keys in one call (see `batch.ts`); on a Cluster, keys of one slot. */
  runBatch(script: CheckScript, keys: readonly string[], argv: readonly string[]): Promise<unknown>;
  /** Whether keys live on several nodes (a Cluster): then a batch holds the keys of one slot only. */
  readonly cluster: boolean;
  /** On a Cluster: the slots and nodes of keys, for batches per node (see `batch.ts`). */
  readonly routing?: ClusterRouting | undefined;
  /** How many times the client has become ready (see {@link readyCounter}). */
  readies(): number;
}

const readyCounts = new WeakMap<object, { count: number }>();

/**
 * Counts the client's `ready` events, each a connection (re)made, with one listener per client
 * however many stores share it. The limiter's circuit breaker reads it to probe at once after a
 * reconnection instead of waiting out its open interval.
 */
export function readyCounter(client: { on(event: 'ready', listener: () => void): unknown }): () => number {
  let counted = readyCounts.get(client);
  if (counted === undefined) {
    const created = { count: 0 };
    client.on('ready', () => {
      created.count++;
    });
    readyCounts.set(client, created);
    counted = created;
  }
  const state = counted;
  return () => state.count;
}

/** A script of this package is called on one key (a check or a settle), or on many (a batch of checks). */
export type ScriptKind = 'single' | 'batch';

/** The SHA-1 of each script body sent, and the kind of each script by its body and by its SHA-1. */
const shas = new Map<string, string>();
const kinds = new Map<string, ScriptKind>();

/** The SHA-1 of `lua`, computed once per process. */
export function shaOf(lua: string, kind: ScriptKind): string {
  let sha = shas.get(lua);
  if (sha === undefined) {
    sha = createHash('sha1').update(lua).digest('hex');
    shas.set(lua, sha);
    kinds.set(lua, kind);
    kinds.set(sha, kind);
  }
  return sha;
}

/** Whether `bodyOrSha` (the first argument of an `EVAL` or `EVALSHA`) is one of this package's scripts, and of which kind. */
export function scriptKindOf(bodyOrSha: string): ScriptKind | undefined {
  return kinds.get(bodyOrSha);
}

/** Redis answered that it does not hold the script (after a restart or `SCRIPT FLUSH`). */
export function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}

/** The classes of Redis error replies: ioredis (and iovalkey) `ReplyError`, node-redis `ErrorReply` and its kinds. */
const REPLY_ERRORS = new Set(['ReplyError', 'ErrorReply', 'SimpleError', 'BlobError']);

/**
 * A client's failure as this package reports it: an error reply from Redis becomes a
 * {@link StoreError} (code `SWL_STORE_ERROR`, its first word in `reply`), any other failure (a
 * connection down, refused, reset or closed, a command the client would not queue) a
 * {@link StoreUnavailableError}; the client's error is kept as `cause`.
 */
export function storeFailure(error: unknown): Error {
  if (error instanceof StoreUnavailableError || error instanceof StoreError || error instanceof RateLimitTimeoutError) return error;
  const message = error instanceof Error ? error.message : String(error);
  const kind = error instanceof Error ? error.constructor.name : '';
  if (REPLY_ERRORS.has(kind) || (error instanceof Error && error.name === 'ReplyError')) {
    return storeErrorOf(message, { cause: error });
  }
  // An ioredis Cluster that gave up following redirections (TRYAGAIN while a slot's keys are
  // split by a migration) names Redis's last reply in its message: Redis answered, with that error.
  const redirected = /^Too many Cluster redirections\. Last error: ReplyError: ([A-Z]+)/.exec(message);
  if (redirected !== null) return storeErrorOf(message, { cause: error }, redirected[1]);
  return new StoreUnavailableError(`Redis is unavailable: ${message}`, { cause: error });
}

/** Rethrows a client's failure as {@link storeFailure} reports it. */
export function rethrowStoreFailure(error: unknown): never {
  throw storeFailure(error);
}
