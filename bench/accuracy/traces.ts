/**
 * Request traces for the accuracy study. A trace is a set of independent sources
 * (identifiers), each a sorted list of integer millisecond timestamps; every request
 * has cost 1. All randomness comes from a seeded generator, so every run of a trace
 * with the same options produces the same requests.
 */
import type { Tier } from '../../src/tiers';
import { exponential, mulberry32, pareto, type Random } from '../../support/random';

/** One identifier's requests: integer epoch milliseconds, ascending. */
export interface Source {
  readonly id: string;
  readonly times: Float64Array;
  /** The source's nominal mean rate as a multiple of the limit. */
  readonly offeredLoad: number;
}

/** The stretch of one source that the plot shows. */
interface PlotSpec {
  /** Index into `Trace.sources`. */
  readonly source: number;
  readonly from: number;
  readonly to: number;
  /** Unit of the plot's time axis, e.g. seconds or hours. */
  readonly unit: { readonly label: string; readonly ms: number };
}

/** A named, reproducible workload against one limit. */
export interface Trace {
  /** Short slug, used in file names: `docs/accuracy-<name>.svg`. */
  readonly name: string;
  readonly description: string;
  readonly tier: Tier;
  readonly sources: readonly Source[];
  readonly plot: PlotSpec;
  /** Report the results per band of offered load as well (for traces mixing light and heavy sources). */
  readonly breakdownByLoad?: boolean;
}

/** Options shared by the trace generators; the defaults are the published study. */
export interface TraceOptions {
  readonly seed?: number;
  /** Number of independent identifiers. */
  readonly sources?: number;
  /** Length of each source's trace, in windows of the trace's limit. */
  readonly windows?: number;
}

/** Start of every trace: a UTC midnight, so it is a boundary of every window used here. */
export const EPOCH = Date.UTC(2024, 0, 1);

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;
const SECONDS = { label: 's', ms: 1000 };

/** Arrivals of a Poisson process of `rate` events per ms over [from, to), floored to whole ms. */
function poisson(random: Random, from: number, to: number, rate: number, into: number[]): void {
  if (rate <= 0) return;
  for (let time = from + exponential(random, rate); time < to; time += exponential(random, rate)) {
    into.push(Math.floor(time));
  }
}

/**
 * Arrivals of a Poisson process whose rate varies with time, by thinning: draw at
 * `peak` (which must bound `rate`) and keep each arrival with probability rate / peak.
 */
function varyingPoisson(random: Random, from: number, to: number, rate: (time: number) => number, peak: number, into: number[]): void {
  for (let time = from + exponential(random, peak); time < to; time += exponential(random, peak)) {
    if (random() * peak < rate(time)) into.push(Math.floor(time));
  }
}

/** `count` arrivals spread uniformly at random over [from, from + width). */
function burst(random: Random, from: number, width: number, count: number, into: number[]): void {
  for (let i = 0; i < count; i++) into.push(from + Math.floor(random() * width));
}

function sorted(times: number[]): Float64Array {
  return Float64Array.from(times).sort();
}

/**
 * Steady Poisson traffic at a fixed share of the limit: 100 requests per minute,
 * each source offering `load * 100` requests per minute on average.
 *
 * @param load - offered rate as a fraction of the limit, e.g. 0.9 for 90 %.
 */
export function poissonTrace(load: number, { seed = 1, sources = 10, windows = 240 }: TraceOptions = {}): Trace {
  const tier: Tier = { limit: 100, window: MINUTE };
  const random = mulberry32(seed * 7919 + Math.round(load * 1000));
  const end = EPOCH + windows * tier.window;
  const list: Source[] = [];
  for (let s = 0; s < sources; s++) {
    const times: number[] = [];
    poisson(random, EPOCH, end, (load * tier.limit) / tier.window, times);
    list.push({ id: `client-${s}`, times: sorted(times), offeredLoad: load });
  }
  const percent = Math.round(load * 100);
  return {
    name: `poisson-${percent}`,
    description: `Poisson arrivals at ${percent} % of the limit (100 per minute), ${sources} sources x ${windows} minutes`,
    tier,
    sources: list,
    plot: { source: 0, from: EPOCH + 10 * tier.window, to: EPOCH + Math.min(windows, 14) * tier.window, unit: SECONDS },
  };
}

/** Where in each window a burst trace puts its burst. */
export type BurstPlacement = 'start' | 'end';

/**
 * Every window, one burst of a full limit's worth of requests squeezed into 3 seconds
 * at the start or at the end of the window, over Poisson background traffic at 30 %
 * of the limit. 100 requests per minute.
 *
 * End-of-window bursts are the case the sliding window counter underestimates: it
 * assumes the previous window's requests were spread evenly, so it lets their weight
 * decay long before the requests actually leave the sliding window.
 */
export function burstTrace(placement: BurstPlacement, { seed = 2, sources = 10, windows = 240 }: TraceOptions = {}): Trace {
  const tier: Tier = { limit: 100, window: MINUTE };
  const width = 3000;
  const background = 0.3;
  const random = mulberry32(seed * 7919 + (placement === 'start' ? 1 : 2));
  const end = EPOCH + windows * tier.window;
  const list: Source[] = [];
  for (let s = 0; s < sources; s++) {
    const times: number[] = [];
    poisson(random, EPOCH, end, (background * tier.limit) / tier.window, times);
    for (let w = 0; w < windows; w++) {
      const windowStart = EPOCH + w * tier.window;
      burst(random, placement === 'start' ? windowStart : windowStart + tier.window - width, width, tier.limit, times);
    }
    list.push({ id: `client-${s}`, times: sorted(times), offeredLoad: 1 + background });
  }
  return {
    name: `${placement}-bursts`,
    description: `each minute, a burst of 100 requests in its ${placement === 'start' ? 'first' : 'last'} 3 s, over Poisson background at 30 % of the limit; ${sources} sources x ${windows} minutes`,
    tier,
    sources: list,
    plot: { source: 0, from: EPOCH + 10 * tier.window, to: EPOCH + Math.min(windows, 14) * tier.window, unit: SECONDS },
  };
}

/**
 * The classic fixed-window attack: at every second window boundary, a full limit's
 * worth of requests in the last 3 s before it and another in the first 3 s after it.
 * No other traffic.
 */
export function boundaryTrace({ seed = 3, sources = 10, windows = 240 }: TraceOptions = {}): Trace {
  const tier: Tier = { limit: 100, window: MINUTE };
  const width = 3000;
  const random = mulberry32(seed * 7919);
  const list: Source[] = [];
  for (let s = 0; s < sources; s++) {
    const times: number[] = [];
    for (let w = 2; w < windows; w += 2) {
      const boundary = EPOCH + w * tier.window;
      burst(random, boundary - width, width, tier.limit, times);
      burst(random, boundary, width, tier.limit, times);
    }
    list.push({ id: `client-${s}`, times: sorted(times), offeredLoad: 1 });
  }
  return {
    name: 'boundary-bursts',
    description: `at every second minute boundary, 100 requests in the 3 s before it and 100 in the 3 s after it; ${sources} sources x ${windows} minutes`,
    tier,
    sources: list,
    plot: { source: 0, from: EPOCH + 9 * tier.window, to: EPOCH + Math.min(windows, 13) * tier.window, unit: SECONDS },
  };
}

/**
 * A daily limit (1,000 per day) against diurnal traffic: the rate follows a daily sine
 * (peak 1.9x, trough 0.1x of the mean), modulated by a weekly sine (+-30 %) so some
 * days offer more than the limit and some less. Sources sit in different time zones
 * (peaks two hours apart), so the UTC-aligned fixed windows cut their days differently.
 *
 * `windows` is the length in days.
 */
function diurnalTrace({ seed = 4, sources = 12, windows = 14 }: TraceOptions = {}): Trace {
  const tier: Tier = { limit: 1000, window: DAY };
  const random = mulberry32(seed * 7919);
  const end = EPOCH + windows * DAY;
  const meanRate = tier.limit / DAY;
  const list: Source[] = [];
  for (let s = 0; s < sources; s++) {
    const shift = ((s * 2) % 24) * HOUR;
    const rate = (time: number): number => {
      const daily = 1 + 0.9 * Math.sin((2 * Math.PI * (time - EPOCH - shift)) / DAY);
      const weekly = 1 + 0.3 * Math.sin((2 * Math.PI * (time - EPOCH)) / (7 * DAY));
      return meanRate * daily * weekly;
    };
    const times: number[] = [];
    varyingPoisson(random, EPOCH, end, rate, meanRate * 1.9 * 1.3, times);
    list.push({ id: `zone-${shift / HOUR}h`, times: sorted(times), offeredLoad: 1 });
  }
  return {
    name: 'diurnal',
    description: `1,000 per day; daily sine (x0.1 to x1.9) times weekly sine (+-30 %), ${sources} sources in time zones 2 h apart, ${windows} days`,
    tier,
    sources: list,
    plot: { source: 3, from: EPOCH + DAY, to: EPOCH + Math.min(windows, 8) * DAY, unit: { label: 'h', ms: HOUR } },
  };
}

/**
 * Many sources with heavy-tailed rates, the shape of real per-IP traffic: a limit of
 * 10 per minute; each source's mean rate (per minute) is Pareto distributed with
 * minimum 0.3 and shape 1.2 (capped at 100x the limit), with Poisson arrivals, for
 * `windows` minutes. Most sources stay far below the limit; a few exceed it by far.
 */
export function heavyTailedTrace({ seed = 5, sources = 30_000, windows = 60 }: TraceOptions = {}): Trace {
  const tier: Tier = { limit: 10, window: MINUTE };
  const random = mulberry32(seed * 7919);
  const end = EPOCH + windows * tier.window;
  const cap = 100 * tier.limit;
  const list: Source[] = [];
  let plotSource = 0;
  let plotDistance = Infinity;
  for (let s = 0; s < sources; s++) {
    const perWindow = Math.min(cap, pareto(random, 0.3, 1.2));
    const times: number[] = [];
    poisson(random, EPOCH, end, perWindow / tier.window, times);
    list.push({ id: `ip-${s}`, times: sorted(times), offeredLoad: perWindow / tier.limit });
    // Plot a source offering about 1.3x the limit: the interesting regime.
    const distance = Math.abs(perWindow - 1.3 * tier.limit);
    if (distance < plotDistance) {
      plotDistance = distance;
      plotSource = s;
    }
  }
  return {
    name: 'heavy-tailed',
    description: `${sources.toLocaleString('en-US')} sources, 10 per minute, Pareto(0.3/min, shape 1.2) mean rates, Poisson arrivals, ${windows} minutes`,
    tier,
    sources: list,
    plot: { source: plotSource, from: EPOCH + 10 * tier.window, to: EPOCH + Math.min(windows, 16) * tier.window, unit: SECONDS },
    breakdownByLoad: true,
  };
}

/**
 * The sliding window counter's worst case, built on purpose: every second window, a
 * full limit's worth of requests in its very last millisecond, then a request every
 * 100 ms through the whole next window. The counter weights the previous window's
 * units as if they were spread evenly, so it lets the next window fill up to nearly
 * the limit while those units are all still inside the sliding window: close to twice
 * the limit in one window's length (2 - 1/limit at most). No randomness.
 */
export function slidingWorstCaseTrace({ sources = 10, windows = 240 }: TraceOptions = {}): Trace {
  const tier: Tier = { limit: 100, window: MINUTE };
  const gap = 100;
  const list: Source[] = [];
  for (let s = 0; s < sources; s++) {
    const times: number[] = [];
    for (let w = 0; w + 1 < windows; w += 2) {
      const next = EPOCH + (w + 1) * tier.window;
      for (let i = 0; i < tier.limit; i++) times.push(next - 1);
      for (let time = next; time < next + tier.window; time += gap) times.push(time);
    }
    list.push({ id: `client-${s}`, times: sorted(times), offeredLoad: (tier.limit + tier.window / gap) / (2 * tier.limit) });
  }
  return {
    name: 'sliding-worst-case',
    description: `every second minute, 100 requests in its last ms, then one every 100 ms through the next minute; ${sources} sources x ${windows} minutes`,
    tier,
    sources: list,
    plot: { source: 0, from: EPOCH + 10 * tier.window, to: EPOCH + Math.min(windows, 14) * tier.window, unit: SECONDS },
  };
}

/** Makers of every trace of the published study, in report order (built one at a time to bound memory). */
export const STUDY_TRACES: readonly (() => Trace)[] = [
  () => poissonTrace(0.5),
  () => poissonTrace(0.9),
  () => poissonTrace(1.0),
  () => poissonTrace(1.5),
  () => burstTrace('start'),
  () => burstTrace('end'),
  () => boundaryTrace(),
  () => slidingWorstCaseTrace(),
  () => diurnalTrace(),
  () => heavyTailedTrace(),
];
