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
