/**
 * Formatting of the study's results: the markdown table and the per-trace plots.
 */
import { widthOf } from '../../src/algorithms/precise-window';
import type { AlgorithmName } from '../../src/algorithms/types';
import { type ContestantStats, type Points, statsOf, type TraceResult } from './simulate';
import { renderChart, type Series } from './svg';

/** Line colours per algorithm in the plots; red is the limit's. */
const COLORS: Record<AlgorithmName, string> = {
  'sliding-window': '#1f77b4',
  'fixed-window': '#e67300',
  'sliding-log': '#2ca02c',
  'token-bucket': '#9467bd',
  'precise-window': '#8c564b',
};

/**
 * The contestants drawn in the plots, each at its default: the sliding log is left out, as it
 * draws the same line as the exact reference.
 */
const PLOTTED = ['sliding-window', 'fixed-window', 'token-bucket', 'precise-window'] as const;

/** A share as a percentage with four decimals; exact zero stays "0". */
export function percent(part: number, whole: number): string {
  if (part === 0) return '0';
  const value = (100 * part) / whole;
  return value < 0.00005 ? '<0.0001' : value.toFixed(4);
}

/** Worst overshoot as a multiple of the limit. */
export function overshoot(stat: ContestantStats, limit: number): number {
  return stat.worstCount / limit;
}

/** Renders rows as a markdown table, the first `textColumns` left-aligned, the rest right-aligned. */
function markdown(header: readonly string[], rows: readonly (readonly string[])[], textColumns: number): string {
  const widths = header.map((title, column) => Math.max(title.length, ...rows.map((row) => row[column].length)));
  const line = (cells: readonly string[]): string =>
    `| ${cells.map((cell, column) => (column < textColumns ? cell.padEnd(widths[column]) : cell.padStart(widths[column]))).join(' | ')} |`;
  const rule = `|${widths.map((width, column) => (column < textColumns ? `:${'-'.repeat(width + 1)}` : `${'-'.repeat(width + 1)}:`)).join('|')}|`;
  return [line(header), rule, ...rows.map(line)].join('\n');
}

/** The measured columns shared by both tables, for one contestant's stats. */
function measured(stat: ContestantStats, limit: number): string[] {
  return [
    stat.requests.toLocaleString('en-US'),
    percent(stat.falseAllows, stat.requests),
    percent(stat.falseDenies, stat.requests),
    percent(stat.falseAllows + stat.falseDenies, stat.requests),
    overshoot(stat, limit).toFixed(2),
    percent(stat.cappedFalseDenies, stat.requests),
    ((100 * stat.allowed) / stat.requests).toFixed(2),
  ];
}

const MEASURED = ['requests', 'false allows %', 'false denies %', 'wrong %', 'worst overshoot', 'false denies, capped %', 'allowed %'];

/**
 * The results as a markdown table, one row per trace and contestant; an extra
 * `exact (reference)` row gives the allowed share of the independent exact log.
 */
export function markdownTable(results: readonly TraceResult[]): string {
  const rows: string[][] = [];
  for (const result of results) {
    for (const stat of result.stats) {
      rows.push([
        result.trace.name,
        stat.contestant.label,
        ...measured(stat, result.trace.tier.limit),
        ((100 * stat.agreements) / stat.requests).toFixed(4),
      ]);
    }
    rows.push([
      result.trace.name,
      'exact (reference)',
      result.requests.toLocaleString('en-US'),
      '',
      '',
      '',
      '',
      '',
      ((100 * result.referenceAllowed) / result.requests).toFixed(2),
      '',
    ]);
  }
  return markdown(['trace', 'algorithm', ...MEASURED, 'agrees with independent log %'], rows, 2);
}

/**
 * The token bucket's rows: its decisions judged against its own exact definition, and
 * beside them the window-judged figures that show how a bucket differs from a window,
 * next to the independent exact sliding log's allowed share.
 */
export function bucketTable(results: readonly TraceResult[]): string {
  const rows: string[][] = [];
  for (const result of results) {
    const stat = result.stats.find((s) => s.ownDefinition);
    if (stat === undefined) continue;
    rows.push([
      result.trace.name,
      stat.requests.toLocaleString('en-US'),
      (stat.ownFalseAllows + stat.ownFalseDenies).toLocaleString('en-US'),
      ((100 * stat.allowed) / stat.requests).toFixed(2),
      ((100 * result.referenceAllowed) / result.requests).toFixed(2),
      percent(stat.falseAllows, stat.requests),
      percent(stat.falseDenies, stat.requests),
      stat.worstCount.toLocaleString('en-US'),
      overshoot(stat, result.trace.tier.limit).toFixed(2),
    ]);
  }
  return markdown(
    [
      'trace',
      'requests',
      'decisions unlike an exact bucket',
      'allowed %',
      'sliding log: allowed %',
      'allowed where the window was full %',
      'denied where the window had room %',
      'most in one window',
      'worst overshoot',
    ],
    rows,
    1,
  );
}

/** Bands of offered load (mean rate over limit) for the per-band breakdown, in report order. */
const LOAD_BANDS: readonly { readonly label: string; readonly below: number }[] = [
  { label: 'under 0.5x the limit', below: 0.5 },
  { label: '0.5x to 1x', below: 1 },
  { label: '1x to 2x', below: 2 },
  { label: '2x and more', below: Infinity },
];

/** The label of the load band that `offeredLoad` falls in. */
export function loadBand(offeredLoad: number): string {
  return (LOAD_BANDS.find((band) => offeredLoad < band.below) ?? LOAD_BANDS[LOAD_BANDS.length - 1]).label;
}

/**
 * One trace's results per band of offered load, as a markdown table.
 *
 * @param result - a trace simulated with `loadBand` as its grouping.
 */
export function loadBandTable(result: TraceResult): string {
  const rows: string[][] = [];
  for (const band of LOAD_BANDS) {
    const stats = result.groups.get(band.label);
    if (stats === undefined) continue;
    const sources = result.trace.sources.filter((source) => loadBand(source.offeredLoad) === band.label).length;
    for (const stat of stats)
      rows.push([band.label, stat.contestant.label, sources.toLocaleString('en-US'), ...measured(stat, result.trace.tier.limit)]);
  }
  return markdown(['offered load', 'algorithm', 'sources', ...MEASURED], rows, 2);
}

/**
 * The rows of the `precise-window` contestants (labels, in order) on every trace: the width of
 * their buckets there, and the figures its targets are judged by.
 */
export function preciseTable(results: readonly TraceResult[], labels: readonly string[]): string {
  const rows: string[][] = [];
  for (const result of results) {
    const { limit, window } = result.trace.tier;
    for (const label of labels) {
      const stat = statsOf(result.stats, label);
      rows.push([
        result.trace.name,
        label,
        duration(widthOf(window, stat.contestant.precision)),
        percent(stat.falseAllows, stat.requests),
        percent(stat.falseDenies, stat.requests),
        percent(stat.falseAllows + stat.falseDenies, stat.requests),
        percent(stat.cappedFalseDenies, stat.requests),
        percent(stat.falseAllows + stat.cappedFalseDenies, stat.requests),
        `${stat.worstCount.toLocaleString('en-US')} / ${limit.toLocaleString('en-US')}`,
      ]);
    }
  }
  return markdown(
    [
      'trace',
      'algorithm',
      'bucket',
      'false allows %',
      'false denies %',
      'wrong %',
      'false denies, capped %',
      'false allows + capped false denies %',
      'most in one window / limit',
    ],
    rows,
    3,
  );
}

/** A bucket width: ms below a second, else seconds, minutes or hours, whichever reads shortest. */
function duration(ms: number): string {
  const units: [string, number][] = [
    ['h', 3_600_000],
    ['min', 60_000],
    ['s', 1000],
  ];
  for (const [unit, size] of units) if (ms >= size && ms % (size / 10) === 0) return `${ms / size} ${unit}`;
  return `${ms.toLocaleString('en-US')} ms`;
}

/** One of the accuracy targets set for `precise-window`, judged on a run. */
export interface TargetCheck {
  /** What the target demands, in words. */
  readonly target: string;
  /** The bound, in percent. */
  readonly bound: number;
  /** The measured value in percent, on the trace where it is highest (the first such trace on a tie). */
  readonly measured: number;
  /** That trace. */
  readonly trace: string;
  /** The measured figure on that trace, in words. */
  readonly detail: string;
  readonly met: boolean;
  /** Whether the measured value is exactly the bound (which meets it). */
  readonly atBound: boolean;
}

/** A part of a whole on one trace, in words too. */
interface Share {
  readonly part: number;
  readonly whole: number;
  readonly trace: string;
  readonly detail: string;
}

/** The highest share of `shares`, judged against a bound of one part in `per` (so the test is exact in integers). */
function judge(target: string, shares: readonly Share[], per: number): TargetCheck {
  const worst = shares.reduce((a, b) => (b.part * a.whole > a.part * b.whole ? b : a));
  return {
    target,
    bound: 100 / per,
    measured: (100 * worst.part) / worst.whole,
    trace: worst.trace,
    detail: worst.detail,
    met: worst.part * per <= worst.whole,
    atBound: worst.part * per === worst.whole,
  };
}

/**
 * Judges the contestant labelled `label` against the targets set for `precise-window`: at a
 * Poisson load of 100 %, at most 0.1 % of requests decided wrongly (per request, false denies
 * not capped); on every trace at most 0.1 % false allows, and at most 1 % false allows plus
 * capped false denies; and no window holding more than the limit plus 1 %.
 *
 * @param results - the study's results; must include the trace `poisson-100`.
 */
export function targetChecks(results: readonly TraceResult[], label: string): TargetCheck[] {
  const shares = (of: readonly TraceResult[], pick: (stat: ContestantStats, limit: number) => Omit<Share, 'trace'>): Share[] =>
    of.map((result) => ({ trace: result.trace.name, ...pick(statsOf(result.stats, label), result.trace.tier.limit) }));
  const ofRequests = (part: number, requests: number, what: string): Omit<Share, 'trace'> => ({
    part,
    whole: requests,
    detail: `${percent(part, requests)} % ${what}`,
  });
  const poisson = results.filter((result) => result.trace.name === 'poisson-100');
  if (poisson.length === 0) throw new Error('accuracy study: the targets need the trace poisson-100');
  return [
    judge(
      'at a Poisson load of 100 %, at most 0.1 % of requests wrong (per request, false denies not capped)',
      shares(poisson, (stat) => ofRequests(stat.falseAllows + stat.falseDenies, stat.requests, 'wrong')),
      1000,
    ),
    judge(
      'on every trace, at most 0.1 % false allows',
      shares(results, (stat) => ofRequests(stat.falseAllows, stat.requests, 'false allows')),
      1000,
    ),
    judge(
      'on every trace, at most 1 % false allows plus capped false denies',
      shares(results, (stat) =>
        ofRequests(stat.falseAllows + stat.cappedFalseDenies, stat.requests, 'false allows plus capped false denies'),
      ),
      100,
    ),
    judge(
      'no window ever holds more than the limit plus 1 %',
      shares(results, (stat, limit) => {
        const over = Math.max(0, stat.worstCount - limit);
        return {
          part: over,
          whole: limit,
          detail: `${stat.worstCount.toLocaleString('en-US')} units in one window where ${limit.toLocaleString('en-US')} are allowed (${over === 0 ? 'none over' : `${((100 * over) / limit).toFixed(2)} % over`})`,
        };
      }),
      100,
    ),
  ];
}

function scaled(points: Points, from: number, unitMs: number): Points {
  return points.map(([time, value]) => [(time - from) / unitMs, value]);
}

/**
 * The plot of a trace's representative source: the true sliding count (what an
 * exact log over the allowed requests holds) against each algorithm's own estimate.
 *
 * @param result - a simulated trace with its recorded series.
 * @returns the SVG text.
 */
export function tracePlot(result: TraceResult): string {
  const { trace, series } = result;
  const { from, unit } = trace.plot;
  const lines: Series[] = [
    {
      label: 'exact sliding log: true count (ground-truth limiter)',
      color: '#222222',
      width: 2.2,
      points: scaled(series.reference, from, unit.ms),
    },
  ];
  for (const name of PLOTTED) {
    const recorded = series.byContestant.get(name);
    if (recorded === undefined) continue;
    // The token bucket's own figure is not a count in a window but the units its bucket lacks (limit − tokens).
    const own = name === 'token-bucket' ? 'units missing from its bucket' : 'its estimate';
    lines.push({ label: `${name}: ${own}`, color: COLORS[name], dash: '7 4', points: scaled(recorded.estimate, from, unit.ms) });
    lines.push({ label: `${name}: true count of what it allowed`, color: COLORS[name], points: scaled(recorded.truth, from, unit.ms) });
  }
  const windowLabel = trace.tier.window >= 86_400_000 ? `${trace.tier.window / 86_400_000} day` : `${trace.tier.window / 1000} s`;
  return renderChart({
    title: `${trace.name}: sliding count vs estimate, source ${series.sourceId}`,
    subtitle: trace.description,
    xLabel: `time since ${new Date(from).toISOString().replace('.000Z', 'Z')} (${unit.label}); limit ${trace.tier.limit} per ${windowLabel}`,
    yLabel: 'units in the window ending at t',
    series: lines,
    rules: [{ label: `limit (${trace.tier.limit})`, value: trace.tier.limit, color: '#d62728' }],
  });
}
