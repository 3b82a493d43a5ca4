/**
 * `limiter.wait(identifier, { cost, maxWaitMs, signal })`: resolves with the allowed decision as
 * soon as the check passes, sleeping exactly the denial's `retryAfterMs` between attempts (never
 * polling), failing fast when the known wait is past `maxWaitMs`, and leaving nothing behind when
 * aborted. Real time with small windows (the wait is a real timer), on every store; and, on
 * Redis, waiters in two processes sharing one limit.
 */
import { type AlgorithmName, createLimiter, type Limiter, WaitExceededError } from '../../src';
import { startAppProcess } from '../helpers/app-process';
import { redisUrl, uniquePrefix } from '../helpers/redis';
import { everyStore, onRedis } from '../helpers/stores';
import { rejectionOf } from '../helpers/thrown';

const STORES = everyStore();
/**
 * How late a timer may fire on a loaded two-core machine (CI runs two test workers and their
 * Redis servers on it): the wait's own error is 0, and it is never early.
 */
const LATE_MS = 100;

describe.each(STORES)('on %s', (_storeName, makeStore) => {
  /** A limiter, and how many checks it has made (the test's own, and the waiters'). */
  function setup(limit: number, window: string, algorithm: AlgorithmName = 'fixed-window'): { limiter: Limiter; checks: () => number } {
    const limiter = createLimiter({
      store: makeStore(),
      algorithm,
      limit,
      window,
      prefix: uniquePrefix('wait'),
      denyCacheSize: 0,
    });
    const check = jest.spyOn(limiter, 'check');
    return { limiter, checks: () => check.mock.calls.length };
  }

  test('an identifier with quota is allowed at once, with one check', async () => {
    const { limiter, checks } = setup(2, '10s');
    expect(await limiter.wait('k')).toMatchObject({ allowed: true, counted: true });
    expect(checks()).toBe(1);
  });

  test('sleeps exactly the denial’s retryAfterMs, then is allowed: two checks, no polling', async () => {
    // The sliding log: its wait runs from the count. A fixed window on the real clock could turn
    // between the first check and the wait's, which would then be allowed at once.
    const { limiter, checks } = setup(2, '300ms', 'sliding-log');
    await limiter.check('k', { cost: 2 });
    const startedAt = Date.now();
    const known = (await limiter.peek('k')).retryAfterMs;
    const decision = await limiter.wait('k');
    const waited = Date.now() - startedAt;
    expect(decision).toMatchObject({ allowed: true, counted: true });
    expect(waited).toBeGreaterThanOrEqual(known - 1);
    expect(waited).toBeLessThan(known + LATE_MS);
    // The check that was denied, then the one that passed (the peek is not a check).
    expect(checks()).toBe(1 + 2);
  });

  test('fails fast, without sleeping, when the known wait is past maxWaitMs', async () => {
    // The sliding log: the wait is the whole window from the count (a fixed window's could end within maxWaitMs).
    const { limiter, checks } = setup(1, '10s', 'sliding-log');
    await limiter.check('k');
    const startedAt = Date.now();
    const failure = await rejectionOf(() => limiter.wait('k', { maxWaitMs: 1_000 }));
    expect(Date.now() - startedAt).toBeLessThan(LATE_MS);
    expect(failure).toBeInstanceOf(WaitExceededError);
    expect(failure).toMatchObject({ code: 'SWL_WAIT_EXCEEDED', decision: { allowed: false } });
    expect((failure as WaitExceededError).decision.retryAfterMs).toBeGreaterThan(1_000);
    expect(checks()).toBe(2);
  });

  test('a cost above the limit can never be allowed: it fails at once', async () => {
    const { limiter } = setup(3, '10s');
    await expect(limiter.wait('k', { cost: 4 })).rejects.toMatchObject({ code: 'SWL_WAIT_EXCEEDED', decision: { retryAfterMs: Infinity } });
  });

  test('an abort rejects with its reason and leaves no timer: no check runs after it', async () => {
    // The sliding log: the waiter sleeps the whole 400 ms from the count. A fixed window on the
    // real clock ends anywhere up to 400 ms away, under 50 ms (before the abort) one time in 8.
    const { limiter, checks } = setup(1, '400ms', 'sliding-log');
    await limiter.check('k');
    const controller = new AbortController();
    const waiting = limiter.wait('k', { signal: controller.signal });
    await new Promise((resolve) => setTimeout(resolve, 50));
    const reason = new Error('shutting down');
    controller.abort(reason);
    await expect(waiting).rejects.toBe(reason);
    const after = checks();
    // Past the moment it would have woken: nothing checks.
    await new Promise((resolve) => setTimeout(resolve, 450));
    expect(checks()).toBe(after);
    // An aborted signal rejects at once, without a check.
    await expect(limiter.wait('k', { signal: controller.signal })).rejects.toBe(reason);
    expect(checks()).toBe(after);
  });

  test('aborted while its check is at the store: the lease that check took is given back', async () => {
    const limiter = createLimiter({ store: makeStore(), concurrency: 1, prefix: uniquePrefix('wait-lease') });
    const controller = new AbortController();
    const waiting = limiter.wait('k', { signal: controller.signal });
    controller.abort(new Error('gone'));
    await expect(waiting).rejects.toThrow('gone');
    const deadline = Date.now() + 2_000;
    let inProgress = (await limiter.peek('k')).concurrency?.inProgress;
    while (inProgress !== 0 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 5));
      inProgress = (await limiter.peek('k')).concurrency?.inProgress;
    }
    expect(inProgress).toBe(0);
  });

  test('many waiters in one process go through in call order, one check each when quota is there', async () => {
    const { limiter, checks } = setup(3, '300ms');
    await limiter.check('k', { cost: 3 });
    const order: number[] = [];
    const windows: number[] = [];
    await Promise.all(
      Array.from({ length: 7 }, (_, i) =>
        limiter.wait('k').then((decision) => {
          order.push(i);
          windows.push(Math.floor(decision.now / 300));
        }),
      ),
    );
    expect(order).toEqual([0, 1, 2, 3, 4, 5, 6]);
    // 3, 3 and 1 in the next three windows: the rate the limit allows.
    const first = windows[0];
    expect(windows.map((window) => window - first)).toEqual([0, 0, 0, 1, 1, 1, 2]);
    // The initial check, 7 allowed checks, and one denied check before each of the three windows
    // (two, had a window begun between the initial check and the waits): no stampede.
    expect(checks()).toBeGreaterThanOrEqual(1 + 7 + 2);
    expect(checks()).toBeLessThanOrEqual(1 + 7 + 3);
  });
});

onRedis.test(
  'waiters in two processes on one limit get through at exactly the rate it allows',
  async () => {
    const prefix = uniquePrefix('two-waiting');
    const WINDOW = 500;
    const LIMIT = 4;
    const startAt = Date.now() + 8_000; // after both have started (ts-node, on a loaded machine)
    const common = {
      redisUrl: redisUrl(),
      prefix,
      options: { algorithm: 'fixed-window', limit: LIMIT, window: `${WINDOW}ms` },
      identifier: 'api',
    };
    const processes = await Promise.all([0, 1].map(() => startAppProcess({ kind: 'wait', ...common, count: 10, startAt })));
    const allowedAt = processes.flatMap((child) => JSON.parse(child.text) as number[]);
    expect(allowedAt).toHaveLength(20);
    const perWindow = new Map<number, number>();
    for (const at of allowedAt) perWindow.set(Math.floor(at / WINDOW), (perWindow.get(Math.floor(at / WINDOW)) ?? 0) + 1);
    const windows = [...perWindow.keys()].sort((a, b) => a - b);
    // Five consecutive windows, each used to the full: never more than the limit, and no window lost.
    expect(windows).toEqual(Array.from({ length: 5 }, (_, i) => windows[0] + i));
    expect(windows.map((window) => perWindow.get(window))).toEqual([4, 4, 4, 4, 4]);
  },
  30_000,
);
