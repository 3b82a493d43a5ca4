/**
 * `blockFor`, the penalty every algorithm shares: once an identifier is denied, it is refused
 * until `blockedUntil`, whatever its counts say. The block lives in the identifier's own key,
 * written by the script that denied, so every instance sees it and a check stays one key.
 *
 * The Lua half is in each script (string keys lead with a marker, `'!<until> <counters>'`; the
 * sliding log keeps a member `'!'`); this is the TypeScript half, wrapped around an
 * algorithm's twin, under the same rules:
 * - while blocked, nothing is counted or trimmed, and the answer is a denial;
 * - a denial that counts nothing, when `blockFor > 0` and it is not a dry run, starts a block
 *   and makes the key live at least that long;
 * - a counting write drops an expired marker; other writes keep it.
 */
import type { CheckArgs, MemoryResult, RefundArgs } from './types';

/** An identifier's stored state: the algorithm's own (`body`), and the end of a block (0 for none). */
export interface Stored<Body> {
  readonly blockedUntil: number;
  readonly body: Body | undefined;
}

/** Position of `blockedMs` in a check's reply. */
const BLOCKED_MS = 2;

function restore<Body>(stored: Stored<Body> | undefined, blockedUntil: number, body: Body | undefined): Stored<Body> | undefined {
  if (stored !== undefined && stored.blockedUntil === blockedUntil && stored.body === body) return stored;
  return body === undefined && blockedUntil === 0 ? undefined : { blockedUntil, body };
}

/** The twin of a check script with blocks. */
export function blockingCheck<Body>(
  check: (body: Body | undefined, args: CheckArgs) => MemoryResult<Body>,
): (stored: Stored<Body> | undefined, args: CheckArgs) => MemoryResult<Stored<Body>> {
  return (stored, args) => {
    const { now, cost, dryRun, blockFor } = args;
    const until = stored?.blockedUntil ?? 0;
    if (until > now) {
      const result = check(stored?.body, { ...args, dryRun: true });
      const reply = [...result.reply];
      reply[0] = 0;
      reply[BLOCKED_MS] = until - now;
      return { reply, state: stored, expiresAt: undefined };
    }
    const result = check(stored?.body, args);
    if (result.reply[0] === 1 && cost > 0 && !dryRun) {
      return { reply: result.reply, state: restore(stored, 0, result.state), expiresAt: result.expiresAt };
    }
    if (result.reply[0] === 0 && blockFor > 0 && !dryRun) {
      const reply = [...result.reply];
      reply[BLOCKED_MS] = blockFor;
      return { reply, state: restore(stored, now + blockFor, result.state), expiresAt: result.expiresAt, minExpiresAt: now + blockFor };
    }
    return { reply: result.reply, state: restore(stored, until, result.state), expiresAt: result.expiresAt };
  };
}

/** The twin of a refund script with blocks: a refund changes counts only, never a block. */
export function blockingRefund<Body>(
  refund: (body: Body | undefined, args: RefundArgs) => MemoryResult<Body>,
): (stored: Stored<Body> | undefined, args: RefundArgs) => MemoryResult<Stored<Body>> {
  return (stored, args) => {
    const result = refund(stored?.body, args);
    return { reply: result.reply, state: restore(stored, stored?.blockedUntil ?? 0, result.state), expiresAt: result.expiresAt };
  };
}
