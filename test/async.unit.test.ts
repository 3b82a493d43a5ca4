/** The callback helpers of the hot path (src/async.ts) and the caller form of Deadlines. */
import { callEach } from '../src/async';
import { Deadlines } from '../src/core/deadlines';
import { RateLimitTimeoutError } from '../src/errors';

test('callEach calls every item even when some throw, then throws the first error', () => {
  const called: number[] = [];
  const first = new Error('first');
  expect(() =>
    callEach([1, 2, 3, 4], (item, index) => {
      called.push(item);
      expect(index).toBe(item - 1);
      if (item === 2) throw first;
      if (item === 3) throw new Error('second');
    }),
  ).toThrow(first);
  expect(called).toEqual([1, 2, 3, 4]);
  expect(() => callEach([], () => undefined)).not.toThrow();
});

test('Deadlines.start/finish: a call finished in time is never expired; a late answer is refused', () => {
  jest.useFakeTimers();
  const deadlines = new Deadlines(30);
  const expired: string[] = [];
  const onTime = deadlines.start({ answered: () => expired.push('onTime') });
  const late = deadlines.start({
    answered: (error) => {
      expect(error).toBeInstanceOf(RateLimitTimeoutError);
      expired.push('late');
    },
  });
  expect(deadlines.finish(onTime)).toBe(true);
  jest.advanceTimersByTime(29);
  expect(expired).toEqual([]);
  jest.advanceTimersByTime(1);
  jest.useRealTimers();
  expect(expired).toEqual(['late']);
  expect(deadlines.finish(late)).toBe(false);
  expect(deadlines.finish(onTime)).toBe(false);
});

test('a caller whose answer throws does not keep the other expired calls, or later ones, from failing', () => {
  jest.useFakeTimers();
  try {
    const deadlines = new Deadlines(20);
    const expired: string[] = [];
    deadlines.start({
      answered: () => {
        expired.push('a');
        throw new Error('app code threw');
      },
    });
    deadlines.start({ answered: () => expired.push('b') });
    jest.advanceTimersByTime(10);
    deadlines.start({ answered: () => expired.push('c') });
    // The error still surfaces (as an uncaught exception from the timer), after b has expired too.
    expect(() => jest.advanceTimersByTime(10)).toThrow('app code threw');
    expect(expired).toEqual(['a', 'b']);
    jest.advanceTimersByTime(10);
    expect(expired).toEqual(['a', 'b', 'c']);
  } finally {
    jest.useRealTimers();
  }
});
