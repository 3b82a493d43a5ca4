export { createLimiter, RateLimitTimeoutError } from './limiter';
export type { CheckOptions, Decision, Limiter, LimiterOptions, TierDecision, TierOptions } from './limiter';
export { RedisStore, StoreUnavailableError } from './stores/redis';
export type { RedisStoreOptions } from './stores/redis';
export { MemoryStore } from './stores/memory';
export type { MemoryStoreOptions } from './stores/memory';
export type { Store, StoreCheck } from './stores/types';
export type { Algorithm, AlgorithmName, RawReply, Tier } from './algorithms/types';
export type { Duration } from './options';
