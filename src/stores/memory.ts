import type { Algorithm, RawReply } from '../algorithms/types';
import { nonNegativeInteger, positiveInteger, rejectUnknownKeys } from '../options';
import type { Store, StoreCheck } from './types';

/** Options of {@link MemoryStore}. */
export interface MemoryStoreOptions {
  /**
   * Most identifiers kept at once. Past it, the least recently used identifier is
   * forgotten (and so starts again from a full quota). Default `100_000`.
   */
  maxKeys?: number;
  /**
   * How often expired entries are swept, in milliseconds; `0` disables the timer (expired
   * entries are then dropped only when read or evicted). Default `1000`. The timer never
   * keeps the process alive.
   */
  sweepIntervalMs?: number;
}

interface Entry {
  state: unknown;
  expiresAt: number;
}

const OPTIONS = new Set(['maxKeys', 'sweepIntervalMs']);
/** Entries examined per sweep tick, so a sweep never stalls the event loop. */
const SWEEP_BATCH = 10_000;

/**
 * Keeps rate-limit state in this process: for one process, tests, or as a fallback.
 * It runs each algorithm's TypeScript twin, which decides exactly as the Redis script
 * does. Memory is bounded by `maxKeys` (least recently used first out) and expired
 * entries are swept incrementally in the background.
 */
export class MemoryStore implements Store {
  readonly needsTimeout = false;
  readonly maxKeys: number;
  /** Insertion order is recency order: every access moves its entry to the end. */
  private readonly entries = new Map<string, Entry>();
  private sweeper: IterableIterator<[string, Entry]> | undefined;
  /** Resumes where the last eviction stopped: see {@link MemoryStore.evictOldest}. */
  private evictor: IterableIterator<string> | undefined;
  /**
   * The latest time a check ran at. The timer sweeps by it when checks bring their own
   * (injected) clock, so virtual time is never judged by the wall clock, and by the wall
   * clock otherwise, so an idle store still frees its expired entries.
   */
  private lastNow = 0;
  private ownClock = false;
  private readonly timer: NodeJS.Timeout | undefined;

  constructor(options: MemoryStoreOptions = {}) {
    if (options === null || typeof options !== 'object') throw new TypeError('MemoryStore: expected an options object');
    rejectUnknownKeys(options, OPTIONS, 'MemoryStore');
    this.maxKeys = options.maxKeys === undefined ? 100_000 : positiveInteger(options.maxKeys, 'maxKeys');
    const sweepIntervalMs = options.sweepIntervalMs === undefined ? 1_000 : nonNegativeInteger(options.sweepIntervalMs, 'sweepIntervalMs');
    if (sweepIntervalMs > 0) {
      this.timer = setInterval(() => this.sweep(this.ownClock ? Date.now() : this.lastNow), sweepIntervalMs);
      this.timer.unref();
    }
  }

  /** Number of identifiers currently held. */
  get size(): number {
    return this.entries.size;
  }

  check(algorithm: Algorithm, key: string, { now, cost, dryRun, tiers }: StoreCheck): Promise<RawReply> {
    if (now === undefined) this.ownClock = true;
    const at = now === undefined ? Date.now() : now;
    if (at > this.lastNow) this.lastNow = at;
    let entry = this.entries.get(key);
    if (entry !== undefined) {
      this.entries.delete(key);
      if (entry.expiresAt <= at) entry = undefined;
    }
    const result = algorithm.apply(entry?.state, { now: at, cost, dryRun, tiers });
    if (entry !== undefined && result.state === entry.state) {
      this.entries.set(key, entry);
    } else if (result.state !== undefined) {
      this.entries.set(key, { state: result.state, expiresAt: result.expiresAt });
      if (this.entries.size > this.maxKeys) this.evictOldest();
    }
    return Promise.resolve(result.reply);
  }

  reset(key: string): Promise<void> {
    this.entries.delete(key);
    return Promise.resolve();
  }

  /**
   * Drops the least recently used entry. A fresh `keys()` iterator would walk past every
   * slot freed by earlier evictions (V8 compacts a Map only when it rehashes), making each
   * eviction O(maxKeys); this iterator resumes instead. Nothing live is ever behind it:
   * every entry it returned was deleted, and a used entry is re-inserted at the end.
   */
  private evictOldest(): void {
    this.evictor ??= this.entries.keys();
    let next = this.evictor.next();
    if (next.done) {
      this.evictor = this.entries.keys();
      next = this.evictor.next();
    }
    if (!next.done) this.entries.delete(next.value);
  }

  /** Drops expired entries, examining at most a batch per call and resuming where it stopped. */
  sweep(now: number): void {
    this.sweeper ??= this.entries.entries();
    for (let seen = 0; seen < SWEEP_BATCH; seen++) {
      const next = this.sweeper.next();
      if (next.done) {
        this.sweeper = undefined;
        return;
      }
      const [key, entry] = next.value;
      if (entry.expiresAt <= now) this.entries.delete(key);
    }
  }

  /** Stops the sweep timer and forgets everything. */
  shutdown(): void {
    if (this.timer) clearInterval(this.timer);
    this.entries.clear();
    this.sweeper = undefined;
    this.evictor = undefined;
  }
}
