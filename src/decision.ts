import { remainingOf } from './algorithms/prelude';
import type { RawReply, Tier } from './algorithms/types';
import type { Decision, TierDecision } from './types';

/** Positions in a check's raw reply: `blockedMs`, the first tier's numbers, and how many each tier has. */
const BLOCKED_MS = 2;
const FIRST_TIER = 3;
const PER_TIER = 4;

/** Milliseconds left on the identifier's block, from a check's raw reply; 0 when it is not blocked. */
export function blockedMs(raw: RawReply): number {
  return Number(raw[BLOCKED_MS]);
}

/**
 * Decodes a check script's {@link RawReply} into a {@link Decision}: each tier's estimate,
 * remaining, wait and reset, and the binding tier, the one that keeps the client waiting
 * longest, then the one with least left. While the identifier is blocked, no tier has quota
 * before the block ends.
 */
export function toDecision(raw: RawReply, tiers: readonly Tier[], cost: number, dryRun: boolean, shadow: boolean): Decision {
  const allowed = raw[0] === 1;
  const now = Number(raw[1]);
  const blockedMs = Number(raw[BLOCKED_MS]);
  const tierDecisions: TierDecision[] = new Array(tiers.length);
  let binding = 0;
  for (let i = 0; i < tiers.length; i++) {
    const { limit, window } = tiers[i];
    const at = FIRST_TIER + PER_TIER * i;
    const numerator = Number(raw[at]);
    const denominator = Number(raw[at + 1]);
    const waitMs = Number(raw[at + 2]);
    const resetMs = Number(raw[at + 3]);
    const tier: TierDecision = {
      limit,
      window,
      estimated: numerator / denominator,
      remaining: blockedMs > 0 ? 0 : remainingOf(numerator, denominator, limit),
      retryAfterMs: Math.max(waitMs, blockedMs),
      resetAt: now + Math.max(resetMs, blockedMs),
    };
    tierDecisions[i] = tier;
    const best = tierDecisions[binding];
    if (tier.retryAfterMs > best.retryAfterMs || (tier.retryAfterMs === best.retryAfterMs && tier.remaining < best.remaining)) binding = i;
  }
  const top = tierDecisions[binding];
  return {
    allowed,
    limit: top.limit,
    window: top.window,
    remaining: top.remaining,
    estimated: top.estimated,
    ratio: top.estimated / top.limit,
    resetAt: top.resetAt,
    retryAfterMs: allowed ? 0 : top.retryAfterMs,
    tier: binding,
    tiers: tierDecisions,
    now,
    cost,
    counted: allowed && cost > 0 && !dryRun,
    blocked: blockedMs > 0,
    shadow,
    cached: false,
  };
}
