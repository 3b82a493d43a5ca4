/**
 * An exact token bucket for one identifier and one limit, the study's definition of
 * `algorithm: 'token-bucket'`, written independently of `src/algorithms/token-bucket.ts`
 * (which keeps a theoretical arrival time instead of a level). It is the textbook form:
 * a level of tokens and the time it was last brought up to date.
 *
 * Definition: the bucket holds at most `limit` tokens and starts full; tokens come back
 * continuously at `limit / window` per ms (a whole bucket per `window`); a request of
 * `cost` is allowed iff the bucket holds at least `cost` tokens, and an allowed request
 * takes them out.
 *
 * Why it is exact: the level is kept in *scaled* tokens, one token being `window` of
 * them. Then the capacity is `limit × window`, a request of `cost` needs
 * `cost × window`, and `elapsed` ms bring back exactly `elapsed × limit`: since the
 * study's times are whole milliseconds, every quantity is an integer and nothing is
 * ever rounded. Every product and difference is checked to be a safe integer (below
 * 2^53, where doubles hold integers exactly) and refused otherwise, so the model
 * cannot silently round; the study's limits and windows stay far below that.
 */
export class ExactBucket {
  /** `limit × window`: a full bucket, in scaled tokens. */
  private readonly capacity: number;
  /** Scaled tokens at `updatedAt`; below 0 only when fed requests it would not have allowed. */
  private level: number;
  private updatedAt = -Infinity;

  /**
   * @param limit - the bucket's size in units (the burst allowed at once).
   * @param window - ms for an empty bucket to refill completely.
   */
  constructor(
    readonly limit: number,
    readonly window: number,
  ) {
    if (!Number.isSafeInteger(limit) || !Number.isSafeInteger(window) || limit <= 0 || window <= 0)
      throw new RangeError('exact bucket: limit and window must be positive integers');
    this.capacity = limit * window;
    if (!Number.isSafeInteger(this.capacity * 2)) throw new RangeError('exact bucket: limit × window too large to stay exact');
    this.level = this.capacity;
  }

  /** Brings the level up to `now` (whole ms, never going backwards). */
  private refill(now: number): void {
    if (!Number.isSafeInteger(now)) throw new RangeError('exact bucket: times must be whole milliseconds');
    if (now < this.updatedAt) throw new RangeError('exact bucket: time went backwards');
    if (this.level < this.capacity) {
      const missing = this.capacity - this.level;
      const elapsed = now - this.updatedAt;
      // limit ≥ 1, so a pause of `missing` ms or more refills it whatever the limit (and keeps elapsed × limit small below).
      if (elapsed >= missing) this.level = this.capacity;
      else {
        const gain = elapsed * this.limit;
        if (!Number.isSafeInteger(gain)) throw new RangeError('exact bucket: refill too large to stay exact');
        this.level = Math.min(this.capacity, this.level + gain);
      }
    }
    this.updatedAt = now;
  }

  /** Tokens in the bucket at `now`, in units (may be fractional). */
  tokens(now: number): number {
    this.refill(now);
    return this.level / this.window;
  }

  /** Whether the bucket, with the history it was given, allows `cost` at `now`. */
  fits(now: number, cost: number): boolean {
    this.refill(now);
    return this.level >= cost * this.window;
  }

  /**
   * Takes `cost` out at `now`, whether or not it fits (the caller decides: a shadow
   * bucket records what the algorithm under test allowed, rightly or not).
   */
  add(now: number, cost: number): void {
    this.refill(now);
    const scaled = cost * this.window;
    if (!Number.isSafeInteger(scaled) || !Number.isSafeInteger(this.level - scaled))
      throw new RangeError('exact bucket: cost too large to stay exact');
    this.level -= scaled;
  }
}
