/**
 * The settlement of the algorithms whose state is a string of counters (sliding window, fixed
 * window, token bucket): the frame they share, in Lua and as its twin. A settlement of a check
 * that counted `cost` units to `actualCost` gives the difference back when it is less, and
 * charges it now when it is more; each algorithm says only how it gives back and charges.
 */
import { settleReply } from '../protocol';
import { setAtLeast } from './block';
import { type SettleLua, settleLua } from './prelude';
import type { MemoryResult, ScriptArgs } from './types';

/**
 * A settle script for a counter algorithm: the prelude, the algorithm's `helpers`, then its
 * `parts`, Lua that defines, over the locals of `LUA_ARGS`:
 * - `readState(body)`: the saved counters of the stored body;
 * - `giveBack(saved, units)`: takes up to `units` back from `saved` (in place), and answers how many;
 * - `encodeState(saved)`: the body of `saved`;
 * - `charge(saved, charged)`: the body after `charged` more units at `now`, and how many ms the key
 *   lives at least.
 *
 * A give-back keeps the key's expiry and its block; a charge ends a block that is over, and the
 * key lives at least as long as `charge` says (`setAtLeast`).
 */
export function counterSettleLua(helpers: string, parts: string): SettleLua {
  return settleLua(
    helpers,
    `${parts}
local value = readValue(key)
local blockedUntil, body = readBlocked(value)
local saved = readState(body)
local givenBack, charged = 0, 0
if actualCost < cost and value then
  givenBack = giveBack(saved, cost - actualCost)
  if givenBack > 0 and not dryRun then
    writeValue(key, withMarker(blockedUntil, encodeState(saved)))
  end
elseif actualCost > cost then
  charged = actualCost - cost
  if not dryRun then
    local chargedBody, expiry = charge(saved, charged)
    setAtLeast(key, withMarker(liveBlock(blockedUntil, now), chargedBody), expiry)
  end
end
return settleReply(givenBack, charged)
`,
  );
}

/** The twins of an algorithm's parts of {@link counterSettleLua}, on its stored body. */
export interface CounterSettleTwins<Body> {
  /** Takes up to `units` back from `state` (not changed): how many, and the body after. */
  giveBack(state: Body, units: number, args: ScriptArgs): { givenBack: number; next: Body };
  /** The body after `charged` more units at `args.now`, and the epoch ms it lives at least until. */
  charge(state: Body | undefined, charged: number, args: ScriptArgs): { next: Body; livesUntil: number };
}

/** The twin of {@link counterSettleLua}: an algorithm's settle body (blocks aside), from its `twins`. */
export function counterSettle<Body>(twins: CounterSettleTwins<Body>): (state: Body | undefined, args: ScriptArgs) => MemoryResult<Body> {
  return (state, args) => {
    const { cost, actualCost, dryRun } = args;
    if (actualCost < cost) {
      if (state === undefined) return { reply: settleReply(0, 0), state, expiresAt: undefined };
      const { givenBack, next } = twins.giveBack(state, cost - actualCost, args);
      return { reply: settleReply(givenBack, 0), state: givenBack > 0 && !dryRun ? next : state, expiresAt: undefined };
    }
    const charged = actualCost - cost;
    if (charged === 0 || dryRun) return { reply: settleReply(0, charged), state, expiresAt: undefined };
    const { next, livesUntil } = twins.charge(state, charged, args);
    return setAtLeast(next, livesUntil, settleReply(0, charged));
  };
}
