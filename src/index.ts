export type { AlgorithmName } from './algorithms/types';
export type { Awaitable } from './async';
export type { BreakerOptions } from './core/breaker';
export { createLimiter } from './core/limiter';
export type {
  AfterBlock,
  CheckOptions,
  ConcurrencyDecision,
  Decision,
  Lease,
  Limiter,
  LimiterOptions,
  TierDecision,
  WaitOptions,
} from './core/types';
export { WaitExceededError } from './core/wait';
export { CircuitOpenError, CODES, type Code, OptionError, RateLimitTimeoutError, StoreError, StoreUnavailableError } from './errors';
export type { HeaderFormat, HeaderStyle, HeadersOption, ResetFormat } from './http/headers';
export type { FailMode, HttpOptions } from './http/http-options';
export type { ByApiKeyOptions, ByIpOptions, IdentifierAnswer, Identify, IdentifyOption, RequestLike } from './http/identify';
export { ANONYMOUS, byApiKey, byIp, byUser } from './http/identify';
export type {
  MetricsAttributes,
  MetricsCounter,
  MetricsHistogram,
  MetricsInstrumentOptions,
  MetricsMeter,
  MetricsMeterProvider,
  MetricsOption,
  MetricsOutcome,
} from './metrics';
export type { MemoryStoreOptions } from './stores/memory';
export { MemoryStore } from './stores/memory';
export type { GlideClient, GlideClusterClient } from './stores/redis/glide';
export type { IoredisClient } from './stores/redis/ioredis';
export type { NodeRedisClient, NodeRedisCluster, NodeRedisCommandOptions, NodeRedisSentinel } from './stores/redis/node-redis';
export type { RedisStoreClient, RedisStoreOptions } from './stores/redis/redis-store';
export { RedisStore } from './stores/redis/redis-store';
export type { Store } from './stores/types';
export type { Tier, TierOptions } from './tiers';
export type { Duration } from './validate';
