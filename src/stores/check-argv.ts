import { scriptArgv } from '../algorithms/prelude';
import type { Tier } from '../algorithms/types';

/**
 * {@link scriptArgv} of a check, handing back the same array while its inputs repeat (no injected
 * clock, one cost, the same limits: the usual run of checks), so that it is not built again per
 * check and a batch of checks holding the same array can send it once. Treat the array as read-only.
 */
export class RepeatedCheckArgv {
  private last: readonly (string | number)[] | undefined;
  private cost = 0;
  private dryRun = false;
  private blockFor = 0;
  /** Limit and window of each tier of `last`, in order: compared by value, since a tiers array could be changed in place. */
  private tierValues: number[] = [];

  argv(now: number | undefined, cost: number, dryRun: boolean, blockFor: number, tiers: readonly Tier[]): readonly (string | number)[] {
    if (now !== undefined) return scriptArgv(now, cost, dryRun, blockFor, tiers);
    if (this.last !== undefined && cost === this.cost && dryRun === this.dryRun && blockFor === this.blockFor && this.sameTiers(tiers)) {
      return this.last;
    }
    const argv = scriptArgv(undefined, cost, dryRun, blockFor, tiers);
    this.last = argv;
    this.cost = cost;
    this.dryRun = dryRun;
    this.blockFor = blockFor;
    this.tierValues = tiers.flatMap((tier) => [tier.limit, tier.window]);
    return argv;
  }

  private sameTiers(tiers: readonly Tier[]): boolean {
    const values = this.tierValues;
    if (values.length !== 2 * tiers.length) return false;
    for (let i = 0; i < tiers.length; i++) {
      if (values[2 * i] !== tiers[i].limit || values[2 * i + 1] !== tiers[i].window) return false;
    }
    return true;
  }
}
