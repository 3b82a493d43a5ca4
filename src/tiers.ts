/** Tiers: the limits a limiter enforces together, from their options to their comparison. */
import { OptionError, type Warnings } from './errors';
import { checkOptions, type Duration, describeValue, keysOf, nonNegativeInteger, parseDuration } from './validate';

/** One limit of a limiter, resolved: at most `limit` units of cost per `window` milliseconds. */
export interface Tier {
  readonly limit: number;
  readonly window: number;
}

/** One limit among several, as given in a `limits` option. */
export interface TierOptions {
  /** Most units of cost allowed per window: a non-negative integer (`0` refuses every cost). */
  limit: number;
  /** Window length: milliseconds, or a string such as `'1s'`, `'1m'`, `'1h'`, `'1d'`. Default `'1m'`. */
  window?: Duration | undefined;
}

/** The options that choose the tiers: `limits`, or `limit` and `window`. */
export interface TierChoice {
  readonly limit?: number | undefined;
  readonly window?: Duration | undefined;
  readonly limits?: readonly TierOptions[] | undefined;
}

const DEFAULT_LIMIT = 100;
const DEFAULT_WINDOW = '1m';
const TIER_OPTIONS = keysOf<TierOptions>({ limit: true, window: true });

/** Validates and resolves the tiers: `limits`, or `limit` with `window`; a window in the wrong unit is warned about through `warnings`. */
export function resolveTiers(options: TierChoice, warnings: Warnings): Tier[] {
  if (options.limits !== undefined) {
    if (options.limit !== undefined || options.window !== undefined) {
      throw new OptionError('SWL_CONFLICTING_OPTIONS', 'limits: give either limits or limit/window, not both');
    }
    if (!Array.isArray(options.limits) || options.limits.length === 0) {
      throw new OptionError(
        'SWL_INVALID_LIMIT',
        `limits: must be a non-empty array of { limit, window }, got ${describeValue(options.limits)}`,
      );
    }
    return options.limits.map((tier: unknown, i) => {
      if (tier === null || typeof tier !== 'object')
        throw new OptionError('SWL_INVALID_LIMIT', `limits[${i}]: must be an object { limit, window }`);
      checkOptions(tier, TIER_OPTIONS, `limits[${i}]`);
      const { limit, window } = tier as TierOptions;
      return makeTier(limit, window === undefined ? DEFAULT_WINDOW : window, `limits[${i}].`, warnings);
    });
  }
  return [
    makeTier(
      options.limit === undefined ? DEFAULT_LIMIT : options.limit,
      options.window === undefined ? DEFAULT_WINDOW : options.window,
      '',
      warnings,
    ),
  ];
}

function makeTier(limitOption: unknown, windowOption: unknown, path: string, warnings: Warnings): Tier {
  const limit = nonNegativeInteger(limitOption, `${path}limit`, 'SWL_INVALID_LIMIT');
  const window = parseDuration(windowOption, `${path}window`, warnings);
  // Scripts compare limit * window exactly in double precision.
  if (limit * window > Number.MAX_SAFE_INTEGER / 4) {
    throw new OptionError('SWL_INVALID_LIMIT', `${path}limit: limit x window (ms) must stay below 2^51, got ${limit} x ${window}`);
  }
  return { limit, window };
}

/** The smallest limit among `tiers`: no single request may cost more. 0 when a tier refuses everything. */
export function smallestLimit(tiers: readonly Tier[]): number {
  let smallest = Infinity;
  for (const tier of tiers) if (tier.limit < smallest) smallest = tier.limit;
  return smallest;
}

/** The longest window among `tiers` (what the Lua `readArgs` returns as `longest`). */
export function longestWindow(tiers: readonly Tier[]): number {
  let longest = 0;
  for (const tier of tiers) if (tier.window > longest) longest = tier.window;
  return longest;
}

/** The tiers that give quota: a tier of limit 0 refuses every cost without asking the store. */
export function tiersWithQuota(tiers: readonly Tier[]): readonly Tier[] {
  for (const tier of tiers) if (tier.limit === 0) return tiers.filter((each) => each.limit > 0);
  return tiers;
}

/** Whether two lists of tiers have the same limits and windows, in the same order. */
export function sameTiers(a: readonly Tier[], b: readonly Tier[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    if (a[i].limit !== b[i].limit || a[i].window !== b[i].window) return false;
  }
  return true;
}
