import { type Contestant, contestant, PRECISE_LABELS, STUDY_CONTESTANTS } from '../../bench/accuracy/contestants';
import { ExactBucket } from '../../bench/accuracy/exact-bucket';
import { ExactLog } from '../../bench/accuracy/exact-log';
import { targetChecks } from '../../bench/accuracy/report';
import { type ContestantStats, decisions, floodAdmissions, simulateTrace, statsOf, type TraceResult } from '../../bench/accuracy/simulate';
import {
  boundaryTrace,
  burstTrace,
  EPOCH,
  heavyTailedTrace,
  poissonTrace,
  slidingWorstCaseTrace,
  type Trace,
} from '../../bench/accuracy/traces';
import { fixedWindow } from '../../src/algorithms/fixed-window';
import { DEFAULT_PRECISION, preciseWindow } from '../../src/algorithms/precise-window';
import { slidingLog } from '../../src/algorithms/sliding-log';
import { slidingWindow } from '../../src/algorithms/sliding-window';
import { tokenBucket } from '../../src/algorithms/token-bucket';
import type { AlgorithmScripts } from '../../src/algorithms/types';
import type { Tier } from '../../src/tiers';
import { mulberry32 } from '../../support/random';

const ALGORITHMS = ([slidingWindow, fixedWindow, slidingLog, tokenBucket] as AlgorithmScripts[]).map((scripts) => contestant(scripts));
const BUCKET = contestant(tokenBucket as AlgorithmScripts);
const TINY = { sources: 2, windows: 20 };

function statOf(result: TraceResult, label: string): ContestantStats {
  return statsOf(result.stats, label);
}

function overshootOf(result: TraceResult, name: string): number {
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
    expect(floodAdmissions(contestant(slidingLog as AlgorithmScripts), tier, EPOCH, 5, 7)).toEqual([10, 10, 10, 10, 10]);
    expect(floodAdmissions(contestant(fixedWindow as AlgorithmScripts), tier, EPOCH, 5, 7)).toEqual([10, 10, 10, 10, 10]);
    for (const admitted of floodAdmissions(contestant(slidingWindow as AlgorithmScripts), tier, EPOCH, 5, 7))
      expect(admitted).toBeLessThanOrEqual(10);
  });

  test('records the plot series of the representative source', () => {
    const result = simulateTrace(burstTrace('end', TINY), ALGORITHMS);
    expect(result.series.reference.length).toBeGreaterThan(100);
    const sliding = result.series.byContestant.get('sliding-window')!;
    expect(sliding.estimate.length).toBe(result.series.reference.length);
    for (let i = 1; i < sliding.estimate.length; i++) expect(sliding.estimate[i][0]).toBeGreaterThanOrEqual(sliding.estimate[i - 1][0]);
  });
});

describe("exact token bucket (the token bucket's own definition)", () => {
  test('starts full, refills limit / window per ms exactly, never above the limit', () => {
    const bucket = new ExactBucket(3, 1000);
    expect(bucket.tokens(0)).toBe(3);
    for (let i = 0; i < 3; i++) bucket.add(0, 1);
    expect(bucket.fits(0, 1)).toBe(false);
    expect(bucket.fits(333, 1)).toBe(false); // 333 × 3 / 1000 = 0.999 tokens
    expect(bucket.tokens(333)).toBeCloseTo(0.999, 12);
    expect(bucket.fits(334, 1)).toBe(true); // 1.002 tokens
    expect(bucket.tokens(10_000)).toBe(3);
    expect(bucket.fits(10_000, 4)).toBe(false);
  });

  test('a shadow may be fed what it would not allow: the level goes below zero and refills from there', () => {
    const bucket = new ExactBucket(2, 100);
    bucket.add(0, 3);
    expect(bucket.tokens(0)).toBe(-1);
    expect(bucket.fits(49, 1)).toBe(false); // -1 + 0.98
    expect(bucket.fits(100, 1)).toBe(true); // -1 + 2
  });

  test("the library's token bucket decides exactly like the exact bucket on random traces", () => {
    const random = mulberry32(2024);
    // Windows that limit divides and windows it does not (the twin keeps TAT as m + r / limit).
    const tiers: Tier[] = [
      { limit: 1, window: 1000 },
      { limit: 3, window: 1000 },
      { limit: 7, window: 60_000 },
      { limit: 100, window: 60_000 },
      { limit: 13, window: 17 },
      { limit: 1000, window: 86_400_000 },
    ];
    let compared = 0;
    let allowedSeen = 0;
    for (const tier of tiers) {
      const times: number[] = [];
      const costs: number[] = [];
      let now = EPOCH + Math.floor(random() * tier.window);
      for (let i = 0; i < 5000; i++) {
        // Mostly gaps around the refill interval, sometimes a burst, sometimes a long pause.
        const pick = random();
        const unit = tier.window / tier.limit;
        now += pick < 0.3 ? 0 : pick < 0.95 ? Math.floor(random() * 2 * unit) : Math.floor(random() * 2 * tier.window);
        times.push(now);
        costs.push(random() < 0.8 ? 1 : 1 + Math.floor(random() * Math.min(tier.limit + 1, 5)));
      }
      const library = decisions(BUCKET, tier, times, costs);
      const exact = new ExactBucket(tier.limit, tier.window);
      times.forEach((time, i) => {
        const expected = exact.fits(time, costs[i]);
        if (library[i] !== expected)
          throw new Error(
            `limit ${tier.limit}/${tier.window} ms, request #${i} at ${time} cost ${costs[i]}: library ${library[i]}, exact ${expected}`,
          );
        if (expected) {
          exact.add(time, costs[i]);
          allowedSeen++;
        }
        compared++;
      });
    }
    expect(compared).toBe(6 * 5000);
    expect(allowedSeen).toBeGreaterThan(1000);
    expect(allowedSeen).toBeLessThan(compared);
  });

  test("after a full bucket's burst, one unit per window / limit: the k-th at ceil(k × window / limit)", () => {
    const tier = { limit: 3, window: 1000 };
    const times = Array.from({ length: 3000 }, (_, i) => EPOCH + i); // a request every ms for 3 s
    const allowedAt = decisions(BUCKET, tier, times);
    const allowed = times.filter((_, i) => allowedAt[i]);
    const expected = [EPOCH, EPOCH + 1, EPOCH + 2];
    for (let k = 1; Math.ceil((k * tier.window) / tier.limit) < 3000; k++) expected.push(EPOCH + Math.ceil((k * tier.window) / tier.limit));
    expect(allowed).toEqual(expected); // 334, 667, 1000, 1334, ... after the start
  });
});

describe('token bucket in the study', () => {
  const traces: [string, () => Trace][] = [
    ['poisson at 150 %', () => poissonTrace(1.5, TINY)],
    ['end-of-window bursts', () => burstTrace('end', TINY)],
    ['sliding window worst case', () => slidingWorstCaseTrace(TINY)],
    ['heavy-tailed', () => heavyTailedTrace({ sources: 300, windows: 20 })],
  ];

  test.each(traces)(
    'keeps to its own definition, never denies where a window has room, overshoots by at most limit - 1: %s',
    (_name, make) => {
      const result = simulateTrace(make(), ALGORITHMS);
      const bucket = statOf(result, 'token-bucket');
      const { limit } = result.trace.tier;
      expect(bucket.ownDefinition).toBe(true);
      expect(bucket.ownFalseAllows).toBe(0);
      expect(bucket.ownFalseDenies).toBe(0);
      expect(bucket.firstOwnMismatch).toBeUndefined();
      expect(bucket.falseDenies).toBe(0);
      expect(bucket.worstCount).toBeLessThanOrEqual(2 * limit - 1);
      expect(statOf(result, 'sliding-window').ownDefinition).toBe(false);
    },
  );

  test('a full bucket, then what refills within the window: 2 x limit - 1 on the constructed worst case', () => {
    const result = simulateTrace(slidingWorstCaseTrace(TINY), ALGORITHMS);
    expect(statOf(result, 'token-bucket').worstCount).toBe(2 * result.trace.tier.limit - 1);
  });

  test('under a constant flood: the burst plus the refill in the first window, then the limit per window', () => {
    expect(floodAdmissions(BUCKET, { limit: 10, window: 60_000 }, EPOCH, 5, 7)).toEqual([19, 10, 10, 10, 10]);
  });
});

describe('precise window in the study', () => {
  const precise = (precision?: number): Contestant => contestant(preciseWindow as AlgorithmScripts, precision);
  const traces = (): Trace[] => [poissonTrace(1, TINY), burstTrace('end', TINY), heavyTailedTrace({ sources: 300, windows: 20 })];

  test('a contestant is named by its algorithm, and by its precision too when that is not the default', () => {
    expect(precise().label).toBe('precise-window');
    expect(precise().precision).toBe(DEFAULT_PRECISION);
    expect(precise(600).label).toBe('precise-window, precision 600');
    expect(precise(600).precision).toBe(600);
    expect(new Set(STUDY_CONTESTANTS.map(({ label }) => label)).size).toBe(STUDY_CONTESTANTS.length);
    expect(PRECISE_LABELS[0]).toBe('precise-window');
    expect(() => simulateTrace(poissonTrace(1, TINY), [precise(), precise()])).toThrow(/share a label/);
  });

  test('each contestant runs at its own precision: 1 ms buckets make no wrong decision, 1 s buckets do', () => {
    for (const trace of traces()) {
      const result = simulateTrace(trace, [precise(trace.tier.window), precise(60)]);
      const exact = statOf(result, `precise-window, precision ${trace.tier.window}`);
      expect(exact.falseAllows + exact.falseDenies).toBe(0);
      expect(exact.allowed).toBe(result.referenceAllowed);
    }
    const coarse = statOf(simulateTrace(burstTrace('end', TINY), [precise(60)]), 'precise-window, precision 60');
    expect(coarse.falseAllows).toBeGreaterThan(0);
  });

  test('its targets: an exact log meets them all; 1 s buckets miss some, by the amounts measured', () => {
    const results = traces().map((trace) => simulateTrace(trace, [precise(60_000), precise(60)]));
    const exact = targetChecks(results, 'precise-window, precision 60000');
    expect(exact).toHaveLength(4);
    for (const check of exact) expect(check).toMatchObject({ met: true, measured: 0 });
    const coarse = targetChecks(results, 'precise-window, precision 60');
    const missed = coarse.filter((check) => !check.met);
    expect(missed.length).toBeGreaterThan(0);
    for (const check of missed) expect(check.measured).toBeGreaterThan(check.bound);
    const [wrongAtLoad, falseAllows] = coarse;
    const poisson = statOf(results[0], 'precise-window, precision 60');
    expect(wrongAtLoad.trace).toBe('poisson-100');
    expect(wrongAtLoad.measured).toBeCloseTo((100 * (poisson.falseAllows + poisson.falseDenies)) / poisson.requests, 10);
    const worst = Math.max(...results.map((r) => statOf(r, 'precise-window, precision 60')).map((s) => s.falseAllows / s.requests));
    expect(falseAllows.measured).toBeCloseTo(100 * worst, 10);
  });

  test('a window holding exactly the limit plus 1 % meets the overshoot target, one unit more misses it', () => {
    const result = simulateTrace(poissonTrace(1, TINY), [precise()]);
    const withWorst = (worstCount: number): TraceResult => ({
      ...result,
      stats: result.stats.map((stat) => ({ ...stat, worstCount })),
    });
    const overshootCheck = (worstCount: number) => targetChecks([withWorst(worstCount)], 'precise-window')[3];
    expect(overshootCheck(101)).toMatchObject({ met: true, atBound: true, measured: 1 });
    expect(overshootCheck(102)).toMatchObject({ met: false, atBound: false, measured: 2 });
    expect(overshootCheck(100)).toMatchObject({ met: true, measured: 0 });
  });
});
