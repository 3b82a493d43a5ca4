import type { Decision } from '../core/types';
import { OptionError } from '../errors';
import type { Tier } from '../tiers';
import { describeValue, oneOf } from '../validate';

/**
 * Built-in header styles, after the revisions of draft-ietf-httpapi-ratelimit-headers:
 * - `'legacy'`: `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (epoch seconds, or delta with `resetFormat: 'delta'`).
 * - `'draft-6'` (revision 06): `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (delta seconds) and `RateLimit-Policy: 100;w=60`.
 * - `'draft-7'` (revision 07): `RateLimit: limit=100, remaining=50, reset=30` and `RateLimit-Policy: 100;w=60`.
 * - `'ietf'` (revision 10, the latest in the working group's repository; 08 and 09 write the same):
 *   the structured fields `RateLimit-Policy: "default";q=100;w=60` and `RateLimit: "default";r=50;t=30`, one item per tier.
 */
export type HeaderStyle = 'legacy' | 'draft-6' | 'draft-7' | 'ietf';

/** Sets one response header; the adapters pass their framework's setter. */
type SetHeader<Target> = (target: Target, name: string, value: string) => void;

/**
 * A custom header format: called with every decision and a `set(name, value)` function.
 * Use it when a newer draft renames a parameter before this package follows.
 */
export type HeaderFormat = (decision: Decision, set: (name: string, value: string) => void) => void;

/** The `headers` option: a style, several, a custom format, or `false` for none. */
export type HeadersOption = HeaderStyle | HeaderFormat | readonly (HeaderStyle | HeaderFormat)[] | false;

/** How `X-RateLimit-Reset` (legacy style) is written: epoch seconds (default) or seconds from now. */
export type ResetFormat = 'epoch' | 'delta';

/** Writes the configured headers for a decision onto a response. */
export type HeaderWriter = <Target>(decision: Decision, target: Target, set: SetHeader<Target>) => void;

const STYLES: readonly HeaderStyle[] = ['legacy', 'draft-6', 'draft-7', 'ietf'];

/** Whole seconds, rounded up, from `now` until `at`; never negative. */
export function secondsUntil(at: number, now: number): number {
  return at > now ? Math.ceil((at - now) / 1000) : 0;
}

/** Seconds in a window, for policy fields (`w=`): at least 1, since the field takes whole seconds. */
function windowSeconds(window: number): number {
  return Math.max(1, Math.round(window / 1000));
}

/** Names of the policies in the `ietf` style: `"default"` for one tier, else a label per window. */
export function policyNames(tiers: readonly Tier[]): string[] {
  if (tiers.length === 1) return ['default'];
  const names = tiers.map((tier) => windowLabel(tier.window));
  return names.map((name, i) => (names.indexOf(name) === i && names.lastIndexOf(name) === i ? name : `${name}-${i}`));
}

function windowLabel(window: number): string {
  for (const [unit, ms] of [
    ['d', 86_400_000],
    ['h', 3_600_000],
    ['m', 60_000],
    ['s', 1_000],
  ] as const) {
    if (window % ms === 0) return `${window / ms}${unit}`;
  }
  return `${window}ms`;
}

/** The policy fields of a set of tiers, formatted once. */
interface Policies {
  /** `RateLimit-Policy` of draft 6 and 7: `100;w=60, 1000;w=3600`. */
  readonly plain: string;
  /** Quoted item names of the `ietf` style, one per tier. */
  readonly names: readonly string[];
  /** `RateLimit-Policy` of the `ietf` style. */
  readonly ietf: string;
}

function policiesOf(tiers: readonly Tier[]): Policies {
  const names = policyNames(tiers).map((name) => `"${name}"`);
  return {
    plain: tiers.map((tier) => `${tier.limit};w=${windowSeconds(tier.window)}`).join(', '),
    names,
    ietf: tiers.map((tier, i) => `${names[i]};q=${tier.limit};w=${windowSeconds(tier.window)}`).join(', '),
  };
}

/** Most distinct tier sets (plans) whose policies are kept formatted when limits depend on the request. */
const POLICY_CACHE_SIZE = 256;

/**
 * The policies of a decision's tiers: fixed ones formatted once, or, for limits that depend
 * on the request, formatted once per distinct set of tiers.
 */
function policyLookup(tiers: readonly Tier[] | undefined): (decision: Decision) => Policies {
  if (tiers !== undefined) {
    const fixed = policiesOf(tiers);
    return () => fixed;
  }
  const formatted = new Map<string, Policies>();
  return (decision) => {
    let key = '';
    for (const tier of decision.tiers) key += `${tier.limit}/${tier.window} `;
    let policies = formatted.get(key);
    if (policies === undefined) {
      if (formatted.size >= POLICY_CACHE_SIZE) formatted.clear();
      policies = policiesOf(decision.tiers);
      formatted.set(key, policies);
    }
    return policies;
  };
}

/**
 * Builds the header writer once, so a request only formats the numbers that change. `tiers`
 * are the limiter's fixed tiers, or undefined when they depend on the request.
 */
export function createHeaderWriter(
  option: HeadersOption | undefined,
  resetFormat: ResetFormat | undefined,
  tiers: readonly Tier[] | undefined,
): HeaderWriter | undefined {
  const format = oneOf(resetFormat ?? 'epoch', ['epoch', 'delta'] as const, 'resetFormat');
  const chosen =
    option === undefined
      ? ['legacy' as const]
      : option === false
        ? []
        : Array.isArray(option)
          ? option
          : [option as HeaderStyle | HeaderFormat];
  if (chosen.length === 0) return undefined;
  const parts = chosen.map((style) => {
    if (typeof style === 'function') return customWriter(style);
    if (typeof style !== 'string')
      throw new OptionError(
        'SWL_INVALID_CHOICE',
        `headers: expected a style name (${STYLES.map((name) => `'${name}'`).join(', ')}), a function, a list of them, or false, got ${describeValue(style)}`,
      );
    return styleWriter(oneOf(style, STYLES, 'headers'), format, tiers);
  });
  if (parts.length === 1) return parts[0];
  return (decision, target, set) => {
    for (const write of parts) write(decision, target, set);
  };
}

function customWriter(format: HeaderFormat): HeaderWriter {
  return (decision, target, set) => format(decision, (name, value) => set(target, name, value));
}

function styleWriter(style: HeaderStyle, resetFormat: ResetFormat, tiers: readonly Tier[] | undefined): HeaderWriter {
  const policies = policyLookup(tiers);
  switch (style) {
    case 'legacy':
      return (decision, target, set) => {
        set(target, 'X-RateLimit-Limit', String(decision.limit));
        set(target, 'X-RateLimit-Remaining', String(decision.remaining));
        set(
          target,
          'X-RateLimit-Reset',
          String(resetFormat === 'epoch' ? Math.ceil(decision.resetAt / 1000) : secondsUntil(decision.resetAt, decision.now)),
        );
      };
    case 'draft-6':
      return (decision, target, set) => {
        set(target, 'RateLimit-Policy', policies(decision).plain);
        set(target, 'RateLimit-Limit', String(decision.limit));
        set(target, 'RateLimit-Remaining', String(decision.remaining));
        set(target, 'RateLimit-Reset', String(secondsUntil(decision.resetAt, decision.now)));
      };
    case 'draft-7':
      return (decision, target, set) => {
        set(target, 'RateLimit-Policy', policies(decision).plain);
        set(
          target,
          'RateLimit',
          `limit=${decision.limit}, remaining=${decision.remaining}, reset=${secondsUntil(decision.resetAt, decision.now)}`,
        );
      };
    case 'ietf': {
      return (decision, target, set) => {
        const { names, ietf } = policies(decision);
        set(target, 'RateLimit-Policy', ietf);
        let value = '';
        for (let i = 0; i < decision.tiers.length; i++) {
          const tier = decision.tiers[i];
          value += `${i === 0 ? '' : ', '}${names[i]};r=${tier.remaining};t=${secondsUntil(tier.resetAt, decision.now)}`;
        }
        set(target, 'RateLimit', value);
      };
    }
  }
}
