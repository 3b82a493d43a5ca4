import { ExactLog } from '../../bench/accuracy/exact-log';
import { type AlgorithmStats, floodAdmissions, simulateTrace, type TraceResult } from '../../bench/accuracy/simulate';
import { boundaryTrace, burstTrace, EPOCH, poissonTrace, slidingWorstCaseTrace, type Trace } from '../../bench/accuracy/traces';
import { fixedWindow } from '../../src/algorithms/fixed-window';
import { slidingLog } from '../../src/algorithms/sliding-log';
import { slidingWindow } from '../../src/algorithms/sliding-window';
import type { AlgorithmName, AlgorithmScripts } from '../../src/algorithms/types';

const ALGORITHMS = [slidingWindow, fixedWindow, slidingLog] as AlgorithmScripts[];
const TINY = { sources: 2, windows: 20 };

function statOf(result: TraceResult, name: AlgorithmName): AlgorithmStats {
  const stat = result.stats.find((s) => s.algorithm === name);
  if (stat === undefined) throw new Error(`no stats for ${name}`);
  return stat;
}

function overshootOf(result: TraceResult, name: AlgorithmName): number {
  return statOf(result, name).worstCount / result.trace.tier.limit;
}

describe('exact log (ground truth)', () => {
  test('counts units in (now - window, now] and forgets older ones', () => {
    const log = new ExactLog(2, 1000);
    log.add(0, 1);
    log.add(500, 1);
    expect(log.fits(999, 1)).toBe(false);
    expect(log.count(999)).toBe(2);
    expect(log.count(1000)).toBe(1); // the unit at 0 is out: 0 > 1000 - 1000 is false
    expect(log.fits(1000, 1)).toBe(true);
    expect(log.count(1500)).toBe(0);
  });

  test('keeps order and totals across ring-buffer growth', () => {
    const log = new ExactLog(1000, 100);
    for (let t = 0; t < 500; t++) {
      log.add(t, 2);
      if (t % 37 === 0) expect(log.count(t)).toBe(2 * Math.min(t + 1, 100)); // trims mid-way, so the ring wraps while growing
    }
    expect(log.count(499)).toBe(200); // times 400..499, two units each
  });
});

describe('accuracy simulator', () => {
  const traces: [string, () => Trace][] = [
    ['poisson at 150 %', () => poissonTrace(1.5, TINY)],
    ['end-of-window bursts', () => burstTrace('end', TINY)],
    ['start-of-window bursts', () => burstTrace('start', TINY)],
    ['boundary bursts', () => boundaryTrace(TINY)],
  ];

  test.each(traces)('the sliding log makes no wrong decision and never overshoots: %s', (_name, make) => {
    const result = simulateTrace(make(), ALGORITHMS);
    const log = statOf(result, 'sliding-log');
    expect(log.requests).toBeGreaterThan(0);
    expect(log.falseAllows).toBe(0);
    expect(log.falseDenies).toBe(0);
    expect(log.cappedFalseDenies).toBe(0);
    expect(log.agreements).toBe(log.requests);
    expect(log.allowed).toBe(result.referenceAllowed);
    expect(overshootOf(result, 'sliding-log')).toBeLessThanOrEqual(1);
    expect(log.worstCount).toBe(result.trace.tier.limit); // these traces all reach the limit
  });

  test('traces are reproducible from their seed', () => {
    const a = burstTrace('end', TINY);
    const b = burstTrace('end', TINY);
    const c = burstTrace('end', { ...TINY, seed: 99 });
    expect(Array.from(a.sources[1].times)).toEqual(Array.from(b.sources[1].times));
    expect(Array.from(a.sources[1].times)).not.toEqual(Array.from(c.sources[1].times));
  });

  test('fixed window lets through twice the limit on the boundary-burst trace; it never falsely denies', () => {
    const result = simulateTrace(boundaryTrace(TINY), ALGORITHMS);
    expect(overshootOf(result, 'fixed-window')).toBeGreaterThanOrEqual(1.9);
    expect(overshootOf(result, 'fixed-window')).toBeLessThanOrEqual(2);
    expect(statOf(result, 'fixed-window').falseAllows).toBeGreaterThan(0);
    expect(statOf(result, 'fixed-window').falseDenies).toBe(0);
    // The sliding window counter resists this attack much better.
    expect(overshootOf(result, 'sliding-window')).toBeLessThan(1.2);
  });

  test('sliding window counter wrongly allows on end-of-window bursts, overshooting the limit but staying under 2x', () => {
    const result = simulateTrace(burstTrace('end', TINY), ALGORITHMS);
    const sliding = statOf(result, 'sliding-window');
    expect(sliding.falseAllows).toBeGreaterThan(0);
    expect(overshootOf(result, 'sliding-window')).toBeGreaterThan(1);
    expect(overshootOf(result, 'sliding-window')).toBeLessThan(2);
  });

  test('sliding window counter approaches 2x on its constructed worst case', () => {
    const result = simulateTrace(slidingWorstCaseTrace(TINY), ALGORITHMS);
    const { limit } = result.trace.tier;
    expect(statOf(result, 'sliding-window').worstCount).toBe(2 * limit - 1);
  });

  test('capped false denies never exceed per-request false denies', () => {
    const result = simulateTrace(poissonTrace(1.5, TINY), ALGORITHMS);
    for (const stat of result.stats) expect(stat.cappedFalseDenies).toBeLessThanOrEqual(stat.falseDenies);
    expect(statOf(result, 'sliding-window').falseDenies).toBeGreaterThan(statOf(result, 'sliding-window').cappedFalseDenies);
  });

  test('under a constant flood, exact log and fixed window admit the full limit every window', () => {
    const tier = { limit: 10, window: 60_000 };
    expect(floodAdmissions(slidingLog as AlgorithmScripts, tier, EPOCH, 5, 7)).toEqual([10, 10, 10, 10, 10]);
    expect(floodAdmissions(fixedWindow as AlgorithmScripts, tier, EPOCH, 5, 7)).toEqual([10, 10, 10, 10, 10]);
    for (const admitted of floodAdmissions(slidingWindow as AlgorithmScripts, tier, EPOCH, 5, 7)) expect(admitted).toBeLessThanOrEqual(10);
  });

  test('records the plot series of the representative source', () => {
    const result = simulateTrace(burstTrace('end', TINY), ALGORITHMS);
    expect(result.series.reference.length).toBeGreaterThan(100);
    const sliding = result.series.byAlgorithm.get('sliding-window')!;
    expect(sliding.estimate.length).toBe(result.series.reference.length);
    for (let i = 1; i < sliding.estimate.length; i++) expect(sliding.estimate[i][0]).toBeGreaterThanOrEqual(sliding.estimate[i - 1][0]);
  });
});
