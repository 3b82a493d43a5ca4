import type { ScriptCall, TierLayout } from '../protocol';

/** The name of a rate-limiting algorithm, as given in the `algorithm` option. */
export type AlgorithmName = 'sliding-window' | 'fixed-window' | 'sliding-log' | 'token-bucket' | 'precise-window';

/** A script's reply: numbers whose layout `protocol.ts` defines (`REPLY`, `TierLayout`, `SETTLE_REPLY`). */
export type RawReply = readonly number[];

/**
 * What a script's TypeScript twin is given: the {@link ScriptCall} the Lua script decodes from
 * its ARGV (see `protocol.ts`), under the same names, with `now` always known (the MemoryStore
 * reads its clock before it calls a twin).
 */
export type ScriptArgs = Omit<ScriptCall, 'now'> & { readonly now: number };

/** The TypeScript twin's result: the reply, and the state to keep (undefined: delete it). */
export interface MemoryResult<State> {
  readonly reply: RawReply;
  readonly state: State | undefined;
  /** Epoch ms after which the state may be dropped, like the Redis key's expiry; undefined keeps the current expiry. */
  readonly expiresAt: number | undefined;
  /** The state must live at least until then (a block): the expiry is raised to it when lower. */
  readonly minExpiresAt?: number | undefined;
}

/**
 * One atomic step on one identifier's key, written twice side by side so the halves cannot
 * drift apart: `lua` for Redis, `apply` (its pure TypeScript twin) for the MemoryStore. The
 * differential test holds them to identical replies and identical stored state.
 */
export interface Script<State = unknown> {
  /** Takes `KEYS[1]` (the identifier's key) and the ARGV of `protocol.ts`; returns a {@link RawReply}. */
  readonly lua: string;
  /** Must not mutate `state`. */
  apply(state: State | undefined, args: ScriptArgs): MemoryResult<State>;
}

/** A check script, with the same check for many keys in one call (see `checkLua` in `prelude.ts`). */
export interface CheckScript<State = unknown> extends Script<State> {
  /** Checks every key of `KEYS` in one call; answers one {@link RawReply} per key. */
  readonly batchLua: string;
  /** Checks keys of several Cluster slots served by one node, passed in ARGV (see `NODE_BATCH_SLOT`); answers one reply per key. */
  readonly nodeBatchLua: string;
}

/**
 * A Redis function library (Redis 7 and later): its code for `FUNCTION LOAD`, and the names to
 * `FCALL` of the functions that run an algorithm's scripts (the check's `lua`, `batchLua` and
 * `nodeBatchLua`, the lease check's and the settle's `lua`), with the same keys and arguments.
 */
export interface FunctionLibrary {
  readonly name: string;
  readonly code: string;
  readonly functions: {
    readonly check: string;
    readonly batch: string;
    readonly nodeBatch: string;
    readonly leaseCheck: string;
    readonly settle: string;
  };
}

/** The scripts of one algorithm. */
export interface AlgorithmScripts<State = unknown> {
  readonly algorithm: AlgorithmName;
  /** How its check replies carry each tier. */
  readonly tierLayout: TierLayout;
  readonly check: CheckScript<State>;
  /**
   * Settles a check that counted `cost` at `countedAt` to `actualCost`: gives back the difference
   * from the windows it was counted in when lower (a refund settles to 0), charges it now, past the
   * limit if need be, when higher.
   */
  readonly settle: Script<State>;
  /** The check that also takes a lease, for a limiter with `concurrency`. */
  readonly leaseCheck: LeaseCheckScript<State>;
  /** The same scripts as functions of one library, for Redis 7 and later (`FUNCTION LOAD`, `FCALL`). */
  readonly library: FunctionLibrary;
}

/** The live leases of an identifier: each lease's id, and the moment it expires. */
export type LeaseState = ReadonlyMap<string, number>;

/** What a script on a lease key does to it, as the MemoryStore keeps it. */
export interface LeaseResult {
  readonly reply: RawReply;
  /** The leases to keep; undefined deletes the key. */
  readonly leases: LeaseState | undefined;
  /** The lease key must live at least until then (its expiry is raised, never lowered); undefined keeps it. */
  readonly leasesLiveUntil: number | undefined;
}

/** A check that also takes a lease: the algorithm's check (on the rate key) and the lease key's twin, in one step. */
export interface LeaseCheckScript<State = unknown> {
  /** Takes `KEYS[1]` (the rate key) and `KEYS[2]` (the lease key). */
  readonly lua: string;
  apply(state: State | undefined, leases: LeaseState | undefined, args: ScriptArgs): MemoryResult<State> & LeaseResult;
}

/** A script on a lease key alone (release, renewal). */
export interface LeaseScript {
  /** Takes `KEYS[1]` (the lease key). */
  readonly lua: string;
  apply(leases: LeaseState | undefined, args: ScriptArgs): LeaseResult;
}
