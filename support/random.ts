/**
 * Seeded pseudo-random numbers for reproducible traces. Nothing here is
 * cryptographic; it only has to be fast, well spread and identical on every run.
 */

/** A source of uniform numbers in [0, 1). */
export type Random = () => number;

/**
 * mulberry32: a 32-bit state generator, good enough for simulation.
 *
 * @param seed - any integer; the same seed always yields the same sequence.
 */
export function mulberry32(seed: number): Random {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let mixed = state;
    mixed = Math.imul(mixed ^ (mixed >>> 15), mixed | 1);
    mixed ^= mixed + Math.imul(mixed ^ (mixed >>> 7), mixed | 61);
    return ((mixed ^ (mixed >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A uniform number in (0, 1], safe to pass to `Math.log`.
 *
 * @param random - the generator to draw from.
 */
function positiveUniform(random: Random): number {
  return 1 - random();
}

/**
 * An exponentially distributed gap with the given rate (events per unit of time).
 *
 * @param random - the generator to draw from.
 * @param rate - mean number of events per unit of time; must be positive.
 */
export function exponential(random: Random, rate: number): number {
  return -Math.log(positiveUniform(random)) / rate;
}

/**
 * A Pareto (type I) sample: at least `minimum`, with tail `P(X > x) = (minimum / x) ^ shape`.
 *
 * @param random - the generator to draw from.
 * @param minimum - the scale, the smallest possible value.
 * @param shape - the tail index; smaller means heavier tails (the mean is infinite at or below 1).
 */
export function pareto(random: Random, minimum: number, shape: number): number {
  return minimum / positiveUniform(random) ** (1 / shape);
}
