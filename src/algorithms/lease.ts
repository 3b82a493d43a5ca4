/**
 * Leases: the requests in progress per identifier (`concurrency`), beside any algorithm's rate
 * tiers. A lease is a member of the identifier's lease key, a sorted set scored by the moment the
 * lease expires in the store's clock, so a slot held by a process that died comes back by itself.
 *
 * One script decides both bounds atomically: a request the concurrency bound refuses is checked
 * against the rate tiers as a dry run (it counts in none of them), and a request a rate tier refuses
 * takes no lease. Releasing or renewing a lease that is gone (released, or expired) changes nothing.
 *
 * The Lua and its TypeScript twins (for the MemoryStore) follow the same steps, function for function.
 */
import { ARGV_SLOT, checkReply, LUA_ARGS, LUA_PROTOCOL, leaseChangeReply, pushLease, REPLY } from '../protocol';
import type { LeaseCheckScript, LeaseResult, LeaseScript, LeaseState, MemoryResult, ScriptArgs } from './types';

/** The Lua helpers of the lease key, for the scripts that take, release and renew leases. */
export const LUA_LEASES = `
-- The lease key: a sorted set, one member per lease (its id) scored by the moment it expires.
-- Leases in progress at now; expired ones are dropped on the way, unless this is a dry run.
local function liveLeases(leaseKey, now, dryRun)
  if not dryRun then redis.call('ZREMRANGEBYSCORE', leaseKey, '-inf', now) end
  return redis.call('ZCOUNT', leaseKey, '(' .. now, '+inf')
end
-- Takes (or renews) a lease until now + leaseMs, never earlier than it already runs; the key lives as long.
local function takeLease(leaseKey, now, leaseMs, leaseId)
  local expires = now + leaseMs
  local held = redis.call('ZSCORE', leaseKey, leaseId)
  if held and tonumber(held) > expires then expires = tonumber(held) end
  redis.call('ZADD', leaseKey, expires, leaseId)
  if redis.call('PTTL', leaseKey) < expires - now then redis.call('PEXPIRE', leaseKey, expires - now) end
end
-- The moment a lease expires, when it is live at now; nil otherwise.
local function liveLease(leaseKey, now, leaseId)
  local held = redis.call('ZSCORE', leaseKey, leaseId)
  if held and tonumber(held) > now then return tonumber(held) end
  return nil
end
`;

/** The twin of `liveLeases`: the leases live at `now` (all of them, expired ones too, in a dry run), and how many are live. */
function liveLeases(leases: LeaseState | undefined, now: number, dryRun: boolean): [LeaseState | undefined, number] {
  if (leases === undefined) return [undefined, 0];
  let live = 0;
  let expired = false;
  for (const expires of leases.values()) {
    if (expires > now) live++;
    else expired = true;
  }
  if (dryRun || !expired) return [leases, live];
  const kept = new Map<string, number>();
  for (const [id, expires] of leases) if (expires > now) kept.set(id, expires);
  return [kept.size === 0 ? undefined : kept, live];
}

/** The twin of `takeLease`. */
function takeLease(leases: LeaseState | undefined, now: number, leaseMs: number, leaseId: string): LeaseResult['leases'] {
  const next = new Map(leases);
  next.set(leaseId, Math.max(now + leaseMs, leases?.get(leaseId) ?? 0));
  return next;
}

/** The twin of `liveLease`. */
function liveLease(leases: LeaseState | undefined, now: number, leaseId: string): number | undefined {
  const expires = leases?.get(leaseId);
  return expires !== undefined && expires > now ? expires : undefined;
}

/**
 * The main chunk of a check that takes a lease, after the algorithm's `check(key, argv)` and
 * {@link LUA_LEASES}: the concurrency bound first, then the rate tiers (as a dry run when the
 * bound refuses).
 */
export const LUA_LEASE_CHECK = `
local argv = ARGV
${LUA_ARGS}
local concurrency, leaseMs, leaseId = readLease(argv)
local leaseKey = KEYS[2]
local inProgress = liveLeases(leaseKey, now, dryRun)
local refused = 0
if inProgress >= concurrency then refused = 1 end
local reply
if tiers == 0 then
  reply = checkReply(1 - refused, now, 0)
else
  if refused == 1 then
    -- The tiers as a dry run, from a changed copy: readArgs remembers what it read from argv.
    argv = { unpack(argv) }
    argv[${ARGV_SLOT.dryRun}] = '1'
  end
  reply = check(KEYS[1], argv)
  if refused == 1 then reply[${REPLY.allowed + 1}] = 0 end
end
if reply[${REPLY.allowed + 1}] == 1 and not dryRun then
  takeLease(leaseKey, now, leaseMs, leaseId)
  inProgress = inProgress + 1
end
pushLease(reply, inProgress, refused)
return reply
`;

/** The twin of a check that takes a lease, around the algorithm's twin `check`. */
export function checkWithLease<State>(
  check: (state: State | undefined, args: ScriptArgs) => MemoryResult<State>,
): LeaseCheckScript<State>['apply'] {
  return (state, leases, args) => {
    const { now, dryRun, tiers, lease } = args;
    if (lease === undefined) throw new TypeError('a check that takes a lease needs args.lease');
    const [live, inProgress] = liveLeases(leases, now, dryRun);
    const refused = inProgress >= lease.concurrency ? 1 : 0;
    let result: MemoryResult<State>;
    if (tiers.length === 0) result = { reply: checkReply(refused === 1 ? 0 : 1, now, 0), state, expiresAt: undefined };
    else {
      result = check(state, refused === 1 ? { ...args, dryRun: true } : args);
      if (refused === 1) {
        const reply = [...result.reply];
        reply[REPLY.allowed] = 0;
        result = { ...result, reply };
      }
    }
    const reply = [...result.reply];
    const takes = reply[REPLY.allowed] === 1 && !dryRun;
    pushLease(reply, takes ? inProgress + 1 : inProgress, refused);
    return {
      ...result,
      reply,
      leases: takes ? takeLease(live, now, lease.leaseMs, lease.id) : live,
      leasesLiveUntil: takes ? Math.max(now + lease.leaseMs, live?.get(lease.id) ?? 0) : undefined,
    };
  };
}

/** Ends a lease: answers `1` when it was live (and is now released), `0` when it was gone already. */
export const RELEASE: LeaseScript = {
  lua: `${LUA_PROTOCOL}${LUA_LEASES}
local argv, leaseKey = ARGV, KEYS[1]
${LUA_ARGS}
local _, _, leaseId = readLease(argv)
local live = liveLease(leaseKey, now, leaseId)
if not dryRun then redis.call('ZREM', leaseKey, leaseId) end
if live then return leaseChangeReply(1) end
return leaseChangeReply(0)
`,
  apply(leases, { now, dryRun, lease }) {
    const id = lease?.id ?? '';
    const live = liveLease(leases, now, id);
    let next = leases;
    if (!dryRun && leases?.has(id)) {
      const kept = new Map(leases);
      kept.delete(id);
      next = kept.size === 0 ? undefined : kept;
    }
    return { reply: leaseChangeReply(live === undefined ? 0 : 1), leases: next, leasesLiveUntil: undefined };
  },
};

/** Extends a live lease to `now + leaseMs` (never shortens it): answers `1`, or `0` when it was gone (released or expired). */
export const RENEW: LeaseScript = {
  lua: `${LUA_PROTOCOL}${LUA_LEASES}
local argv, leaseKey = ARGV, KEYS[1]
${LUA_ARGS}
local _, leaseMs, leaseId = readLease(argv)
if not liveLease(leaseKey, now, leaseId) then return leaseChangeReply(0) end
if not dryRun then takeLease(leaseKey, now, leaseMs, leaseId) end
return leaseChangeReply(1)
`,
  apply(leases, { now, dryRun, lease }) {
    if (lease === undefined || liveLease(leases, now, lease.id) === undefined) {
      return { reply: leaseChangeReply(0), leases, leasesLiveUntil: undefined };
    }
    if (dryRun) return { reply: leaseChangeReply(1), leases, leasesLiveUntil: undefined };
    return {
      reply: leaseChangeReply(1),
      leases: takeLease(leases, now, lease.leaseMs, lease.id),
      leasesLiveUntil: Math.max(now + lease.leaseMs, leases?.get(lease.id) ?? 0),
    };
  },
};
