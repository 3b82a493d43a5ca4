import type { RawReply, Tier } from './algorithms/types';
import type { Decision, TierDecision } from './types';

/**
 * Decodes a script's {@link RawReply} into a {@link Decision}: each tier's estimate,
 * remaining and reset, and the binding tier, the one that keeps the client waiting
 * longest, then the one with least left.
 */
export function toDecision(raw: RawReply, tiers: readonly Tier[], cost: number): Decision {
  const allowed = raw[0] === 1;
  const now = Number(raw[1]);
  const tierDecisions: TierDecision[] = new Array(tiers.length);
  let binding = 0;
  let latest = 0;
  for (let i = 0; i < tiers.length; i++) {
    const { limit, window } = tiers[i];
    const estimated = Number(raw[2 + 3 * i]) / Number(raw[3 + 3 * i]);
    const waitMs = Number(raw[4 + 3 * i]);
    if (waitMs > latest) latest = waitMs;
    tierDecisions[i] = { limit, window, estimated, remaining: Math.max(0, Math.floor(limit - estimated)), resetAt: now + waitMs };
    const best = tierDecisions[binding];
    const tier = tierDecisions[i];
    if (tier.resetAt > best.resetAt || (tier.resetAt === best.resetAt && tier.remaining < best.remaining)) binding = i;
  }
  const top = tierDecisions[binding];
  return {
    allowed,
    limit: top.limit,
    window: top.window,
    remaining: top.remaining,
    estimated: top.estimated,
    ratio: top.estimated / top.limit,
    resetAt: now + latest,
    retryAfterMs: allowed ? 0 : latest,
    tier: binding,
    tiers: tierDecisions,
    now,
    cost,
    cached: false,
  };
}
