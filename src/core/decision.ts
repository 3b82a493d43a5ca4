import { remainingOf } from '../algorithms/shared';
import type { RawReply } from '../algorithms/types';
import type { ScriptCall } from '../protocol';
import { LEASE_REPLY, REPLY, type TierLayout } from '../protocol';
import type { Tier } from '../tiers';
import type { ConcurrencyDecision, Decision, TierDecision } from './types';

/** What a decision says besides the figures of its binding tier. */
type Verdict = Pick<
  Decision,
  'allowed' | 'identifier' | 'retryAfterMs' | 'now' | 'cost' | 'counted' | 'blocked' | 'shadow' | 'cached' | 'concurrency'
>;

/** The figures of the binding tier that a decision repeats at its top. */
type TopFigures = Pick<TierDecision, 'limit' | 'window' | 'remaining' | 'estimated' | 'resetAt'>;

/**
 * The one constructor of a {@link Decision}: `verdict`, with the figures of the binding tier
 * `tiers[tier]` at its top (or of `top`, for a limiter with no tier, bounding requests in progress
 * only). The ratio of a tier of limit 0 is `Infinity` (it allows nothing).
 */
export function makeDecision(verdict: Verdict, tiers: readonly TierDecision[], tier: number, top: TopFigures = tiers[tier]): Decision {
  return {
    allowed: verdict.allowed,
    identifier: verdict.identifier,
    limit: top.limit,
    window: top.window,
    remaining: top.remaining,
    estimated: top.estimated,
    ratio: top.limit === 0 ? Infinity : top.estimated / top.limit,
    resetAt: top.resetAt,
    retryAfterMs: verdict.retryAfterMs,
    tier,
    tiers,
    now: verdict.now,
    cost: verdict.cost,
    counted: verdict.counted,
    blocked: verdict.blocked,
    shadow: verdict.shadow,
    cached: verdict.cached,
    concurrency: verdict.concurrency,
  };
}

/** Milliseconds left on the identifier's block, from a check's raw reply; 0 when it is not blocked. */
export function blockedMsOf(raw: RawReply): number {
  return Number(raw[REPLY.blockedMs]);
}

/** Whether `tier` binds rather than `best`: it keeps the client waiting longer, or as long with less left. */
function bindsOver(tier: TierDecision, best: TierDecision): boolean {
  return tier.retryAfterMs > best.retryAfterMs || (tier.retryAfterMs === best.retryAfterMs && tier.remaining < best.remaining);
}

/** What a limiter tells {@link decodeDecision}: how its algorithm's replies carry each tier, and whether it runs in shadow mode. */
export interface DecodingLimiter {
  readonly layout: TierLayout;
  readonly shadow: boolean;
}

/**
 * Decodes a check script's reply into a {@link Decision}: each tier's estimate, remaining,
 * wait and reset, and the binding tier, the one that keeps the client waiting longest, then the
 * one with least left. While the identifier is blocked, no tier has quota before the block ends.
 */
export function decodeDecision(raw: RawReply, call: ScriptCall, identifier: string, limiter: DecodingLimiter): Decision {
  const { layout, shadow } = limiter;
  const { tiers, cost, dryRun } = call;
  const concurrency = call.lease?.concurrency ?? 0;
  const allowed = raw[REPLY.allowed] === 1;
  const now = Number(raw[REPLY.now]);
  const blockedMs = blockedMsOf(raw);
  const tierDecisions: TierDecision[] = new Array(tiers.length);
  let binding = 0;
  for (let i = 0; i < tiers.length; i++) {
    const { limit, window } = tiers[i];
    const { numerator, denominator, waitMs, resetMs } = layout.figures(raw, REPLY.firstTier + layout.size * i, tiers[i], now, cost);
    const tier: TierDecision = {
      limit,
      window,
      estimated: numerator / denominator,
      remaining: blockedMs > 0 ? 0 : remainingOf(numerator, denominator, limit),
      retryAfterMs: Math.max(waitMs, blockedMs),
      resetAt: now + Math.max(resetMs, blockedMs),
    };
    tierDecisions[i] = tier;
    if (bindsOver(tier, tierDecisions[binding])) binding = i;
  }
  const leases = concurrency > 0 ? leasePart(raw, REPLY.firstTier + layout.size * tiers.length, concurrency) : undefined;
  const counted = allowed && cost > 0 && !dryRun;
  if (tiers.length === 0) {
    // A limiter that bounds requests in progress only: its top-level figures describe that bound.
    const bound = leases as ConcurrencyDecision;
    const verdict = {
      allowed,
      identifier,
      retryAfterMs: allowed ? 0 : Infinity,
      now,
      cost,
      counted,
      blocked: false,
      shadow,
      cached: false,
      concurrency: bound,
    };
    const top = {
      limit: bound.limit,
      window: 0,
      remaining: Math.max(0, bound.limit - bound.inProgress),
      estimated: bound.inProgress,
      resetAt: now,
    };
    return makeDecision(verdict, [], -1, top);
  }
  const refused = leases?.refused === true;
  const retryAfterMs = allowed ? 0 : refused ? Infinity : tierDecisions[binding].retryAfterMs;
  return makeDecision(
    { allowed, identifier, retryAfterMs, now, cost, counted, blocked: blockedMs > 0, shadow, cached: false, concurrency: leases },
    tierDecisions,
    binding,
  );
}

/** The bound on requests in progress, from the lease part that follows the tiers in a reply, at `at`. */
function leasePart(raw: RawReply, at: number, limit: number): ConcurrencyDecision {
  return { limit, inProgress: Number(raw[at + LEASE_REPLY.inProgress]), refused: raw[at + LEASE_REPLY.refused] === 1 };
}

/**
 * The denial of a request whose `cost` is above the smallest limit, built on a peek (cost 0)
 * of the same identifier: it can never be allowed, so it waits `Infinity` in every tier it
 * exceeds, and the binding tier is the first of those.
 */
export function neverAllowed(peek: Decision, cost: number): Decision {
  const tiers = peek.tiers.map((tier) => (cost > tier.limit ? { ...tier, retryAfterMs: Infinity } : tier));
  const binding = tiers.findIndex((tier) => tier.retryAfterMs === Infinity);
  return makeDecision({ ...peek, allowed: false, retryAfterMs: Infinity, cost, counted: false }, tiers, binding);
}

/**
 * The decision of a call with tiers of limit 0, built on a peek (cost 0) of its other tiers, or
 * on nothing when every tier is 0 (`peek` undefined). A tier of limit 0 keeps no count and is
 * never sent to the store: it has 0 remaining, and a cost above 0 can never pass it.
 */
export function withoutQuota(
  peek: Decision | undefined,
  tiers: readonly Tier[],
  { identifier, cost, now, shadow }: { identifier: string; cost: number; now: number; shadow: boolean },
): Decision {
  const at = peek?.now ?? now;
  const tierDecisions: TierDecision[] = new Array(tiers.length);
  let next = 0;
  let binding = 0;
  for (let i = 0; i < tiers.length; i++) {
    const { limit, window } = tiers[i];
    const tier =
      limit === 0 ? { limit, window, estimated: 0, remaining: 0, retryAfterMs: 0, resetAt: at } : (peek as Decision).tiers[next++];
    tierDecisions[i] = tier;
    if (bindsOver(tier, tierDecisions[binding])) binding = i;
  }
  const decision = makeDecision(
    {
      allowed: peek?.allowed ?? true,
      identifier,
      retryAfterMs: peek?.retryAfterMs ?? 0,
      now: at,
      cost,
      counted: false,
      blocked: peek?.blocked ?? false,
      shadow,
      cached: false,
      concurrency: peek?.concurrency,
    },
    tierDecisions,
    binding,
  );
  return cost > 0 ? neverAllowed(decision, cost) : decision;
}
