import { LruMap } from './lru';
import type { Decision } from './types';

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
 * `retryAfterMs` has passed. A denial for cost `c` is reused only for requests of cost
 * `c`: a larger cost is denied too, but must wait longer. The limiter drops the entry
 * when a request of another cost is counted for the identifier, since that moves the
 * moment the denied cost fits. Bounded: least recently denied first out.
 */
export class DenyCache {
  private readonly denials: LruMap<CachedDenial>;

  constructor(capacity: number) {
    this.denials = new LruMap(capacity);
  }

  get(key: string, cost: number, now: number): Decision | undefined {
    const denial = this.denials.get(key);
    if (denial === undefined) return undefined;
    if (now >= denial.until) {
      this.denials.delete(key);
      return undefined;
    }
    if (cost !== denial.decision.cost) return undefined;
    const { decision } = denial;
    return { ...decision, now: decision.now + (now - denial.at), retryAfterMs: denial.until - now, cached: true };
  }

  remember(key: string, decision: Decision, now: number): void {
    this.denials.set(key, { decision, at: now, until: now + decision.retryAfterMs });
  }

  delete(key: string): void {
    this.denials.delete(key);
  }
}
