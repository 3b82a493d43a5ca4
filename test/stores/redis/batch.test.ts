/**
 * RepeatedCheckArgv: the arguments of a check are built once while its inputs repeat, and
 * built again as soon as any input differs, including a tier changed in place.
 */
import { type ScriptCall, scriptArgv } from '../../../src/protocol';
import { RepeatedCheckArgv } from '../../../src/stores/redis/batch';

/** A check's call, from its inputs in ARGV order. */
function call(
  now: number | undefined,
  cost: number,
  dryRun: boolean,
  blockFor: number,
  tiers: readonly { limit: number; window: number }[],
): ScriptCall {
  return { now, cost, dryRun, blockFor, countedAt: 0, actualCost: 0, tiers };
}

describe('RepeatedCheckArgv', () => {
  test('hands back the same array while cost, dry run, blockFor and the tiers repeat, and equal to scriptArgv', () => {
    const repeated = new RepeatedCheckArgv();
    const tiers = [{ limit: 10, window: 1_000 }];
    const first = repeated.argv(call(undefined, 1, false, 0, tiers));
    expect(first).toEqual(scriptArgv(call(undefined, 1, false, 0, tiers)));
    expect(repeated.argv(call(undefined, 1, false, 0, tiers))).toBe(first);
    // Equal tiers in another array: still the same arguments.
    expect(repeated.argv(call(undefined, 1, false, 0, [{ limit: 10, window: 1_000 }]))).toBe(first);
  });

  test.each([
    [
      'cost',
      (r: RepeatedCheckArgv, t: { limit: number; window: number }[]) => r.argv(call(undefined, 2, false, 0, t)),
      [undefined, 2, false, 0],
    ],
    [
      'dry run',
      (r: RepeatedCheckArgv, t: { limit: number; window: number }[]) => r.argv(call(undefined, 1, true, 0, t)),
      [undefined, 1, true, 0],
    ],
    [
      'blockFor',
      (r: RepeatedCheckArgv, t: { limit: number; window: number }[]) => r.argv(call(undefined, 1, false, 500, t)),
      [undefined, 1, false, 500],
    ],
  ] as const)('builds the arguments again when the %s changes', (_name, change, inputs) => {
    const repeated = new RepeatedCheckArgv();
    const tiers = [{ limit: 10, window: 1_000 }];
    const first = repeated.argv(call(undefined, 1, false, 0, tiers));
    const changed = change(repeated, tiers);
    expect(changed).not.toBe(first);
    expect(changed).toEqual(scriptArgv(call(inputs[0], inputs[1], inputs[2], inputs[3], tiers)));
    expect(repeated.argv(call(undefined, 1, false, 0, tiers))).toEqual(first);
  });

  test('builds the arguments again for other tiers, a tier changed in place, or an injected clock', () => {
    const repeated = new RepeatedCheckArgv();
    const tiers = [{ limit: 10, window: 1_000 }];
    const first = repeated.argv(call(undefined, 1, false, 0, tiers));
    tiers[0].limit = 20;
    const afterChange = repeated.argv(call(undefined, 1, false, 0, tiers));
    expect(afterChange).not.toBe(first);
    expect(afterChange).toEqual(scriptArgv(call(undefined, 1, false, 0, tiers)));
    const two = [
      { limit: 20, window: 1_000 },
      { limit: 100, window: 60_000 },
    ];
    expect(repeated.argv(call(undefined, 1, false, 0, two))).toEqual(scriptArgv(call(undefined, 1, false, 0, two)));
    const clocked = repeated.argv(call(1_700_000_000_000, 1, false, 0, tiers));
    expect(clocked).toEqual(scriptArgv(call(1_700_000_000_000, 1, false, 0, tiers)));
    expect(repeated.argv(call(1_700_000_000_001, 1, false, 0, tiers))[0]).toBe(1_700_000_000_001);
  });
});
