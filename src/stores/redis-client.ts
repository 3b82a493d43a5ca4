import type { CheckScript, Script } from '../algorithms/types';

/**
 * What a {@link RedisStore} needs of a Redis client. One small adapter per client kind
 * implements it, so the store logic is written once.
 */
export interface RedisClientAdapter {
  /** Why a command sent now would not go to Redis at once (to fail instead of queueing it), or `undefined`. */
  unavailable(): string | undefined;
  /** Runs `script` on one key: `EVALSHA`, falling back to `EVAL` when Redis answers `NOSCRIPT`. */
  run(script: Script<unknown>, key: string, argv: readonly (string | number)[]): Promise<unknown>;
  del(key: string): Promise<unknown>;
  /**
   * Runs a check script's batch form on several keys in one call (see `CheckBatcher`); absent
   * where keys may live on different nodes (a Cluster), so checks go one by one there.
   */
  runBatch?(script: CheckScript, keys: readonly string[], argv: readonly (string | number)[]): Promise<unknown>;
}
