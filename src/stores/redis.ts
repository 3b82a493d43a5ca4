import { scriptArgv } from '../algorithms/prelude';
import type { AlgorithmScripts, RawReply, Script } from '../algorithms/types';
import { OptionError, StoreUnavailableError } from '../errors';
import { checkOptions, keysOf } from '../options/validate';
import { type IoredisClient, ioredisAdapter, isIoredisClient } from './ioredis';
import type { RedisClientAdapter } from './redis-client';
import type { Store, StoreCheck, StoreRefund } from './types';

/** Options of {@link RedisStore}. */
export interface RedisStoreOptions {
  /**
   * An ioredis `Redis` or `Cluster` instance, dedicated or shared. For a limiter that
   * stays fast while Redis is down, create it with `enableOfflineQueue: false` and
   * `maxRetriesPerRequest: 1` (see the README, "Redis outages").
   */
  client: IoredisClient;
}

const OPTIONS = keysOf<RedisStoreOptions>({ client: true });

/**
 * Keeps rate-limit state in Redis (standalone or Cluster). Each check is one `EVALSHA`
 * of the algorithm's script, falling back to `EVAL` when Redis answers `NOSCRIPT` (after a
 * restart or `SCRIPT FLUSH`). Each identifier is one key, so every check touches a single
 * Cluster slot.
 */
export class RedisStore implements Store {
  readonly client: IoredisClient;
  readonly needsTimeout = true;
  private readonly redis: RedisClientAdapter;

  constructor(options: RedisStoreOptions) {
    checkOptions(options, OPTIONS, 'RedisStore');
    const { client } = options;
    if (!isIoredisClient(client)) throw new OptionError('SWL_INVALID_STORE', 'client: must be an ioredis Redis or Cluster instance');
    this.client = client;
    this.redis = ioredisAdapter(client);
  }

  check(scripts: AlgorithmScripts, key: string, { now, cost, dryRun, blockFor, tiers }: StoreCheck): Promise<RawReply> {
    return this.run(scripts.check, key, scriptArgv(now, cost, dryRun, blockFor, tiers));
  }

  refund(scripts: AlgorithmScripts, key: string, { now, cost, dryRun, countedAt, tiers }: StoreRefund): Promise<RawReply> {
    return this.run(scripts.refund, key, scriptArgv(now, cost, dryRun, countedAt, tiers));
  }

  private run(script: Script<unknown>, key: string, argv: (string | number)[]): Promise<RawReply> {
    const unavailable = this.redis.unavailable();
    if (unavailable !== undefined) return Promise.reject(new StoreUnavailableError(unavailable));
    return this.redis.run(script, key, argv) as Promise<RawReply>;
  }

  reset(key: string): Promise<void> {
    return this.redis.del(key).then(() => undefined);
  }
}
