import type { AlgorithmScripts, LeaseScript, LeaseState, RawReply, Script } from '../algorithms/types';
import { LruMap } from '../lru';
import type { ScriptCall } from '../protocol';
import { checkOptions, keysOf, nonNegativeInteger, positiveInteger } from '../validate';
import type { Store } from './types';

/** Options of {@link MemoryStore}. */
export interface MemoryStoreOptions {
  /**
   * Most identifiers kept at once. Past it, the least recently used identifier is
   * forgotten (and so starts again from a full quota). Default `100_000`.
   */
  maxKeys?: number | undefined;
  /**
   * How often expired entries are swept, in milliseconds; `0` disables the timer (expired
   * entries are then dropped only when read or evicted). Default `1000`. The timer never
   * keeps the process alive.
   */
  sweepIntervalMs?: number | undefined;
}

interface Entry {
  state: unknown;
  expiresAt: number;
}

const OPTIONS = keysOf<MemoryStoreOptions>({ maxKeys: true, sweepIntervalMs: true });
const DEFAULT_MAX_KEYS = 100_000;
const DEFAULT_SWEEP_INTERVAL_MS = 1_000;
/** Entries examined per sweep tick, so a sweep never stalls the event loop. */
const SWEEP_BATCH = 10_000;
/**
 * Most entries in one Map. V8 copies a Map's whole table when it grows or compacts it,
 * which stalls the event loop for about 100 ms at a million entries; tables of this size
 * copy in a few milliseconds. Smaller stores are one Map, with exact LRU order.
 */
const SHARD_SIZE = 65_536;

/**
 * Keeps rate-limit state in this process: for one process, tests, or as a fallback.
 * It runs each algorithm's TypeScript twin, which decides exactly as the Redis script
 * does. Memory is bounded by `maxKeys`: least recently used first out (exactly up to
 * 65,536 keys; above that per shard of at most 65,536 keys, chosen by a hash of the key).
 * Expired entries are swept incrementally in the background.
 */
export class MemoryStore implements Store {
  readonly needsTimeout = false;
  readonly maxKeys: number;
  private readonly shards: LruMap<Entry>[];
  /** Sweep position: the shard, and the iterator within it. */
  private sweepShard = 0;
  private sweeper: IterableIterator<[string, Entry]> | undefined;
  /**
   * The latest time a check ran at. The timer sweeps by it when checks bring their own
   * (injected) clock, so virtual time is never judged by the wall clock, and by the wall
   * clock otherwise, so an idle store still frees its expired entries.
   */
  private lastNow = 0;
  private ownClock = false;
  private readonly timer: NodeJS.Timeout | undefined;

  constructor(options: MemoryStoreOptions = {}) {
    checkOptions(options, OPTIONS, 'MemoryStore');
    this.maxKeys = options.maxKeys === undefined ? DEFAULT_MAX_KEYS : positiveInteger(options.maxKeys, 'maxKeys');
    const shards = Math.ceil(this.maxKeys / SHARD_SIZE);
    this.shards = Array.from({ length: shards }, () => new LruMap<Entry>(Math.ceil(this.maxKeys / shards)));
    const sweepIntervalMs =
      options.sweepIntervalMs === undefined ? DEFAULT_SWEEP_INTERVAL_MS : nonNegativeInteger(options.sweepIntervalMs, 'sweepIntervalMs');
    if (sweepIntervalMs > 0) {
      this.timer = setInterval(() => this.sweep(this.ownClock ? Date.now() : this.lastNow), sweepIntervalMs);
      this.timer.unref();
    }
  }

  /** Number of identifiers currently held. */
  get size(): number {
    let size = 0;
    for (const shard of this.shards) size += shard.size;
    return size;
  }

  private shardOf(key: string): LruMap<Entry> {
    if (this.shards.length === 1) return this.shards[0];
    let hash = 0;
    for (let i = 0; i < key.length; i++) hash = (Math.imul(hash, 31) + key.charCodeAt(i)) | 0;
    return this.shards[(hash >>> 0) % this.shards.length];
  }

  check(scripts: AlgorithmScripts, key: string, call: ScriptCall): Promise<RawReply> {
    return this.run(scripts.check, key, call);
  }

  settle(scripts: AlgorithmScripts, key: string, call: ScriptCall): Promise<RawReply> {
    return this.run(scripts.settle, key, call);
  }

  checkLease(scripts: AlgorithmScripts, key: string, leaseKey: string, call: ScriptCall): Promise<RawReply> {
    const now = this.clockOf(call);
    const entry = this.read(key, now);
    const leases = this.read(leaseKey, now);
    const result = scripts.leaseCheck.apply(entry?.state, leases?.state as LeaseState | undefined, { ...call, now });
    this.write(key, entry, result.state, result.expiresAt, result.minExpiresAt);
    this.write(leaseKey, leases, result.leases, undefined, result.leasesLiveUntil);
    return Promise.resolve(result.reply);
  }

  changeLease(script: LeaseScript, leaseKey: string, call: ScriptCall): Promise<RawReply> {
    const now = this.clockOf(call);
    const leases = this.read(leaseKey, now);
    const result = script.apply(leases?.state as LeaseState | undefined, { ...call, now });
    this.write(leaseKey, leases, result.leases, undefined, result.leasesLiveUntil);
    return Promise.resolve(result.reply);
  }

  private run(script: Script, key: string, call: ScriptCall): Promise<RawReply> {
    const now = this.clockOf(call);
    const entry = this.read(key, now);
    const result = script.apply(entry?.state, { ...call, now });
    this.write(key, entry, result.state, result.expiresAt, result.minExpiresAt);
    return Promise.resolve(result.reply);
  }

  /** The time of a call: its injected clock's, else this process's. */
  private clockOf(call: ScriptCall): number {
    if (call.now === undefined) this.ownClock = true;
    const at = call.now === undefined ? Date.now() : call.now;
    if (at > this.lastNow) this.lastNow = at;
    return at;
  }

  /** The live entry of `key` at `now`, if any. */
  private read(key: string, now: number): Entry | undefined {
    const entry = this.shardOf(key).get(key);
    return entry !== undefined && entry.expiresAt > now ? entry : undefined;
  }

  /**
   * Keeps `state` for `key` after a script: an unchanged state keeps its entry (now the most
   * recently used); `expiresAt` undefined keeps the entry's expiry (giving back, a trim), and
   * `minExpiresAt` raises it (a block, a charge, a lease); undefined `state` deletes the key.
   */
  private write(
    key: string,
    entry: Entry | undefined,
    state: unknown,
    expiresAt: number | undefined,
    minExpiresAt: number | undefined,
  ): void {
    const shard = this.shardOf(key);
    if (entry !== undefined && state === entry.state) {
      shard.set(key, entry);
    } else if (state !== undefined) {
      let until = expiresAt ?? entry?.expiresAt ?? Infinity;
      if (minExpiresAt !== undefined && (minExpiresAt > until || until === Infinity)) until = minExpiresAt;
      shard.set(key, { state, expiresAt: until });
    } else {
      shard.delete(key);
    }
  }

  reset(key: string): Promise<void> {
    this.shardOf(key).delete(key);
    return Promise.resolve();
  }

  /** Drops expired entries, examining at most a batch per call and resuming where it stopped. */
  sweep(now: number): void {
    for (let seen = 0; seen < SWEEP_BATCH; seen++) {
      const shard = this.shards[this.sweepShard];
      this.sweeper ??= shard.contents.entries();
      const next = this.sweeper.next();
      if (next.done) {
        this.sweeper = undefined;
        this.sweepShard = (this.sweepShard + 1) % this.shards.length;
        // A full pass ends a sweep: the next one starts on the next tick.
        if (this.sweepShard === 0) return;
        continue;
      }
      const [key, entry] = next.value;
      if (entry.expiresAt <= now) shard.delete(key);
    }
  }

  /** Stops the sweep timer and forgets everything. */
  shutdown(): void {
    if (this.timer) clearInterval(this.timer);
    for (const shard of this.shards) shard.clear();
    this.sweeper = undefined;
    this.sweepShard = 0;
  }
}
