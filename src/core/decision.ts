import { remainingOf } from '../algorithms/shared';
import type { RawReply } from '../algorithms/types';
import { LEASE_REPLY, REPLY, TIER_REPLY } from '../protocol';
import type { Tier } from '../tiers';
import type { ConcurrencyDecision, Decision, TierDecision } from './types';

/** What a check asked, which its reply does not repeat. */
export interface CheckAsked {
  readonly identifier: string;
  readonly tiers: readonly Tier[];
  readonly cost: number;
  /** A peek: nothing was to be counted. */
  readonly dryRun: boolean;
  /** The limiter runs in shadow mode. */
  readonly shadow: boolean;
  /** The bound on requests in progress of a check that took a lease; 0 for none (no lease part in the reply). */
  readonly concurrency: number;
}

/** Milliseconds left on the identifier's block, from a check's raw reply; 0 when it is not blocked. */
export function blockedMsOf(raw: RawReply): number {
  return Number(raw[REPLY.blockedMs]);
}

/** Whether `tier` binds rather than `best`: it keeps the client waiting longer, or as long with less left. */
function bindsOver(tier: TierDecision, best: TierDecision): boolean {
  return tier.retryAfterMs > best.retryAfterMs || (tier.retryAfterMs === best.retryAfterMs && tier.remaining < best.remaining);
}

/**
 * Decodes a check script's reply into a {@link Decision}: each tier's estimate, remaining,
 * wait and reset, and the binding tier, the one that keeps the client waiting longest, then the
 * one with least left. While the identifier is blocked, no tier has quota before the block ends.
 */
export function decodeDecision(raw: RawReply, { identifier, tiers, cost, dryRun, shadow, concurrency }: CheckAsked): Decision {
  const allowed = raw[REPLY.allowed] === 1;
  const now = Number(raw[REPLY.now]);
  const blockedMs = blockedMsOf(raw);
  const tierDecisions: TierDecision[] = new Array(tiers.length);
  let binding = 0;
  for (let i = 0; i < tiers.length; i++) {
    const { limit, window } = tiers[i];
    const at = REPLY.firstTier + TIER_REPLY.size * i;
    const numerator = Number(raw[at + TIER_REPLY.numerator]);
    const denominator = Number(raw[at + TIER_REPLY.denominator]);
    const waitMs = Number(raw[at + TIER_REPLY.waitMs]);
    const resetMs = Number(raw[at + TIER_REPLY.resetMs]);
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
  const leases = concurrency > 0 ? leasePart(raw, tiers.length, concurrency) : undefined;
  if (tiers.length === 0) return rateless(allowed, identifier, now, cost, dryRun, shadow, leases as ConcurrencyDecision);
  const top = tierDecisions[binding];
  const refused = leases?.refused === true;
  return {
    allowed,
    identifier,
    limit: top.limit,
    window: top.window,
    remaining: top.remaining,
    estimated: top.estimated,
    ratio: top.estimated / top.limit,
    resetAt: top.resetAt,
    retryAfterMs: allowed ? 0 : refused ? Infinity : top.retryAfterMs,
    tier: binding,
    tiers: tierDecisions,
    now,
    cost,
    counted: allowed && cost > 0 && !dryRun,
    blocked: blockedMs > 0,
    shadow,
    cached: false,
    concurrency: leases,
  };
}

/** The bound on requests in progress, from the lease part that follows the tiers in a reply. */
function leasePart(raw: RawReply, tiers: number, limit: number): ConcurrencyDecision {
  const at = REPLY.firstTier + TIER_REPLY.size * tiers;
  return { limit, inProgress: Number(raw[at + LEASE_REPLY.inProgress]), refused: raw[at + LEASE_REPLY.refused] === 1 };
}

/** The decision of a limiter that bounds requests in progress only: its top-level figures describe that bound. */
function rateless(
  allowed: boolean,
  identifier: string,
  now: number,
  cost: number,
  dryRun: boolean,
  shadow: boolean,
  leases: ConcurrencyDecision,
): Decision {
  return {
    allowed,
    identifier,
    limit: leases.limit,
    window: 0,
    remaining: Math.max(0, leases.limit - leases.inProgress),
    estimated: leases.inProgress,
    ratio: leases.inProgress / leases.limit,
    resetAt: now,
    retryAfterMs: allowed ? 0 : Infinity,
    tier: -1,
    tiers: [],
    now,
    cost,
    counted: allowed && cost > 0 && !dryRun,
    blocked: false,
    shadow,
    cached: false,
    concurrency: leases,
  };
}

/**
 * The denial of a request whose `cost` is above the smallest limit, built on a peek (cost 0)
 * of the same identifier: it can never be allowed, so it waits `Infinity` in every tier it
 * exceeds, and the binding tier is the first of those.
 */
export function neverAllowed(peek: Decision, cost: number): Decision {
  const tiers = peek.tiers.map((tier) => (cost > tier.limit ? { ...tier, retryAfterMs: Infinity } : tier));
  const binding = tiers.findIndex((tier) => tier.retryAfterMs === Infinity);
  const top = tiers[binding];
  return {
    ...peek,
    allowed: false,
    limit: top.limit,
    window: top.window,
    remaining: top.remaining,
    estimated: top.estimated,
    ratio: ratioOf(top),
    resetAt: top.resetAt,
    retryAfterMs: Infinity,
    tier: binding,
    tiers,
    cost,
    counted: false,
  };
}

/** Used over allowed: `Infinity` for a tier of limit 0 (it allows nothing). */
function ratioOf(tier: TierDecision): number {
  return tier.limit === 0 ? Infinity : tier.estimated / tier.limit;
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
  const top = tierDecisions[binding];
  const decision: Decision = {
    allowed: peek?.allowed ?? true,
    identifier,
    limit: top.limit,
    window: top.window,
    remaining: top.remaining,
    estimated: top.estimated,
    ratio: ratioOf(top),
    resetAt: top.resetAt,
    retryAfterMs: peek?.retryAfterMs ?? 0,
    tier: binding,
    tiers: tierDecisions,
    now: at,
    cost,
    counted: false,
    blocked: peek?.blocked ?? false,
    shadow,
    cached: false,
    concurrency: peek?.concurrency,
  };
  return cost > 0 ? neverAllowed(decision, cost) : decision;
}
