/**
 * Reading decisions in tests: what a decision counted, and what two decisions for the same
 * request must share wherever they came from.
 */
import type { Decision } from '../../src';
import type { AlgorithmName } from '../../src/algorithms/types';

/**
 * Expects `estimated` to show exactly `count` units counted: a token bucket on a running clock
 * (Redis's own) has drained a sliver since, by well under half a unit in these tests.
 */
export function expectCounted(algorithm: AlgorithmName, estimated: number, count: number): void {
  if (algorithm !== 'token-bucket') {
    expect(estimated).toBeCloseTo(count, 6);
    return;
  }
  expect(estimated).toBeLessThanOrEqual(count);
  expect(estimated).toBeGreaterThan(count - 0.5);
}

/**
 * What must be the same whether a decision came from the store or from the deny cache: the
 * verdict, the waits, the remaining units, the tier that decided and each tier's own figures
 * (not the estimate, which a cached answer may have let decay, nor `cached` itself).
 */
export function decisionEssentials(decision: Decision): object {
  return {
    allowed: decision.allowed,
    blocked: decision.blocked,
    retryAfterMs: decision.retryAfterMs,
    resetAt: decision.resetAt,
    remaining: decision.remaining,
    tier: decision.tier,
    tiers: decision.tiers.map(({ remaining, retryAfterMs, resetAt }) => ({ remaining, retryAfterMs, resetAt })),
  };
}
