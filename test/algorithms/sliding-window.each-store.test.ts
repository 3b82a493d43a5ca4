import { createLimiter } from '../../src';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { storesOfTestFile } from '../helpers/stores';

const WINDOW = 60_000;
const START = 1_700_000_040_000 - (1_700_000_040_000 % WINDOW); // a window boundary

const stores = storesOfTestFile();

describe.each(stores)('sliding window on %s', (_name, makeStore) => {
  function setup(limit = 100) {
    const clock = manualClock(START);
    // denyCacheSize 0: every check must reach the store's script.
    const limiter = createLimiter({
      store: makeStore(),
      limit,
      window: WINDOW,
      prefix: uniquePrefix(),
      clock: clock.now,
      denyCacheSize: 0,
    });
    return { clock, limiter };
  }

  async function fill(limiter: ReturnType<typeof setup>['limiter'], id: string, cost: number): Promise<void> {
    if (cost > 0) expect((await limiter.check(id, { cost })).allowed).toBe(true);
  }

  test('worked example: 15 s in, current 30, previous 80 -> estimate 90 -> allow', async () => {
    const { clock, limiter } = setup();
    await fill(limiter, 'a', 80);
    clock.set(START + WINDOW + 15_000);
    await fill(limiter, 'a', 29);
    const before = await limiter.peek('a');
    expect(before.estimated).toBe(29 + 60); // 80 * 45/60 = 60
    expect(await limiter.check('a')).toMatchObject({ allowed: true, estimated: 90, remaining: 10, retryAfterMs: 0 });
  });

  test('worked example: current 50, previous 80, 15 s in -> estimate 110 -> deny, nothing counted', async () => {
    const { clock, limiter } = setup();
    await fill(limiter, 'a', 80);
    clock.set(START + WINDOW);
    await fill(limiter, 'a', 20); // 20 + 80 = 100 at the boundary: fits exactly
    clock.set(START + WINDOW + 15_000);
    await fill(limiter, 'a', 20); // 40 + 60 = 100
    // 50 + 60 = 110 > 100
    expect(await limiter.check('a', { cost: 10 })).toMatchObject({ allowed: false, estimated: 100, remaining: 0 });
    expect((await limiter.peek('a', { cost: 0 })).estimated).toBe(100);
  });

  test('worked example: 45 s in, current 40, previous 70 -> estimate 57.5 -> allow', async () => {
    const { clock, limiter } = setup();
    await fill(limiter, 'a', 70);
    clock.set(START + WINDOW + 45_000);
    await fill(limiter, 'a', 39);
    expect(await limiter.check('a')).toMatchObject({ allowed: true, estimated: 57.5, remaining: 42, ratio: expect.closeTo(0.575) });
  });

  test('retryAfterMs is exact: waiting exactly that long is allowed, 1 s less is not', async () => {
    const { clock, limiter } = setup(10);
    await fill(limiter, 'a', 10);
    clock.set(START + WINDOW + 3_000);
    const denied = await limiter.check('a');
    expect(denied.allowed).toBe(false);
    // 10 * (60 - e) / 60 + 1 <= 10  <=>  e >= 6 s, so 3 s from now
    expect(denied.retryAfterMs).toBe(3_000);
    expect(denied.resetAt).toBe(denied.now + denied.retryAfterMs);
    const at = clock.now() + denied.retryAfterMs;
    clock.set(at - 1_000);
    expect((await limiter.peek('a')).allowed).toBe(false);
    clock.set(at - 1);
    expect((await limiter.peek('a')).allowed).toBe(false);
    clock.set(at);
    expect((await limiter.check('a')).allowed).toBe(true);
  });
});
