/**
 * A Map bounded to `capacity` entries, in recency order: `set` moves a key to the end, and
 * past capacity the least recently set key is dropped. Shared by the MemoryStore and the
 * deny cache.
 */
export class LruMap<V> {
  /** The entries, least recently set first (readable for sweeping; write through the methods). */
  readonly contents = new Map<string, V>();
  /**
   * Resumes where the last eviction stopped. A fresh `keys()` iterator would walk past every
   * slot freed by earlier evictions (V8 compacts a Map only when it rehashes), making each
   * eviction O(capacity). Nothing live is ever behind it: every key it returned was deleted,
   * and a key set again moves to the end.
   */
  private evictor: IterableIterator<string> | undefined;

  constructor(readonly capacity: number) {}

  get size(): number {
    return this.contents.size;
  }

  get(key: string): V | undefined {
    return this.contents.get(key);
  }

  /** Stores `value` as the most recently used entry, dropping the least recently used past capacity. */
  set(key: string, value: V): void {
    this.contents.delete(key);
    this.contents.set(key, value);
    if (this.contents.size > this.capacity) {
      this.evictor ??= this.contents.keys();
      let oldest = this.evictor.next();
      if (oldest.done) {
        this.evictor = this.contents.keys();
        oldest = this.evictor.next();
      }
      if (!oldest.done) this.contents.delete(oldest.value);
    }
  }

  delete(key: string): void {
    this.contents.delete(key);
  }

  clear(): void {
    this.contents.clear();
    this.evictor = undefined;
  }
}
