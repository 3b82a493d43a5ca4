import type { AlgorithmScripts, LeaseScript, RawReply } from '../../algorithms/types';
import { type Done, promiseCallback } from '../../async';
import { OptionError, StoreUnavailableError } from '../../errors';
import { type ScriptCall, scriptArgv } from '../../protocol';
import { checkOptions, describeValue, keysOf } from '../../validate';
import type { CallbackStore, HeldCheck } from '../types';
import { CheckBatcher, RepeatedCheckArgv } from './batch';
import { type GlideClient, type GlideClusterClient, glideAdapter, isGlideClient } from './glide';
import { type IoredisClient, ioredisAdapter, isIoredisClient } from './ioredis';
import {
  isNodeRedisClient,
  isNodeRedisCluster,
  isNodeRedisSentinel,
  type NodeRedisClient,
  type NodeRedisCluster,
  type NodeRedisSentinel,
  nodeRedisAdapter,
  nodeRedisSentinelAdapter,
  unsupportedNodeRedis,
} from './node-redis';
import { type RedisClientAdapter, storeFailure } from './redis-client';

/** A Redis client a {@link RedisStore} runs on: ioredis (or an API-compatible fork such as iovalkey), node-redis or Valkey GLIDE. */
export type RedisStoreClient = IoredisClient | NodeRedisClient | NodeRedisCluster | NodeRedisSentinel | GlideClient | GlideClusterClient;

/** Options of {@link RedisStore}. */
export interface RedisStoreOptions {
  /**
   * A connected Redis client, dedicated or shared:
   *
   * - an ioredis `Redis` or `Cluster` (or an API-compatible fork such as iovalkey); for a
   *   limiter that stays fast while Redis is down, create it with `enableOfflineQueue: false`
   *   and `maxRetriesPerRequest: 1`;
   * - a node-redis (`redis` 5 or 6) client from `createClient()` or cluster from
   *   `createCluster()`, with `connect()` called (awaited or not); create it with
   *   `disableOfflineQueue: true` (a cluster: `defaults: { disableOfflineQueue: true }`);
   * - a Valkey GLIDE (`@valkey/valkey-glide`) `GlideClient` or `GlideClusterClient`; create it
   *   with a `requestTimeout` no longer than the limiter's `timeoutMs`.
   *
   * A check made while an ioredis or node-redis client makes its first connection waits for it,
   * up to the limiter's `timeoutMs`.
   *
   * See docs/redis.md and docs/valkey.md.
   */
  client: RedisStoreClient;
  /**
   * Whether checks run as Redis functions (Redis and Valkey 7 and later): this package loads one
   * function library per algorithm (`FUNCTION LOAD`, on every master of a Cluster) when the
   * algorithm is first used, and calls it with `FCALL`. A function's helpers are defined once, at
   * load, rather than at every call as a script's are: a check costs Redis about a third less
   * time. Until a library is loaded, on a server that refuses `FUNCTION LOAD` (Redis 6, an ACL
   * without it), and for a call that finds the function missing, the check runs as a script
   * (`EVALSHA`). The libraries stay on the server (`FUNCTION LIST LIBRARYNAME ratewarden_`), one
   * per algorithm and version of this package. `false`: scripts only, and nothing is loaded.
   *
   * @defaultValue `true`
   */
  functions?: boolean | undefined;
}

const OPTIONS = keysOf<RedisStoreOptions>({ client: true, functions: true });

/**
 * Keeps rate-limit state in Redis or Valkey (standalone or Cluster), through ioredis (or
 * iovalkey), node-redis or Valkey GLIDE. Each
 * check is one `FCALL` of the algorithm's function (see {@link RedisStoreOptions.functions}), or
 * one `EVALSHA` of its script, falling back to `EVAL` when Redis answers `NOSCRIPT` (after a
 * restart or `SCRIPT FLUSH`); checks started while the call before them is in flight share one
 * call of the batch function or script (on a Cluster, the checks of one event-loop turn, one per
 * master). Each identifier is one key, so every check touches a single Cluster slot.
 */
export class RedisStore implements CallbackStore {
  readonly client: RedisStoreClient;
  readonly needsTimeout = true;
  /** True on a Cluster, whose keys live on several nodes. */
  readonly sharded: boolean;
  private readonly redis: RedisClientAdapter;
  /** Gathers checks into few calls: on a Cluster, one per master and turn of the event loop. */
  private readonly batcher: CheckBatcher;
  private readonly checkArgv = new RepeatedCheckArgv();
  private closed = false;

  constructor(options: RedisStoreOptions) {
    if (
      isIoredisClient(options) ||
      isNodeRedisClient(options) ||
      isNodeRedisCluster(options) ||
      isNodeRedisSentinel(options) ||
      isGlideClient(options)
    ) {
      throw new OptionError(
        'SWL_INVALID_OPTIONS',
        'options: RedisStore takes an options object: pass { client }, as in new RedisStore({ client })',
      );
    }
    checkOptions(options, OPTIONS, 'RedisStore');
    const { client, functions = true } = options;
    if (typeof functions !== 'boolean') {
      throw new OptionError('SWL_INVALID_CHOICE', `functions: must be true or false, got ${describeValue(functions)}`);
    }
    this.client = client;
    const redis = adapterFor(client, functions);
    this.redis = redis;
    this.sharded = redis.cluster;
    // A batch may go out a little after its checks started (once the call before it is answered,
    // or at the end of the turn): the connection may have dropped since, and a client would then
    // queue the batch, to count it after a reconnection. Ask again.
    const { routing } = redis;
    this.batcher = new CheckBatcher({
      one: (script, key, argv) => whenAvailable(this.unavailable, () => redis.run(script.lua, [key], argv)),
      many: (script, keys, argv) => whenAvailable(this.unavailable, () => redis.runBatch(script, keys, argv)),
      cluster:
        routing === undefined
          ? undefined
          : {
              keyPrefix: routing.keyPrefix,
              nodeOf: (slot) => routing.nodeOf(slot),
              runOnNode: (node, script, argv) => whenAvailable(this.unavailable, () => routing.runOnNode(node, script, argv)),
              mapStale: () => routing.mapStale?.(),
            },
    });
  }

  whenConnected(connected: () => void): (() => void) | undefined {
    return this.closed ? undefined : this.redis.whenConnected(connected);
  }

  connectionsMade(): number {
    return this.redis.connectionsMade();
  }

  /** @deprecated Use {@link connectionsMade}. */
  readies(): number {
    return this.connectionsMade();
  }

  /**
   * Stops everything this store made on its client: its listeners and timers (shared with the
   * other stores on the client, and removed once the last of them is closed). The client itself
   * stays as it is: quit it yourself. A call after `close()` fails with a `StoreUnavailableError`
   * (`SWL_STORE_UNAVAILABLE`). Closing twice does nothing more.
   */
  close(): void {
    this.closed = true;
    this.redis.release();
  }

  check(scripts: AlgorithmScripts, key: string, call: ScriptCall): Promise<RawReply> {
    return new Promise((resolve, reject) => this.checkWithCallback(scripts, key, call, promiseCallback(resolve, reject)));
  }

  /** {@link check} with a callback: the limiter's hot path, which builds no promise per check. */
  checkWithCallback(scripts: AlgorithmScripts, key: string, call: ScriptCall, done: Done<RawReply>): HeldCheck | undefined {
    const argv = this.checkArgv.argv(call);
    const unavailable = this.unavailable();
    if (unavailable === undefined) return this.batcher.check(scripts.check, key, argv, done);
    done(new StoreUnavailableError(unavailable));
    return undefined;
  }

  /** @deprecated Use {@link checkWithCallback}. */
  checkThen(scripts: AlgorithmScripts, key: string, call: ScriptCall, done: Done<RawReply>): HeldCheck | undefined {
    return this.checkWithCallback(scripts, key, call, done);
  }

  /** Why a command sent now would not go to Redis at once, or `undefined`. */
  private readonly unavailable = (): string | undefined => (this.closed ? CLOSED : this.redis.unavailable());

  settle(scripts: AlgorithmScripts, key: string, call: ScriptCall): Promise<RawReply> {
    return this.run(scripts.settle.lua, [key], call);
  }

  checkLease(scripts: AlgorithmScripts, key: string, leaseKey: string, call: ScriptCall): Promise<RawReply> {
    return this.run(scripts.leaseCheck.lua, [key, leaseKey], call);
  }

  changeLease(script: LeaseScript, leaseKey: string, call: ScriptCall): Promise<RawReply> {
    return this.run(script.lua, [leaseKey], call);
  }

  private run(lua: string, keys: readonly string[], call: ScriptCall): Promise<RawReply> {
    const argv = scriptArgv(call);
    return whenAvailable(this.unavailable, () => this.redis.run(lua, keys, argv)) as Promise<RawReply>;
  }

  reset(key: string): Promise<void> {
    if (this.closed) return Promise.reject(new StoreUnavailableError(CLOSED));
    return this.redis.del(key).then(() => undefined);
  }
}

const CLOSED = 'the RedisStore is closed';

/**
 * Sends a command only while the client would send it to Redis at once; fails with a
 * {@link StoreUnavailableError} otherwise, and turns anything the client throws instead of
 * rejecting into a coded rejection.
 */
function whenAvailable(whyUnavailable: () => string | undefined, send: () => Promise<unknown>): Promise<unknown> {
  const unavailable = whyUnavailable();
  if (unavailable !== undefined) return Promise.reject(new StoreUnavailableError(unavailable));
  try {
    return send();
  } catch (error) {
    return Promise.reject(storeFailure(error));
  }
}

function adapterFor(client: unknown, functions: boolean): RedisClientAdapter {
  if (isIoredisClient(client)) return ioredisAdapter(client, functions);
  if (isGlideClient(client)) return glideAdapter(client, functions);
  if (isNodeRedisSentinel(client)) return nodeRedisSentinelAdapter(client, functions);
  if (isNodeRedisCluster(client) || isNodeRedisClient(client)) {
    const unsupported = unsupportedNodeRedis(client);
    if (unsupported !== undefined) throw new OptionError('SWL_INVALID_STORE', `client: ${unsupported}`);
    return nodeRedisAdapter(client, functions);
  }
  throw new OptionError(
    'SWL_INVALID_STORE',
    'client: must be an ioredis (or iovalkey) Redis or Cluster, a node-redis client (createClient) or cluster (createCluster), or a Valkey GLIDE GlideClient or GlideClusterClient',
  );
}
