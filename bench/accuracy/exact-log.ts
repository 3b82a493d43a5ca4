/**
 * An exact sliding log for one identifier and one limit, written independently of
 * `src/algorithms/sliding-log.ts` so the study's ground truth does not depend on the
 * code under test. Same window convention as the library: at time `now`, a unit
 * counted at time `t` is inside the window iff `t > now - window`.
 *
 * Entries live in a growable ring buffer, so trimming and appending are O(1)
 * amortised; requests must be presented in non-decreasing time order.
 */
export class ExactLog {
  private times = new Float64Array(16);
  private costs = new Float64Array(16);
  private head = 0;
  private size = 0;
  private total = 0;

  /**
   * @param limit - units allowed per window.
   * @param window - window length in ms.
   */
  constructor(
    readonly limit: number,
    readonly window: number,
  ) {}

  /**
   * Units counted in the window ending at `now`, i.e. in `(now - window, now]`.
   * Forgets everything older, so `now` must never go backwards.
   */
  count(now: number): number {
    const oldest = now - this.window;
    const capacity = this.times.length;
    while (this.size > 0 && this.times[this.head] <= oldest) {
      this.total -= this.costs[this.head];
      this.head = (this.head + 1) % capacity;
      this.size--;
    }
    return this.total;
  }

  /** Whether an exact sliding log holding this history would allow `cost` more at `now`. */
  fits(now: number, cost: number): boolean {
    return this.count(now) + cost <= this.limit;
  }

  /** Records `cost` units at `now` (whether or not they fit: the caller decides). */
  add(now: number, cost: number): void {
    if (this.size === this.times.length) this.grow();
    const slot = (this.head + this.size) % this.times.length;
    this.times[slot] = now;
    this.costs[slot] = cost;
    this.size++;
    this.total += cost;
  }

  private grow(): void {
    const capacity = this.times.length;
    const times = new Float64Array(capacity * 2);
    const costs = new Float64Array(capacity * 2);
    for (let i = 0; i < this.size; i++) {
      times[i] = this.times[(this.head + i) % capacity];
      costs[i] = this.costs[(this.head + i) % capacity];
    }
    this.times = times;
    this.costs = costs;
    this.head = 0;
  }
}
