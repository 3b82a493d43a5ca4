/** The single-timer bound of store calls (src/timeout.ts), on real timers. */

import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { type Caller, Deadlines } from '../../src/core/deadlines';
import { RateLimitTimeoutError } from '../../src/errors';

const never = <T>() => new Promise<T>(() => undefined);
/**
 * How late a timer may fire on a loaded two-core machine (CI runs two test workers and their
 * Redis servers on it), as in wait.each-store.test.ts; a timer is never early, which the lower bounds check.
 */
const LATE_MS = 100;

/** Expects a call started at `started` to have timed out after `timeoutMs`: a millisecond early at most (Date.now() rounds), LATE_MS late at most. */
function expectTimedOut(started: number, timeoutMs: number): void {
  const elapsed = Date.now() - started;
  expect(elapsed).toBeGreaterThanOrEqual(timeoutMs - 1);
  expect(elapsed).toBeLessThan(timeoutMs + LATE_MS);
}

test('a call answered in time settles with its answer; one that is not rejects after timeoutMs', async () => {
  const deadlines = new Deadlines(50);
  const started = Date.now();
  const answered = deadlines.bound(() => Promise.resolve('ok'));
  const failed = deadlines.bound(() => Promise.reject(new Error('store down')));
  const stuck = deadlines.bound(() => never<string>());
  await expect(answered).resolves.toBe('ok');
  await expect(failed).rejects.toThrow('store down');
  await expect(stuck).rejects.toBeInstanceOf(RateLimitTimeoutError);
  expectTimedOut(started, 50);
});

test('calls started later get their own full timeout, behind answered ones (one timer re-armed)', async () => {
  const deadlines = new Deadlines(60);
  const first = deadlines.bound(() => never<number>());
  const firstStarted = Date.now();
  await new Promise((resolve) => setTimeout(resolve, 30));
  let resolveMiddle: (value: number) => void = () => undefined;
  const middle = deadlines.bound(() => new Promise<number>((resolve) => (resolveMiddle = resolve)));
  const last = deadlines.bound(() => never<number>());
  const lastStarted = Date.now();
  await expect(first).rejects.toBeInstanceOf(RateLimitTimeoutError);
  expect(Date.now() - firstStarted).toBeGreaterThanOrEqual(59);
  resolveMiddle(7);
  await expect(middle).resolves.toBe(7);
  await expect(last).rejects.toBeInstanceOf(RateLimitTimeoutError);
  expectTimedOut(lastStarted, 60);
});

test('an answer after the timeout changes nothing; many answered calls leave nothing behind', async () => {
  const deadlines = new Deadlines(20);
  let late: (value: string) => void = () => undefined;
  const bounded = deadlines.bound(() => new Promise<string>((resolve) => (late = resolve)));
  await expect(bounded).rejects.toBeInstanceOf(RateLimitTimeoutError);
  late('too late');
  const answers = await Promise.all(Array.from({ length: 10_000 }, (_, i) => deadlines.bound(() => Promise.resolve(i))));
  expect(answers[9_999]).toBe(9_999);
  const internals = deadlines as unknown as { queue: unknown[]; head: number };
  expect(internals.queue.length - internals.head).toBe(0);
});

test('a call answered while an older one still waits keeps nothing of its caller alive', async () => {
  // Replies from several Cluster nodes come in any order: the answered call stays queued behind
  // the older one, and must not hold its caller (in the HTTP path, a whole request) meanwhile.
  setFlagsFromString('--expose-gc');
  const collectGarbage = runInNewContext('gc') as () => void;
  const deadlines = new Deadlines(60_000);
  const older = deadlines.start({ answered: () => undefined });
  let caller: Caller | undefined = { answered: () => undefined };
  const pending = deadlines.start(caller);
  const released = new WeakRef(caller);
  caller = undefined;
  expect(deadlines.finish(pending)).toBe(true);
  // A WeakRef keeps its target alive until the end of the turn that made it.
  await new Promise(setImmediate);
  collectGarbage();
  expect(released.deref()).toBeUndefined();
  expect(deadlines.finish(older)).toBe(true);
});

test('the one timer keeps the process alive only while a call is pending', async () => {
  const deadlines = new Deadlines(10_000);
  const timers = (): number => process.getActiveResourcesInfo().filter((resource) => resource === 'Timeout').length;
  const before = timers();
  const pending = (): { promise: Promise<string>; answer: (value: string) => void } => {
    let answer: (value: string) => void = () => undefined;
    const promise = deadlines.bound(() => new Promise<string>((resolve) => (answer = resolve)));
    return { promise, answer };
  };
  const first = pending();
  expect(timers()).toBe(before + 1);
  first.answer('one');
  await first.promise;
  // Settled, nothing left to bound: a script that is done can exit without waiting 10 s.
  expect(timers()).toBe(before);
  const second = pending();
  expect(timers()).toBe(before + 1);
  second.answer('two');
  await expect(second.promise).resolves.toBe('two');
  expect(timers()).toBe(before);
});

test('a call held back by a gate is sent once it opens, in time; one whose deadline comes first is never sent, and stops waiting', async () => {
  const deadlines = new Deadlines(40);
  const waiting = new Set<() => void>();
  const gate = (connected: () => void) => {
    waiting.add(connected);
    return () => {
      waiting.delete(connected);
    };
  };
  const sent: string[] = [];
  const opened = deadlines.bound(() => {
    sent.push('opened');
    return Promise.resolve('answered');
  }, gate);
  expect(sent).toEqual([]);
  for (const connected of [...waiting]) connected();
  await expect(opened).resolves.toBe('answered');

  waiting.clear();
  const started = Date.now();
  const abandoned = deadlines.bound(() => {
    sent.push('abandoned');
    return Promise.resolve('late');
  }, gate);
  expect(waiting.size).toBe(1);
  await expect(abandoned).rejects.toBeInstanceOf(RateLimitTimeoutError);
  expectTimedOut(started, 40);
  expect(waiting.size).toBe(0);
  expect(sent).toEqual(['opened']);

  // A gate that does not hold the call back: sent at once.
  await expect(
    deadlines.bound(
      () => Promise.resolve('now'),
      () => undefined,
    ),
  ).resolves.toBe('now');
});
