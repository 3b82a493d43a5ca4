import type { Script } from '../algorithms/types';

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
}
