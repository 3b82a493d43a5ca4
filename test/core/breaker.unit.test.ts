/**
 * The circuit breaker of store calls (src/core/breaker.ts): its states on an injected clock, its
 * options, and the limiter answering at once once it is open. The outage on real servers is
 * test/faults/breaker.test.ts.
 */

import { CircuitOpenError, createLimiter, MemoryStore } from '../../src';
import { CircuitBreaker, resolveBreakerOptions } from '../../src/core/breaker';

function clock(start = 1_000) {
  let time = start;
  return { now: () => time, advance: (ms: number) => (time += ms) };
}

const OPTIONS = { failures: 3, openMs: 100, maxOpenMs: 350 };

test('closed: calls go through, and a success resets the run of failures', () => {
  const breaker = new CircuitBreaker(OPTIONS, clock().now);
  breaker.failed(new Error('1'));
  breaker.failed(new Error('2'));
  breaker.succeeded();
  breaker.failed(new Error('3'));
  breaker.failed(new Error('4'));
  expect(breaker.refusal()).toBeUndefined();
  expect(breaker.open).toBe(false);
});

test('opens after `failures` in a row, refuses at once with the failure as cause, then lets one probe through', () => {
  const time = clock();
  const breaker = new CircuitBreaker(OPTIONS, time.now);
  const last = new Error('ECONNREFUSED');
  breaker.failed(new Error('a'));
  breaker.failed(new Error('b'));
  breaker.failed(last);
  const refusal = breaker.refusal();
  expect(refusal).toBeInstanceOf(CircuitOpenError);
  expect(refusal).toMatchObject({ code: 'SWL_CIRCUIT_OPEN', cause: last });
  time.advance(99);
  expect(breaker.refusal()).toBeDefined();
  time.advance(1);
  // The probe...
  expect(breaker.refusal()).toBeUndefined();
  // ...alone: the others are still refused while it is in flight.
  expect(breaker.refusal()).toBeDefined();
  breaker.succeeded();
  expect(breaker.open).toBe(false);
  expect(breaker.refusal()).toBeUndefined();
});

test('a connection made again since the breaker opened ends its interval: the next call probes', () => {
  const time = clock();
  let connectionsMade = 1;
  const breaker = new CircuitBreaker(OPTIONS, time.now, () => connectionsMade);
  for (let i = 0; i < 3; i++) breaker.failed(new Error('timeout'));
  expect(breaker.refusal()).toBeDefined();
  connectionsMade++;
  expect(breaker.refusal()).toBeUndefined();
  expect(breaker.refusal()).toBeDefined();
  // The probe fails: open again, for twice as long, as of the connections made when it was sent.
  breaker.failed(new Error('timeout again'));
  time.advance(199);
  expect(breaker.refusal()).toBeDefined();
  connectionsMade++;
  expect(breaker.refusal()).toBeUndefined();
  // A reconnection while this probe is out: it went on the old connection, and its failure is
  // followed by another probe at once rather than after 350 ms.
  connectionsMade++;
  breaker.failed(new Error('timeout on the old connection'));
  expect(breaker.refusal()).toBeUndefined();
  breaker.succeeded();
  expect(breaker.open).toBe(false);
});

test('each failed probe doubles the interval, up to maxOpenMs; a success starts again from openMs', () => {
  const time = clock();
  const breaker = new CircuitBreaker(OPTIONS, time.now);
  for (let i = 0; i < 3; i++) breaker.failed(new Error('down'));
  const intervals: number[] = [];
  for (let probe = 0; probe < 4; probe++) {
    let waited = 0;
    while (breaker.refusal() !== undefined) {
      time.advance(10);
      waited += 10;
    }
    intervals.push(waited);
    breaker.failed(new Error('still down'));
  }
  expect(intervals).toEqual([100, 200, 350, 350]);
  // A late failure of a call sent before the breaker opened changes nothing.
  breaker.failed(new Error('late'));
  time.advance(350);
  expect(breaker.refusal()).toBeUndefined();
  breaker.succeeded();
  for (let i = 0; i < 3; i++) breaker.failed(new Error('down again'));
  time.advance(100);
  expect(breaker.refusal()).toBeUndefined();
});

test('options: defaults, false, and invalid values naming the option', () => {
  expect(resolveBreakerOptions(undefined)).toEqual({ failures: 5, openMs: 500, maxOpenMs: 5_000 });
  expect(resolveBreakerOptions(false)).toBeUndefined();
  expect(resolveBreakerOptions({ openMs: 10_000 })).toEqual({ failures: 5, openMs: 10_000, maxOpenMs: 10_000 });
  expect(() => resolveBreakerOptions({ failures: 0 })).toThrow(
    expect.objectContaining({ code: 'SWL_INVALID_NUMBER', message: expect.stringMatching(/^breaker.failures:/) }),
  );
  expect(() => resolveBreakerOptions({ openMs: 1.5 })).toThrow(
    expect.objectContaining({ code: 'SWL_INVALID_NUMBER', message: expect.stringMatching(/^breaker.openMs:/) }),
  );
  expect(() => resolveBreakerOptions({ openMs: 200, maxOpenMs: 100 })).toThrow(
    expect.objectContaining({ code: 'SWL_INVALID_NUMBER', message: expect.stringMatching(/^breaker.maxOpenMs:/) }),
  );
  expect(() => resolveBreakerOptions({ failure: 3 } as never)).toThrow(expect.objectContaining({ code: 'SWL_UNKNOWN_OPTION' }));
  expect(() => resolveBreakerOptions(true as never)).toThrow(expect.objectContaining({ code: 'SWL_INVALID_TYPE' }));
  expect(() => createLimiter({ breaker: { failures: -1 } })).toThrow(expect.objectContaining({ code: 'SWL_INVALID_NUMBER' }));
});

/** A store that never answers a check: every call ends at the limiter's timeout. */
class SilentStore extends MemoryStore {
  override readonly needsTimeout = true as never;
  calls = 0;

  constructor() {
    super({ sweepIntervalMs: 0 });
  }

  override check(): Promise<never> {
    this.calls++;
    return new Promise<never>(() => undefined);
  }
}

function silentStore(): SilentStore {
  return new SilentStore();
}

test('a limiter whose store keeps timing out answers at once once the breaker is open, without calling the store', async () => {
  const store = silentStore();
  const limiter = createLimiter({ store, timeoutMs: 20, breaker: { failures: 2, openMs: 60_000 } });
  await Promise.all([
    expect(limiter.check('a')).rejects.toMatchObject({ code: 'SWL_TIMEOUT' }),
    expect(limiter.check('b')).rejects.toMatchObject({ code: 'SWL_TIMEOUT' }),
  ]);
  const started = performance.now();
  await expect(limiter.check('c')).rejects.toMatchObject({ code: 'SWL_CIRCUIT_OPEN' });
  expect(performance.now() - started).toBeLessThan(5);
  expect(store.calls).toBe(2);
});

test('breaker: false keeps every check waiting for its own timeout', async () => {
  const store = silentStore();
  const limiter = createLimiter({ store, timeoutMs: 10, breaker: false });
  for (let i = 0; i < 7; i++) await expect(limiter.check('a')).rejects.toMatchObject({ code: 'SWL_TIMEOUT' });
  expect(store.calls).toBe(7);
});

test('failures that come at once never open it, but fail a probe (which opens it again)', () => {
  const time = clock();
  const breaker = new CircuitBreaker(OPTIONS, time.now);
  for (let i = 0; i < 10; i++) breaker.failedAtOnce(new Error('ECONNREFUSED'));
  expect(breaker.open).toBe(false);
  for (let i = 0; i < 3; i++) breaker.failed(new Error('timeout'));
  time.advance(100);
  expect(breaker.refusal()).toBeUndefined();
  breaker.failedAtOnce(new Error('ECONNREFUSED'));
  expect(breaker.refusal()).toBeDefined();
  time.advance(200);
  expect(breaker.refusal()).toBeUndefined();
});
