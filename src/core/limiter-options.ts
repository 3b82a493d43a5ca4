/** Validation and resolution of {@link LimiterOptions}: each default once, each option checked once. */
import { ALGORITHM_NAMES } from '../algorithms';
import { DEFAULT_PRECISION } from '../algorithms/precise-window';
import type { AlgorithmName } from '../algorithms/types';
import { OptionError, Warnings } from '../errors';
import { type MetricsMeter, resolveMetrics } from '../metrics';
import { MemoryStore } from '../stores/memory';
import type { Store } from '../stores/types';
import { resolveTiers, type Tier } from '../tiers';
import {
  describeValue,
  type KnownKeys,
  keysOf,
  nonNegativeInteger,
  oneOf,
  optionalFunction,
  parseDuration,
  positiveInteger,
} from '../validate';
import { type ResolvedBreakerOptions, resolveBreakerOptions } from './breaker';
import type { AfterBlock, LimiterOptions } from './types';

const DEFAULT_ALGORITHM: AlgorithmName = 'sliding-window';
export const DEFAULT_PREFIX = 'rl';
const DEFAULT_TIMEOUT_MS = 500;
const DEFAULT_DENY_CACHE_SIZE = 10_000;
export const DEFAULT_COST = 1;
/** How long a lease (a request in progress under `concurrency`) lives unless renewed or released. */
const DEFAULT_LEASE_MS = 60_000;

/** Every key of {@link LimiterOptions}; the adapters' option lists extend it. */
export const LIMITER_OPTION_KEYS: KnownKeys<LimiterOptions> = {
  store: true,
  limit: true,
  window: true,
  limits: true,
  algorithm: true,
  precision: true,
  prefix: true,
  clock: true,
  timeoutMs: true,
  denyCacheSize: true,
  blockFor: true,
  afterBlock: true,
  shadow: true,
  concurrency: true,
  leaseMs: true,
  metrics: true,
  breaker: true,
};
export const LIMITER_OPTIONS = keysOf<LimiterOptions>(LIMITER_OPTION_KEYS);

/** {@link LimiterOptions} validated, with every default applied. */
export interface ResolvedLimiterOptions {
  readonly store: Store;
  readonly tiers: readonly Tier[];
  readonly algorithm: AlgorithmName;
  /** Buckets per window of `'precise-window'`. */
  readonly precision: number;
  readonly prefix: string;
  readonly clock: (() => number) | undefined;
  readonly timeoutMs: number;
  readonly denyCacheSize: number;
  /** Milliseconds; 0 for none. */
  readonly blockFor: number;
  readonly afterBlock: AfterBlock;
  readonly shadow: boolean;
  /** Most requests in progress per identifier; 0 for no bound. */
  readonly concurrency: number;
  /** Milliseconds a lease lives unless renewed or released (only with `concurrency`). */
  readonly leaseMs: number;
  /** The meter to record into; undefined for no metrics. */
  readonly metrics: MetricsMeter | undefined;
  /** The circuit breaker's settings; undefined for none. */
  readonly breaker: ResolvedBreakerOptions | undefined;
  /**
   * Whether a check that failed (timed out) but was counted by the store after all is given back
   * once its late reply shows it: set by the HTTP adapters unless `failMode` is `'open'`, where the
   * request was served and counting it is right.
   */
  readonly refundLateCounts: boolean;
  /** What this limiter has warned about (each limiter warns for itself). */
  readonly warnings: Warnings;
}

/** Validates `options` (whose unknown keys the caller has already rejected) and applies the defaults. */
export function resolveLimiterOptions(options: LimiterOptions): ResolvedLimiterOptions {
  const warnings = new Warnings();
  const concurrency = options.concurrency === undefined ? 0 : positiveInteger(options.concurrency, 'concurrency');
  if (concurrency === 0 && options.leaseMs !== undefined) {
    throw new OptionError('SWL_CONFLICTING_OPTIONS', 'leaseMs: takes effect with concurrency only: give concurrency too, or drop leaseMs');
  }
  // A bound on requests in progress alone: no rate tiers unless some are given.
  const rateless = concurrency > 0 && options.limit === undefined && options.window === undefined && options.limits === undefined;
  const tiers = Object.freeze(rateless ? [] : resolveTiers(options, warnings));
  const blockFor = options.blockFor === undefined || options.blockFor === 0 ? 0 : parseDuration(options.blockFor, 'blockFor', warnings);
  const afterBlock = oneOf(options.afterBlock ?? 'keep', ['keep', 'reset'] as const, 'afterBlock');
  if (blockFor === 0 && options.afterBlock !== undefined) {
    throw new OptionError('SWL_CONFLICTING_OPTIONS', 'afterBlock: takes effect with blockFor only: give blockFor too, or drop afterBlock');
  }
  const store = options.store ?? new MemoryStore();
  // Validated whatever the store.
  const breaker = resolveBreakerOptions(options.breaker);
  if (typeof store.check !== 'function' || typeof store.settle !== 'function' || typeof store.reset !== 'function') {
    throw new OptionError('SWL_INVALID_STORE', 'store: must be a RedisStore, a MemoryStore or another Store implementation');
  }
  if (concurrency > 0 && (typeof store.checkLease !== 'function' || typeof store.changeLease !== 'function')) {
    throw new OptionError(
      'SWL_INVALID_STORE',
      'store: concurrency needs a store that keeps leases (checkLease and changeLease), as RedisStore and MemoryStore do',
    );
  }
  const algorithm = oneOf(options.algorithm === undefined ? DEFAULT_ALGORITHM : options.algorithm, ALGORITHM_NAMES, 'algorithm');
  if (options.precision !== undefined && algorithm !== 'precise-window') {
    throw new OptionError(
      'SWL_CONFLICTING_OPTIONS',
      `precision: takes effect with algorithm 'precise-window' only, got algorithm '${algorithm}': drop precision, or set the algorithm`,
    );
  }
  return {
    store,
    tiers,
    algorithm,
    precision: options.precision === undefined ? DEFAULT_PRECISION : positiveInteger(options.precision, 'precision'),
    prefix: resolvePrefix(options.prefix === undefined ? DEFAULT_PREFIX : options.prefix),
    clock: optionalFunction(options.clock, 'clock'),
    timeoutMs: options.timeoutMs === undefined ? DEFAULT_TIMEOUT_MS : positiveInteger(options.timeoutMs, 'timeoutMs'),
    denyCacheSize:
      options.denyCacheSize === undefined ? DEFAULT_DENY_CACHE_SIZE : nonNegativeInteger(options.denyCacheSize, 'denyCacheSize'),
    blockFor,
    afterBlock,
    shadow: oneOf(options.shadow ?? false, [true, false], 'shadow'),
    concurrency,
    leaseMs: options.leaseMs === undefined ? DEFAULT_LEASE_MS : parseDuration(options.leaseMs, 'leaseMs', warnings),
    metrics: resolveMetrics(options.metrics),
    // A store that answers synchronously never times out: nothing for a breaker to spare. On a
    // sharded store (a Cluster) one breaker would refuse the healthy nodes' checks for a dead one's
    // timeouts: off unless asked for.
    breaker: !store.needsTimeout || (store.sharded === true && options.breaker === undefined) ? undefined : breaker,
    refundLateCounts: false,
    warnings,
  };
}

function resolvePrefix(prefix: unknown): string {
  if (typeof prefix !== 'string' || prefix.length === 0 || /[{}\s]/.test(prefix)) {
    throw new OptionError(
      'SWL_INVALID_PREFIX',
      `prefix: must be a non-empty string without braces or white space, got ${describeValue(prefix)}`,
    );
  }
  return prefix;
}

/**
 * Returns `cost` if it is a non-negative integer (and, for a fixed `cost` option, at most
 * `smallest`, the smallest limit), else throws naming `cost`. A cost computed per request or
 * per call may exceed the limit: that request is refused, as the client's doing, not the app's.
 */
export function validateCost(cost: unknown, smallest = Infinity, option = 'cost'): number {
  if (typeof cost !== 'number' || !Number.isSafeInteger(cost) || cost < 0) {
    throw new OptionError('SWL_INVALID_COST', `${option}: must be a non-negative integer, got ${describeValue(cost)}`);
  }
  if (cost > smallest) {
    throw new OptionError('SWL_INVALID_COST', `cost: a fixed cost must be at most ${smallest} (the smallest limit), got ${cost}`);
  }
  return cost;
}
