import { LruMap } from '../lru';
import { sameTiers, type Tier } from '../tiers';
import { makeDecision } from './decision';
import type { Decision, TierDecision } from './types';

interface CachedDenial {
  decision: Decision;
  /** Local epoch ms at which the denial was made. */
  at: number;
  /** Local epoch ms until which the identifier stays denied. */
  until: number;
}

/**
 * Remembers denied identifiers until the moment they can be allowed again, so a flood
 * from one identifier costs no store round trip after its first denial.
 *
 * Exact for every algorithm here: while nothing is counted for an identifier its
 * estimate only falls with time, so a denial holds, with the same wait, until its
 * `retryAfterMs` has passed; and its remaining counts hold until a tier's `resetAt`, so an
 * entry is kept until the earlier of the two. A denial for cost `c` under given tiers is reused only for
 * requests of cost `c` under the same tiers: a larger cost is denied too, but must wait
 * longer, and other limits (a plan upgrade) decide afresh. The limiter drops the entry
 * when a request of another cost is counted, or a refund given, for the identifier, since
 * that moves the moment the denied cost fits. Bounded: least recently denied first out.
 */
export class DenyCache {
  private readonly denials: LruMap<CachedDenial>;

  constructor(capacity: number) {
    this.denials = new LruMap(capacity);
  }

  get(key: string, cost: number, tiers: readonly Tier[], now: number): Decision | undefined {
    const denial = this.denials.get(key);
    if (denial === undefined) return undefined;
    if (now >= denial.until) {
      this.denials.delete(key);
      return undefined;
    }
    const { decision } = denial;
    if (cost !== decision.cost || !sameTiers(decision.tiers, tiers)) return undefined;
    const elapsed = now - denial.at;
    const at = decision.now + elapsed;
    // Written out field by field rather than spread: this runs for every request of a flood.
    const aged: TierDecision[] = new Array(decision.tiers.length);
    for (let i = 0; i < aged.length; i++) {
      const tier = decision.tiers[i];
      aged[i] = {
        limit: tier.limit,
        window: tier.window,
        estimated: tier.estimated,
        remaining: tier.remaining,
        retryAfterMs: tier.retryAfterMs > elapsed ? tier.retryAfterMs - elapsed : 0,
        // A tier with nothing counted resets "now": at the answer's own now.
        resetAt: tier.resetAt === decision.now ? at : tier.resetAt,
      };
    }
    return makeDecision(
      {
        allowed: false,
        identifier: decision.identifier,
        retryAfterMs: decision.retryAfterMs - elapsed,
        now: at,
        cost: decision.cost,
        counted: false,
        blocked: decision.blocked,
        shadow: decision.shadow,
        cached: true,
        // As the store saw it at the denial: a refusal by the bound itself is never cached.
        concurrency: decision.concurrency,
      },
      aged,
      decision.tier,
    );
  }

  /**
   * Remembers a denial made at local time `now`. `blockedMs` is what was left of the
   * identifier's block (0 for none): a blocked denial is kept until the block ends, when the
   * store must decide again (and may start a new block).
   */
  remember(key: string, decision: Decision, now: number, blockedMs = 0): void {
    // Valid until the request may pass, or until a tier gives quota back (its remaining and
    // reset change then), whichever comes first.
    let until = now + (blockedMs > 0 ? blockedMs : decision.retryAfterMs);
    for (const tier of decision.tiers) {
      if (tier.resetAt > decision.now) until = Math.min(until, now + (tier.resetAt - decision.now));
    }
    this.denials.set(key, { decision, at: now, until });
  }

  delete(key: string): void {
    this.denials.delete(key);
  }
}
