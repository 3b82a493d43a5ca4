/**
 * Precise window specifics: the bucketed estimate and its exact waits, an exact log at 1 ms
 * buckets, the `precision` option, and the size of what it keeps.
 */
import { isDeepStrictEqual } from 'node:util';
import type { Redis } from 'ioredis';
import { createLimiter, type Decision } from '../../src';
import { MAX_ENTRY_BYTES, preciseWindow } from '../../src/algorithms/precise-window';
import { scriptArgv } from '../../src/protocol';
import { mulberry32 as seeded } from '../../support/random';
import { manualClock, redisClient, uniquePrefix } from '../helpers/redis';
import { onRedis, storesOfTestFile, withoutRedis } from '../helpers/stores';
import { expectOptionError, thrownBy } from '../helpers/thrown';

const START = 1_700_000_000_000 - (1_700_000_000_000 % 60_000); // a boundary of every bucket used here

const stores = storesOfTestFile();

describe.each(stores)('precise window on %s', (_name, makeStore) => {
  function setup(options: { limits: { limit: number; window: number }[]; precision?: number; algorithm?: 'sliding-log' }) {
    const clock = manualClock(START);
    const { algorithm = 'precise-window', ...rest } = options;
    // denyCacheSize 0: every check must reach the store's script.
    const limiter = createLimiter({
      store: makeStore(),
      ...rest,
      algorithm,
      prefix: uniquePrefix('precise'),
      clock: clock.now,
      denyCacheSize: 0,
    });
    return { clock, limiter };
  }

  test('the bucket the window cuts counts for the part of it still inside', async () => {
    // 10 per second in 100 ms buckets: 4 units in bucket 0, 6 in bucket 5.
    const { clock, limiter } = setup({ limits: [{ limit: 10, window: 1_000 }], precision: 10 });
    expect((await limiter.check('a', { cost: 4 })).allowed).toBe(true);
    clock.set(START + 550);
    expect((await limiter.check('a', { cost: 6 })).allowed).toBe(true);
    // At 1049 ms the window holds the ms from 50: half of bucket 0 (2 of its 4 units) and bucket 5.
    clock.set(START + 1_049);
    const peek = await limiter.peek('a');
    expect(peek.estimated).toBe(8);
    expect(peek.remaining).toBe(2);
    // Cost 3 fits once bucket 0 holds 1 unit: a quarter of it inside, from 75 ms, 25 ms later.
    const denied = await limiter.check('a', { cost: 3 });
    expect(denied.allowed).toBe(false);
    expect(denied.retryAfterMs).toBe(25);
    clock.set(START + 1_049 + 24);
    expect((await limiter.check('a', { cost: 3 })).allowed).toBe(false);
    clock.set(START + 1_049 + 25);
    const allowed = await limiter.check('a', { cost: 3 });
    expect(allowed.allowed).toBe(true);
    expect(allowed.estimated).toBe(10);
  });

  test('with 1 ms buckets it decides as the exact sliding log, waits included', async () => {
    const random = seeded(0x9e1);
    const limits = [
      { limit: 5, window: 1_000 },
      { limit: 12, window: 6_000 },
    ];
    // precision 6000: 1 ms buckets for both windows.
    const precise = setup({ limits, precision: 6_000 });
    const log = setup({ limits, algorithm: 'sliding-log' });
    let now = START;
    let denied = 0;
    for (let step = 0; step < 400; step++) {
      now += random() < 0.3 ? 0 : Math.floor(random() * 400);
      precise.clock.set(now);
      log.clock.set(now);
      const cost = random() < 0.8 ? 1 : Math.floor(random() * 4);
      const [a, b] = [await precise.limiter.check('k', { cost }), await log.limiter.check('k', { cost })];
      if (!isDeepStrictEqual(a, b)) throw new Error(`step ${step} at ${now}, cost ${cost}:\n${JSON.stringify(a)}\n${JSON.stringify(b)}`);
      if (!a.allowed) denied++;
    }
    expect(denied).toBeGreaterThan(50);
  });

  test('Retry-After is exact: a request that waits it fits, one that comes 1 ms earlier does not', async () => {
    const random = seeded(0x9e2);
    let checked = 0;
    for (const precision of [1, 3, 10, 600]) {
      const { clock, limiter } = setup({ limits: [{ limit: 7, window: 60_000 }], precision });
      let now = START + Math.floor(random() * 60_000);
      for (let step = 0; step < 60; step++) {
        now += Math.floor(random() * 6_000);
        clock.set(now);
        const cost = 1 + Math.floor(random() * 3);
        const decision: Decision = await limiter.check('k', { cost });
        if (decision.allowed) continue;
        const fitsAt = now + decision.retryAfterMs;
        clock.set(fitsAt - 1);
        expect((await limiter.peek('k', { cost })).allowed).toBe(false);
        clock.set(fitsAt);
        expect((await limiter.peek('k', { cost })).allowed).toBe(true);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(40);
  });

  test('a denied request counts nothing; a request counted now stays whole until its bucket starts to leave', async () => {
    const { clock, limiter } = setup({ limits: [{ limit: 3, window: 60_000 }], precision: 60 });
    for (let i = 0; i < 3; i++) expect((await limiter.check('a')).allowed).toBe(true);
    expect((await limiter.check('a')).allowed).toBe(false);
    // 1 s buckets: the units of bucket 0 are inside until the window starts past 0 ms, at 60 s.
    clock.set(START + 60_000 - 1);
    expect((await limiter.peek('a')).estimated).toBe(3);
    clock.set(START + 60_000 + 499);
    expect((await limiter.peek('a')).estimated).toBe(1.5);
    clock.set(START + 61_000 - 1);
    expect((await limiter.peek('a')).estimated).toBe(0);
  });
});

onRedis.describe('precise window: a tier that outgrows its entry bytes, in Lua and in its twin', () => {
  let client: Redis;
  beforeAll(() => {
    client = redisClient();
  });
  afterAll(() => client.quit());

  test('buckets widen until the entries fit, with identical replies and stored bytes, refunds included', async () => {
    const random = seeded(0x9e3);
    const key = `${uniquePrefix('precise-wide')}:k`;
    const tiers = [
      { limit: 1_000_000, window: 60_000 },
      { limit: 200_000, window: 1_000 },
    ];
    let state: unknown;
    let now = START;
    const counted: { at: number; cost: number }[] = [];
    let widest = 0;
    for (let step = 0; step < 3_000; step++) {
      now += random() < 0.2 ? 0 : 1 + Math.floor(random() * 12);
      const settle = counted.length > 0 && random() < 0.05;
      const taken = settle ? counted.splice(Math.floor(random() * counted.length), 1)[0] : undefined;
      const args = {
        now,
        cost: taken?.cost ?? 1 + Math.floor(random() * 300),
        dryRun: false,
        blockFor: 0,
        countedAt: taken?.at ?? 0,
        actualCost: taken === undefined ? 0 : Math.floor(random() * taken.cost),
        tiers,
        precision: 6_000,
      };
      const script = settle ? preciseWindow.settle : preciseWindow.check;
      const result = script.apply(state as never, args);
      const fromLua = await client.eval(script.lua, 1, key, ...scriptArgv(args));
      expect(fromLua).toEqual([...result.reply]);
      state = result.state;
      const stored = (await client.getBuffer(key))!.toString('latin1');
      expect(stored).toBe((state as { body: string }).body);
      if (!settle) counted.push({ at: now, cost: args.cost });
      // The first tier's bucket width, the second number of its header.
      widest = Math.max(widest, parseInt(stored.split(':')[1], 16));
      expect(stored.length).toBeLessThan(2 * (MAX_ENTRY_BYTES + 64));
    }
    // 10 ms buckets at first; the entries of a minute at this rate need several doublings.
    expect(widest).toBeGreaterThanOrEqual(40);
  });
});

withoutRedis.describe('precise window: the precision option', () => {
  test.each([0, -1, 1.5, Number.NaN, '6000', null])('precision %p is refused with a coded OptionError naming it', (precision) => {
    const thrown = thrownBy(() => createLimiter({ algorithm: 'precise-window', precision: precision as number }));
    expectOptionError(thrown, 'precision', 'SWL_INVALID_NUMBER');
    expect((thrown as Error).message).toMatch(/^precision: must be a positive integer/);
  });

  test('precision with another algorithm is refused: it would change nothing', () => {
    const thrown = thrownBy(() => createLimiter({ precision: 600 }));
    expectOptionError(thrown, 'precision', 'SWL_CONFLICTING_OPTIONS');
    expect((thrown as Error).message).toMatch(/takes effect with algorithm 'precise-window' only/);
  });

  test('the limiter shows its precision: the default, or the one given', () => {
    expect(createLimiter({ algorithm: 'precise-window' }).precision).toBe(6_000);
    expect(createLimiter({ algorithm: 'precise-window', precision: 60 }).precision).toBe(60);
  });
});

withoutRedis.describe('precise window: what it keeps', () => {
  /** The stored string after `units` checks of cost 1 spread over one window of 60 s, at `precision`. */
  function keptAfter(units: number, precision: number): string {
    const tiers = [{ limit: units, window: 60_000 }];
    let state: unknown;
    for (let i = 0; i < units; i++) {
      const now = START + Math.floor((i * 60_000) / units);
      const result = preciseWindow.check.apply(state as never, {
        now,
        cost: 1,
        dryRun: false,
        blockFor: 0,
        countedAt: 0,
        actualCost: 0,
        tiers,
        precision,
      });
      expect(result.reply[0]).toBe(1);
      state = result.state;
    }
    return (state as { body: string }).body;
  }

  test('about a byte per unit held when units are sparse, at most one entry per bucket when they are not', () => {
    // 100 units over 6000 buckets: gaps of 60 buckets, one byte each, and the header.
    expect(keptAfter(100, 6_000).length).toBeLessThan(100 + 40);
    // 1000 units in 60 buckets: 59 entries and the tail, not 1000.
    const coarse = keptAfter(1_000, 60);
    expect(coarse.length).toBeLessThan(60 * 3 + 40);
  });
});
