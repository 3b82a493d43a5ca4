/**
 * A Map bounded to `capacity` entries, in recency order: `set` moves a key to the end, and
 * past capacity the least recently set key is dropped. Shared by the MemoryStore and the
 * deny cache.
 */
export class LruMap<V> {
  /** The entries, least recently set first (readable for sweeping; write through the methods). */
  readonly entries = new Map<string, V>();
  /**
   * Resumes where the last eviction stopped. A fresh `keys()` iterator would walk past every
   * slot freed by earlier evictions (V8 compacts a Map only when it rehashes), making each
   * eviction O(capacity). Nothing live is ever behind it: every key it returned was deleted,
   * and a key set again moves to the end.
   */
  private evictor: IterableIterator<string> | undefined;

  constructor(readonly capacity: number) {}

  get size(): number {
    return this.entries.size;
  }

  get(key: string): V | undefined {
    return this.entries.get(key);
  }

  /** Stores `value` as the most recently used entry, dropping the least recently used past capacity. */
  set(key: string, value: V): void {
    this.entries.delete(key);
    this.entries.set(key, value);
    if (this.entries.size > this.capacity) {
      this.evictor ??= this.entries.keys();
      let oldest = this.evictor.next();
      if (oldest.done) {
        this.evictor = this.entries.keys();
        oldest = this.evictor.next();
      }
      if (!oldest.done) this.entries.delete(oldest.value);
    }
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  clear(): void {
    this.entries.clear();
    this.evictor = undefined;
  }
}
