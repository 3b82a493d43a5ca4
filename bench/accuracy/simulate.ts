/**
 * Replays traces against the algorithms' pure TypeScript `apply` functions on a
 * virtual clock; no Redis involved.
 *
 * Methodology. Every contestant (an algorithm at one setting, see `contestants.ts`)
 * runs on its own state, so it decides from its own history of allowed requests,
 * exactly as it would in production. Each also feeds a *shadow* exact sliding log
 * ({@link ExactLog}) with the requests it allowed. At each request we ask that shadow
 * whether an exact sliding log with the same allowed history would allow it:
 *
 * - false allow: the algorithm allowed, the shadow would have denied;
 * - false deny: the algorithm denied, the shadow would have allowed.
 *
 * This judges each decision on its own merits. (Comparing with an independently run
 * exact limiter instead would keep counting the consequences of one early mistake:
 * once histories diverge, decisions differ for a while even when every later decision
 * is locally right.) That plain agreement with an independent exact log is reported
 * too, as a second figure. The worst overshoot is the largest number of units the
 * algorithm allowed inside any window of length `window`, over the limit: its shadow
 * log's count right after each allowed request.
 *
 * The per-request false-deny count has a blind spot: a denied request does not enter
 * the shadow, so while one unit of room is free in the shadow, *every* request of a
 * flood is counted as a false deny, although an exact log would have admitted only
 * the first. False allows do not have this problem (they enter the shadow). So a
 * second, capped figure is kept: a false deny counts only if an exact log holding the
 * algorithm's allowed requests *plus the false denies counted so far* would still
 * have room, so that each free unit of room absorbs at most one wrongly denied
 * request. The capped figure is a lower bound, the per-request one an upper bound.
 *
 * The token bucket is not a window, so the figures above measure how it *differs* from
 * one, not its errors. Its errors are judged against its own definition instead: a
 * second shadow, an exact token bucket ({@link ExactBucket}), is fed the requests the
 * token bucket allowed, and every decision that differs from what that exact bucket
 * would decide is counted (and the first such case kept, to be reported precisely).
 */
import type { RawReply } from '../../src/algorithms/types';
import type { Tier } from '../../src/tiers';
import type { Contestant } from './contestants';
import { ExactBucket } from './exact-bucket';
import { ExactLog } from './exact-log';
import type { Source, Trace } from './traces';

/** Every request in the traces costs one unit. */
const COST = 1;

/** Decision quality of one contestant over one trace (summed over its sources). */
export interface ContestantStats {
  readonly contestant: Contestant;
  requests: number;
  allowed: number;
  /** Allowed, though an exact log with the same allowed history would deny. */
  falseAllows: number;
  /** Denied, though an exact log with the same allowed history would allow. */
  falseDenies: number;
  /** False denies, each free unit of room counted once (see the module comment). */
  cappedFalseDenies: number;
  /** Decisions equal to those of an independently run exact sliding log. */
  agreements: number;
  /** Most units allowed inside any one window, over all sources. */
  worstCount: number;
  /** Whether the algorithm has an exact model of its own definition besides the sliding log (the token bucket). */
  readonly ownDefinition: boolean;
  /** Allowed, though the exact model of its own definition, with the same allowed history, would deny. */
  ownFalseAllows: number;
  /** Denied, though the exact model of its own definition, with the same allowed history, would allow. */
  ownFalseDenies: number;
  /** The first decision that differed from its own definition, if any. */
  firstOwnMismatch?: OwnMismatch;
}

/** One decision that differed from the algorithm's own exact definition. */
interface OwnMismatch {
  readonly source: string;
  /** Epoch ms of the request. */
  readonly time: number;
  /** Index of the request in its source. */
  readonly index: number;
  readonly allowed: boolean;
  /** Tokens the exact bucket held at that moment. */
  readonly exactTokens: number;
}

/** A polyline: [time ms, value] pairs in time order. */
export type Points = [number, number][];

/** What the plot of one source shows, per contestant (by label) and for the independent exact log. */
interface SourceSeries {
  readonly sourceId: string;
  /** True sliding count of the independent exact limiter's allowed requests. */
  readonly reference: Points;
  readonly byContestant: ReadonlyMap<string, { readonly estimate: Points; readonly truth: Points }>;
}

/** Everything measured on one trace. */
export interface TraceResult {
  readonly trace: Trace;
  readonly requests: number;
  /** Requests the independent exact sliding log allowed. */
  readonly referenceAllowed: number;
  /** One per contestant, in the order they were given. */
  readonly stats: readonly ContestantStats[];
  /** Stats per group of sources, when a grouping was asked for. */
  readonly groups: ReadonlyMap<string, readonly ContestantStats[]>;
  readonly series: SourceSeries;
  readonly elapsedMs: number;
}

/** One contestant's per-identifier state, kept the way `MemoryStore` keeps it. */
class Runner {
  private state: unknown = undefined;
  private expiresAt = -Infinity;
  /** Exact log of the units this contestant allowed. */
  readonly shadow: ExactLog;
  /** The shadow plus the capped false denies: an exact log's view of what was (or should have been) admitted. */
  readonly claimed: ExactLog;
  /** For the token bucket: an exact bucket fed the units it allowed, its own definition. */
  readonly definition: ExactBucket | undefined;

  constructor(
    readonly contestant: Contestant,
    private readonly tiers: readonly Tier[],
  ) {
    this.shadow = new ExactLog(tiers[0].limit, tiers[0].window);
    this.claimed = new ExactLog(tiers[0].limit, tiers[0].window);
    this.definition = hasOwnDefinition(contestant) ? new ExactBucket(tiers[0].limit, tiers[0].window) : undefined;
  }

  /** Runs one check; with `dryRun` nothing is counted. */
  check(now: number, cost: number, dryRun: boolean): RawReply {
    if (this.state !== undefined && this.expiresAt <= now) this.state = undefined;
    const result = this.contestant.scripts.check.apply(this.state, {
      now,
      cost,
      dryRun,
      blockFor: 0,
      countedAt: 0,
      actualCost: 0,
      tiers: this.tiers,
      precision: this.contestant.precision,
    });
    if (result.state !== this.state) {
      this.state = result.state;
      this.expiresAt = result.expiresAt ?? this.expiresAt;
    }
    return result.reply;
  }

  /** The contestant's own estimate of the units in the window at `now` (first tier). */
  estimate(now: number): number {
    const reply = this.check(now, 0, true);
    return reply[3] / reply[4];
  }
}

/** Samples per plot besides the requests themselves. */
const PLOT_GRID = 800;
/** Above this many requests in the plotted stretch, sample on the grid only. */
const PLOT_MAX_REQUEST_SAMPLES = 4000;

/** Times at which to sample the plotted source: a regular grid plus both sides of each window boundary. */
function sampleTimes(trace: Trace): number[] {
  const { from, to } = trace.plot;
  const { window } = trace.tier;
  const times: number[] = [];
  for (let i = 0; i <= PLOT_GRID; i++) times.push(Math.round(from + ((to - from) * i) / PLOT_GRID));
  for (let boundary = Math.ceil(from / window) * window; boundary <= to; boundary += window) {
    if (boundary - 1 >= from) times.push(boundary - 1);
    times.push(boundary);
  }
  return times.sort((a, b) => a - b);
}

/**
 * Replays one source through every contestant, adding to `stats` (same order as
 * `contestants`). When `plot` is given, also records the series of the plot.
 */
function simulateSource(
  sourceId: string,
  times: Float64Array,
  tier: Tier,
  contestants: readonly Contestant[],
  stats: ContestantStats[],
  plot?: { readonly from: number; readonly to: number; readonly samples: number[]; readonly series: SourceSeries },
): number {
  const tiers = [tier];
  const runners = contestants.map((contestant) => new Runner(contestant, tiers));
  const reference = new ExactLog(tier.limit, tier.window);
  let referenceAllowed = 0;

  let nextSample = 0;
  const perRequest = plot !== undefined && countBetween(times, plot.from, plot.to) <= PLOT_MAX_REQUEST_SAMPLES;
  const sample = (now: number): void => {
    if (plot === undefined) return;
    plot.series.reference.push([now, reference.count(now)]);
    for (const runner of runners) {
      const series = plot.series.byContestant.get(runner.contestant.label)!;
      series.estimate.push([now, runner.estimate(now)]);
      series.truth.push([now, runner.shadow.count(now)]);
    }
  };

  for (let r = 0; r < times.length; r++) {
    const now = times[r];
    if (plot !== undefined) {
      while (nextSample < plot.samples.length && plot.samples[nextSample] < now) sample(plot.samples[nextSample++]);
    }
    const referenceAllows = reference.fits(now, COST);
    if (referenceAllows) {
      reference.add(now, COST);
      referenceAllowed++;
    }
    for (let a = 0; a < runners.length; a++) {
      const runner = runners[a];
      const stat = stats[a];
      const allowed = runner.check(now, COST, false)[0] === 1;
      const exactWouldAllow = runner.shadow.fits(now, COST);
      stat.requests++;
      if (runner.definition !== undefined) {
        const definitionAllows = runner.definition.fits(now, COST);
        if (allowed !== definitionAllows) {
          if (allowed) stat.ownFalseAllows++;
          else stat.ownFalseDenies++;
          stat.firstOwnMismatch ??= { source: sourceId, time: now, index: r, allowed, exactTokens: runner.definition.tokens(now) };
        }
        if (allowed) runner.definition.add(now, COST);
      }
      if (allowed === referenceAllows) stat.agreements++;
      if (allowed && !exactWouldAllow) stat.falseAllows++;
      if (!allowed && exactWouldAllow) {
        stat.falseDenies++;
        if (runner.claimed.fits(now, COST)) {
          stat.cappedFalseDenies++;
          runner.claimed.add(now, COST);
        }
      }
      if (allowed) {
        stat.allowed++;
        runner.shadow.add(now, COST);
        runner.claimed.add(now, COST);
        const inWindow = runner.shadow.count(now);
        if (inWindow > stat.worstCount) stat.worstCount = inWindow;
      }
    }
    if (perRequest && now >= plot!.from && now <= plot!.to) sample(now);
  }
  if (plot !== undefined) while (nextSample < plot.samples.length) sample(plot.samples[nextSample++]);
  return referenceAllowed;
}

function countBetween(times: Float64Array, from: number, to: number): number {
  let count = 0;
  for (const time of times) if (time >= from && time <= to) count++;
  return count;
}

/** The token bucket is also judged against an exact bucket, its own definition. */
function hasOwnDefinition(contestant: Contestant): boolean {
  return contestant.scripts.algorithm === 'token-bucket';
}

function emptyStats(contestants: readonly Contestant[]): ContestantStats[] {
  return contestants.map((contestant) => ({
    contestant,
    requests: 0,
    allowed: 0,
    falseAllows: 0,
    falseDenies: 0,
    cappedFalseDenies: 0,
    agreements: 0,
    worstCount: 0,
    ownDefinition: hasOwnDefinition(contestant),
    ownFalseAllows: 0,
    ownFalseDenies: 0,
  }));
}

function addStats(into: ContestantStats[], from: readonly ContestantStats[]): void {
  into.forEach((stat, i) => {
    stat.requests += from[i].requests;
    stat.allowed += from[i].allowed;
    stat.falseAllows += from[i].falseAllows;
    stat.falseDenies += from[i].falseDenies;
    stat.cappedFalseDenies += from[i].cappedFalseDenies;
    stat.agreements += from[i].agreements;
    stat.worstCount = Math.max(stat.worstCount, from[i].worstCount);
    stat.ownFalseAllows += from[i].ownFalseAllows;
    stat.ownFalseDenies += from[i].ownFalseDenies;
    stat.firstOwnMismatch ??= from[i].firstOwnMismatch;
  });
}

/**
 * Replays every source of `trace` through each contestant and measures its decisions
 * (see the module comment for the methodology), recording the plot series of the
 * trace's representative source.
 *
 * @param trace - the workload; its single tier is the limit under test.
 * @param contestants - what to evaluate, each on its own state; their labels must differ.
 * @param groupOf - optional: names the group of each source, to report stats per group too.
 */
export function simulateTrace(trace: Trace, contestants: readonly Contestant[], groupOf?: (source: Source) => string): TraceResult {
  const started = performance.now();
  if (new Set(contestants.map(({ label }) => label)).size !== contestants.length)
    throw new Error('accuracy study: two contestants share a label');
  const stats = emptyStats(contestants);
  const groups = new Map<string, ContestantStats[]>();
  const series: SourceSeries = {
    sourceId: trace.sources[trace.plot.source].id,
    reference: [],
    byContestant: new Map(contestants.map(({ label }) => [label, { estimate: [], truth: [] }])),
  };
  let requests = 0;
  let referenceAllowed = 0;
  trace.sources.forEach((source, index) => {
    const plot =
      index === trace.plot.source ? { from: trace.plot.from, to: trace.plot.to, samples: sampleTimes(trace), series } : undefined;
    const sourceStats = emptyStats(contestants);
    referenceAllowed += simulateSource(source.id, source.times, trace.tier, contestants, sourceStats, plot);
    requests += source.times.length;
    addStats(stats, sourceStats);
    if (groupOf !== undefined) {
      const group = groupOf(source);
      let groupStats = groups.get(group);
      if (groupStats === undefined) {
        groupStats = emptyStats(contestants);
        groups.set(group, groupStats);
      }
      addStats(groupStats, sourceStats);
    }
  });
  return { trace, requests, referenceAllowed, stats, groups, series, elapsedMs: performance.now() - started };
}

/**
 * The stats of the contestant labelled `label` in `stats`.
 *
 * @throws when there are none: the study did not run that contestant.
 */
export function statsOf(stats: readonly ContestantStats[], label: string): ContestantStats {
  const found = stats.find((stat) => stat.contestant.label === label);
  if (found === undefined) throw new Error(`accuracy study: no contestant labelled ${label}`);
  return found;
}

/**
 * Units a contestant admits in each window under a constant flood of one request
 * every `gapMs`, starting at a window boundary: its throughput at saturation.
 *
 * @param contestant - the contestant, on a fresh state.
 * @param tier - the limit.
 * @param start - the first request's time; should be a window boundary.
 * @param windows - how many windows to flood.
 * @param gapMs - milliseconds between requests.
 */
export function floodAdmissions(contestant: Contestant, tier: Tier, start: number, windows: number, gapMs: number): number[] {
  const runner = new Runner(contestant, [tier]);
  const perWindow = new Array<number>(windows).fill(0);
  for (let now = start; now < start + windows * tier.window; now += gapMs) {
    if (runner.check(now, COST, false)[0] === 1) perWindow[Math.floor((now - start) / tier.window)]++;
  }
  return perWindow;
}

/**
 * The decisions of `contestant` on one identifier's requests (whole ms, ascending), its
 * state kept and dropped at its expiry the way `MemoryStore` does.
 *
 * @param costs - the cost of each request; 1 each when absent.
 * @returns per request, whether it was allowed.
 */
export function decisions(contestant: Contestant, tier: Tier, times: readonly number[], costs?: readonly number[]): boolean[] {
  const runner = new Runner(contestant, [tier]);
  return times.map((now, i) => runner.check(now, costs?.[i] ?? COST, false)[0] === 1);
}
