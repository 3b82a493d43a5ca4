import type { AlgorithmScripts, LeaseScript, RawReply } from '../../algorithms/types';
import { type Done, settling } from '../../async';
import { OptionError, StoreUnavailableError } from '../../errors';
import { type ScriptCall, scriptArgv } from '../../protocol';
import { checkOptions, keysOf } from '../../validate';
import type { CallbackStore } from '../types';
import { CheckBatcher, RepeatedCheckArgv } from './batch';
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

/** A Redis client a {@link RedisStore} runs on: ioredis (or an API-compatible fork) or node-redis. */
export type RedisStoreClient = IoredisClient | NodeRedisClient | NodeRedisCluster | NodeRedisSentinel;

/** Options of {@link RedisStore}. */
export interface RedisStoreOptions {
  /**
   * A connected Redis client, dedicated or shared:
   *
   * - an ioredis `Redis` or `Cluster` (or an API-compatible fork such as iovalkey); for a
   *   limiter that stays fast while Redis is down, create it with `enableOfflineQueue: false`
   *   and `maxRetriesPerRequest: 1`;
   * - a node-redis (`redis` 5 or 6) client from `createClient()` or cluster from
   *   `createCluster()`, connected (`await client.connect()`); create it with
   *   `disableOfflineQueue: true` (a cluster: `defaults: { disableOfflineQueue: true }`).
   *
   * See docs/redis.md.
   */
  client: RedisStoreClient;
}

const OPTIONS = keysOf<RedisStoreOptions>({ client: true });

/**
 * Keeps rate-limit state in Redis (standalone or Cluster), through ioredis or node-redis. Each
 * check is one `EVALSHA` of the algorithm's script, falling back to `EVAL` when Redis answers
 * `NOSCRIPT` (after a restart or `SCRIPT FLUSH`); the checks started in one event-loop turn share
 * one `EVALSHA` of the batch script (on a Cluster, one per slot). Each identifier is one key, so
 * every check touches a single Cluster slot.
 */
export class RedisStore implements CallbackStore {
  readonly client: RedisStoreClient;
  readonly needsTimeout = true;
  /** True on a Cluster, whose keys live on several nodes. */
  readonly sharded: boolean;
  private readonly redis: RedisClientAdapter;
  /** Gathers the checks of one event-loop turn into few calls: one per slot on a Cluster. */
  private readonly batcher: CheckBatcher;
  private readonly checkArgv = new RepeatedCheckArgv();

  constructor(options: RedisStoreOptions) {
    if (isIoredisClient(options) || isNodeRedisClient(options) || isNodeRedisCluster(options) || isNodeRedisSentinel(options)) {
      throw new OptionError(
        'SWL_INVALID_OPTIONS',
        'options: RedisStore takes an options object: pass { client }, as in new RedisStore({ client })',
      );
    }
    checkOptions(options, OPTIONS, 'RedisStore');
    const { client } = options;
    this.client = client;
    const redis = adapterFor(client);
    this.redis = redis;
    this.sharded = redis.cluster;
    // A batch goes out a turn after its checks started: the connection may have dropped since,
    // and a client would then queue the batch, to count it after a reconnection. Ask again.
    const { routing } = redis;
    this.batcher = new CheckBatcher({
      one: (script, key, argv) => whenAvailable(redis, () => redis.run(script.lua, [key], argv)),
      many: (script, keys, argv) => whenAvailable(redis, () => redis.runBatch(script, keys, argv)),
      cluster:
        routing === undefined
          ? undefined
          : {
              keyPrefix: routing.keyPrefix,
              nodeOf: (slot) => routing.nodeOf(slot),
              runOnNode: (node, script, argv) => whenAvailable(redis, () => routing.runOnNode(node, script, argv)),
            },
    });
  }

  readies(): number {
    return this.redis.readies();
  }

  check(scripts: AlgorithmScripts, key: string, call: ScriptCall): Promise<RawReply> {
    return new Promise((resolve, reject) => this.checkThen(scripts, key, call, settling(resolve, reject)));
  }

  /** {@link check} with a callback: the limiter's hot path, which builds no promise per check. */
  checkThen(scripts: AlgorithmScripts, key: string, call: ScriptCall, done: Done<RawReply>): void {
    const argv = this.checkArgv.argv(call);
    const unavailable = this.redis.unavailable();
    if (unavailable !== undefined) done(new StoreUnavailableError(unavailable));
    else this.batcher.check(scripts.check, key, argv, done);
  }

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
    return whenAvailable(this.redis, () => this.redis.run(lua, keys, argv)) as Promise<RawReply>;
  }

  reset(key: string): Promise<void> {
    return this.redis.del(key).then(() => undefined);
  }
}

/**
 * Sends a command only while the client would send it to Redis at once; fails with a
 * {@link StoreUnavailableError} otherwise, and turns anything the client throws instead of
 * rejecting into a coded rejection.
 */
function whenAvailable(redis: RedisClientAdapter, send: () => Promise<unknown>): Promise<unknown> {
  const unavailable = redis.unavailable();
  if (unavailable !== undefined) return Promise.reject(new StoreUnavailableError(unavailable));
  try {
    return send();
  } catch (error) {
    return Promise.reject(storeFailure(error));
  }
}

function adapterFor(client: unknown): RedisClientAdapter {
  if (isIoredisClient(client)) return ioredisAdapter(client);
  if (isNodeRedisSentinel(client)) return nodeRedisSentinelAdapter(client);
  if (isNodeRedisCluster(client) || isNodeRedisClient(client)) {
    const unsupported = unsupportedNodeRedis(client);
    if (unsupported !== undefined) throw new OptionError('SWL_INVALID_STORE', `client: ${unsupported}`);
    return nodeRedisAdapter(client);
  }
  throw new OptionError(
    'SWL_INVALID_STORE',
    'client: must be an ioredis Redis or Cluster, or a node-redis client (createClient) or cluster (createCluster)',
  );
}
