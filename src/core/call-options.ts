/**
 * The options of one call of the public API (`check`, `peek`, `wait`, `settle`): validated on
 * every call, since they come with it, and turned into the inputs the limiter runs a check with.
 */
import { OptionError, type Warnings } from '../errors';
import { resolveTiers, type Tier } from '../tiers';
import { checkOptions, describeValue, type KnownKeys, keysOf, nonNegativeInteger, positiveInteger } from '../validate';
import { DEFAULT_COST, validateCost } from './limiter-options';
import type { CheckOptions, Decision, WaitOptions } from './types';

const CHECK_OPTION_KEYS: KnownKeys<CheckOptions> = { cost: true, limit: true, window: true, limits: true, concurrency: true };
const CHECK_OPTIONS = keysOf<CheckOptions>(CHECK_OPTION_KEYS);
const WAIT_OPTIONS = keysOf<WaitOptions>({ ...CHECK_OPTION_KEYS, maxWaitMs: true, signal: true });

/** What a call's options leave of the limiter's own: its tiers and its bound on requests in progress. */
export interface CallDefaults {
  readonly tiers: readonly Tier[];
  readonly concurrency: number;
  /** Where a call's window in the wrong unit is warned about: the limiter's own warnings. */
  readonly warnings: Warnings;
}

/** The validated inputs of one check. */
export interface CallInputs {
  readonly cost: number;
  readonly tiers: readonly Tier[];
  readonly concurrency: number;
}

/** `check`'s or `peek`'s options (`method` names the call in errors) over the limiter's `defaults`; throws an `OptionError`. */
export function callInputs(options: CheckOptions | undefined, defaults: CallDefaults, method: 'check' | 'peek'): CallInputs {
  if (options === undefined) return { cost: DEFAULT_COST, tiers: defaults.tiers, concurrency: defaults.concurrency };
  checkOptions(options, CHECK_OPTIONS, method);
  const customTiers = options.limit !== undefined || options.window !== undefined || options.limits !== undefined;
  const tiers = customTiers ? callTiers(options, defaults) : defaults.tiers;
  const cost = options.cost === undefined ? DEFAULT_COST : validateCost(options.cost);
  const concurrency = options.concurrency === undefined ? defaults.concurrency : callConcurrency(options.concurrency, defaults.concurrency);
  return { cost, tiers, concurrency };
}

/** `wait`'s options, split into the check's and the wait's own; throws an `OptionError`. */
export function waitInputs(options: WaitOptions | undefined): {
  readonly check: CheckOptions | undefined;
  readonly maxWaitMs: number;
  readonly signal: AbortSignal | undefined;
} {
  if (options === undefined) return { check: undefined, maxWaitMs: Infinity, signal: undefined };
  checkOptions(options, WAIT_OPTIONS, 'wait');
  const { maxWaitMs, signal, ...check } = options;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new OptionError('SWL_INVALID_TYPE', `signal: must be an AbortSignal, got ${describeValue(signal)}`);
  }
  return { check, maxWaitMs: maxWaitMs === undefined ? Infinity : nonNegativeInteger(maxWaitMs, 'maxWaitMs'), signal };
}

/** A call's own bound on requests in progress: only on a limiter that keeps leases (`limiterConcurrency` above 0). */
function callConcurrency(concurrency: unknown, limiterConcurrency: number): number {
  if (limiterConcurrency === 0) {
    throw new OptionError('SWL_CONFLICTING_OPTIONS', 'concurrency: a call may change the bound only on a limiter created with concurrency');
  }
  return positiveInteger(concurrency, 'concurrency');
}

/**
 * The tiers of one call: `limits`, or `limit`/`window` over the limiter's single tier (with
 * several tiers, both must be given).
 */
function callTiers(options: CheckOptions, { tiers, warnings }: CallDefaults): readonly Tier[] {
  if (options.limits !== undefined || tiers.length === 1) {
    const single = options.limits === undefined ? tiers[0] : undefined;
    return resolveTiers(
      {
        limits: options.limits,
        limit: options.limit ?? single?.limit,
        window: options.window ?? single?.window,
      },
      warnings,
    );
  }
  if (options.limit === undefined || options.window === undefined) {
    throw new OptionError('SWL_INVALID_LIMIT', 'limit: a limiter with several tiers takes limit and window together, or limits');
  }
  return resolveTiers({ limit: options.limit, window: options.window }, warnings);
}

/** Throws unless `decision` has what a settlement reads: `counted`, `cost`, `now` and the `tiers` it was decided with. */
export function checkDecision(decision: Decision): void {
  const candidate = decision as Partial<Decision> | null;
  if (
    candidate === null ||
    typeof candidate !== 'object' ||
    typeof candidate.counted !== 'boolean' ||
    !Number.isSafeInteger(candidate.cost) ||
    !Number.isFinite(candidate.now) ||
    !Array.isArray(candidate.tiers) ||
    !candidate.tiers.every((tier) => Number.isSafeInteger(tier?.limit) && Number.isSafeInteger(tier?.window))
  ) {
    throw new OptionError('SWL_INVALID_TYPE', `decision: must be a decision returned by check(), got ${describeValue(decision)}`);
  }
}
