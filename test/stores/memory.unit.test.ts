/**
 * MemoryStore stays bounded: never more than maxKeys identifiers (least recently used
 * out), and expired entries are swept incrementally.
 */
import { createLimiter, MemoryStore } from '../../src';
import { ALGORITHMS } from '../../src/algorithms';
import { manualClock, uniquePrefix } from '../helpers/redis';

const START = 1_700_000_000_000;

/** A MemoryStore holding at most `maxKeys`, and a limiter of `limit` a minute on it (manual clock at START, no deny cache). */
function boundedLimiter(maxKeys: number, limit: number) {
  const store = new MemoryStore({ maxKeys, sweepIntervalMs: 0 });
  const clock = manualClock(START);
  const limiter = createLimiter({ store, limit, window: '1m', clock: clock.now, prefix: uniquePrefix('bounded'), denyCacheSize: 0 });
  return { store, clock, limiter };
}

/** Counts one unit for `key` at `now` straight through the store, in a sliding window of 10 per second. */
function countOneSecond(store: MemoryStore, key: string, now: number) {
  const tiers = [{ limit: 10, window: 1_000 }];
  return store.check(ALGORITHMS['sliding-window'], key, {
    now,
    cost: 1,
    dryRun: false,
    blockFor: 0,
    countedAt: 0,
    actualCost: 0,
    tiers,
    precision: 1,
  });
}

describe('MemoryStore boundedness', () => {
  // With the default maxKeys (100,000), straight through the store. Evicting with a fresh Map
  // iterator each time made this quadratic (over a minute); the 10 s timeout is part of the test.
  test('1,000,000 distinct identifiers keep size <= maxKeys, fast', async () => {
    const store = new MemoryStore({ sweepIntervalMs: 0 });
    expect(store.maxKeys).toBe(100_000);
    const check = {
      now: START,
      cost: 1,
      dryRun: false,
      blockFor: 0,
      countedAt: 0,
      actualCost: 0,
      tiers: [{ limit: 10, window: 60_000 }],
      precision: 1,
    };
    let maxSize = 0;
    for (let i = 0; i < 1_000_000; i++) {
      void store.check(ALGORITHMS['sliding-window'], `id${i}`, check);
      if (store.size > maxSize) maxSize = store.size;
    }
    expect(maxSize).toBe(100_000);
    expect(store.size).toBe(100_000);
    // The most recent identifiers are the ones kept, with their counts; the oldest are gone.
    const peek = (key: string) => store.check(ALGORITHMS['sliding-window'], key, { ...check, cost: 0, dryRun: true });
    expect((await peek('id999999'))[3]).toBe(1); // the tier's current count
    expect((await peek('id900000'))[3]).toBe(1);
    expect((await peek('id899999'))[3]).toBe(0);
    expect((await peek('id0'))[3]).toBe(0);
    store.shutdown();
    expect(store.size).toBe(0);
  }, 10_000);

  test('through a limiter too: 200,000 identifiers with maxKeys 10,000', async () => {
    const { store, clock, limiter } = boundedLimiter(10_000, 10);
    for (let i = 0; i < 200_000; i++) {
      await limiter.check(`id${i}`);
      if (store.size > 10_000) throw new Error(`size ${store.size} after ${i + 1} identifiers`);
      if (i % 1_000 === 0) clock.advance(1);
    }
    expect(store.size).toBe(10_000);
    expect((await limiter.peek('id199999', { cost: 0 })).estimated).toBe(1);
    expect((await limiter.peek('id189999', { cost: 0 })).estimated).toBe(0);
  });

  test('eviction is least recently used: a key in use survives a stream of new ones', async () => {
    const { store, limiter } = boundedLimiter(100, 1_000);
    for (let i = 0; i < 1_000; i++) {
      await limiter.check(`new${i}`);
      if (i % 10 === 0) await limiter.check('regular');
      expect(store.size).toBeLessThanOrEqual(100);
    }
    expect((await limiter.peek('regular', { cost: 0 })).estimated).toBe(100);
    expect((await limiter.peek('new0', { cost: 0 })).estimated).toBe(0);
  });

  test('a peek counts as use for eviction', async () => {
    const { store, limiter } = boundedLimiter(3, 10);
    for (const id of ['a', 'b', 'c']) await limiter.check(id);
    await limiter.peek('a');
    await limiter.check('d'); // evicts b, the least recently used
    expect(store.size).toBe(3);
    const estimates = [];
    for (const id of ['a', 'c', 'd', 'b']) estimates.push((await limiter.peek(id, { cost: 0 })).estimated);
    expect(estimates).toEqual([1, 1, 1, 0]);
  });

  test('expired entries are swept: in batches, resuming where the last sweep stopped', () => {
    const store = new MemoryStore({ maxKeys: 100_000, sweepIntervalMs: 0 });
    const check = (key: string, now: number) => countOneSecond(store, key, now);
    // 25,000 keys expiring at START + 2 s, then 5,000 expiring at START + 12 s.
    for (let i = 0; i < 25_000; i++) void check(`old${i}`, START);
    for (let i = 0; i < 5_000; i++) void check(`young${i}`, START + 10_000);
    expect(store.size).toBe(30_000);

    store.sweep(START + 1_999); // nothing expired yet
    store.sweep(START + 1_999);
    store.sweep(START + 1_999);
    store.sweep(START + 1_999);
    expect(store.size).toBe(30_000);

    store.sweep(START + 2_000); // one batch: at most 10,000 examined
    expect(store.size).toBe(20_000);
    store.sweep(START + 2_000);
    store.sweep(START + 2_000);
    expect(store.size).toBe(5_000); // every old key gone, every young one kept
    store.sweep(START + 12_000);
    store.sweep(START + 12_000);
    expect(store.size).toBe(0);
  });

  test('the sweep timer sweeps by the latest time a check ran at', () => {
    jest.useFakeTimers();
    try {
      const store = new MemoryStore({ sweepIntervalMs: 1_000 });
      void countOneSecond(store, 'early', START);
      void countOneSecond(store, 'late', START + 5_000);
      expect(store.size).toBe(2);
      jest.advanceTimersByTime(999);
      expect(store.size).toBe(2);
      jest.advanceTimersByTime(1);
      expect(store.size).toBe(1); // 'early' expired at START + 2 s; 'late' lives until START + 7 s
      store.shutdown();
      expect(jest.getTimerCount()).toBe(0);
    } finally {
      jest.useRealTimers();
    }
  });
});

describe('idle MemoryStore on the wall clock', () => {
  test('the sweep timer frees expired entries although no check runs any more', async () => {
    const store = new MemoryStore({ sweepIntervalMs: 20 });
    const limiter = createLimiter({ store, limit: 5, window: '50ms' });
    await Promise.all(['a', 'b', 'c'].map((id) => limiter.check(id)));
    expect(store.size).toBe(3);
    // Entries expire 2 x 50 ms after their last count; the timer is the only thing left running.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(store.size).toBe(0);
    store.shutdown();
  });
});
