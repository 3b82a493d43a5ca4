/**
 * OpenTelemetry metrics of a limiter, recorded through the `metrics` option: a counter of
 * decisions by outcome, a histogram of store latency, a counter of store failures. The meter is
 * the app's (an `@opentelemetry/api` Meter or MeterProvider); this module never imports
 * `@opentelemetry/api`, so the types below are the few members of it the limiter calls, and a
 * limiter without `metrics` has nothing here on its path but one `undefined` check.
 */
import { OptionError } from './errors';
import { describeValue } from './validate';

/** Attributes of one measurement: bounded strings only. */
export type MetricsAttributes = Readonly<Record<string, string>>;

/** What the limiter calls on a counter: `Counter` of `@opentelemetry/api`. */
export interface MetricsCounter {
  add(value: number, attributes?: MetricsAttributes): void;
}

/** What the limiter calls on a histogram: `Histogram` of `@opentelemetry/api`. */
export interface MetricsHistogram {
  record(value: number, attributes?: MetricsAttributes): void;
}

/** Options of an instrument, as `@opentelemetry/api` 1.3 and later take them (`advice` from 1.7; older meters ignore it). */
export interface MetricsInstrumentOptions {
  description?: string | undefined;
  unit?: string | undefined;
  advice?: { explicitBucketBoundaries?: number[] } | undefined;
}

/** What the limiter calls on a meter: `Meter` of `@opentelemetry/api`. */
export interface MetricsMeter {
  createCounter(name: string, options?: MetricsInstrumentOptions): MetricsCounter;
  createHistogram(name: string, options?: MetricsInstrumentOptions): MetricsHistogram;
}

/** What the limiter calls on a meter provider: `MeterProvider` of `@opentelemetry/api`. */
export interface MetricsMeterProvider {
  getMeter(name: string): MetricsMeter;
}

/**
 * The `metrics` option: a `MeterProvider` (the limiter takes its meter named `ratewarden`, the
 * instrumentation scope OpenTelemetry asks libraries to use), or a `Meter` of your own.
 */
export type MetricsOption = MetricsMeterProvider | MetricsMeter;

/** The instrumentation scope of the meter taken from a provider. */
const METER_NAME = 'ratewarden';

/** Instrument names, in OpenTelemetry's semantic-convention style (dotted namespace, unit apart). */
const METRIC_NAMES = {
  decisions: 'ratewarden.decisions',
  storeDuration: 'ratewarden.store.duration',
  storeErrors: 'ratewarden.store.errors',
} as const;

/** Attribute names: the limiter's prefix, a decision's outcome, and the semantic conventions' `error.type`. */
const METRIC_ATTRIBUTES = { prefix: 'ratewarden.prefix', outcome: 'ratewarden.outcome', errorType: 'error.type' } as const;

/**
 * The outcome of a check: allowed; denied by the store; denied from the local deny cache; a denial
 * in shadow mode, reported but not enforced; or an error (the store failed or timed out, or the
 * check was invalid).
 */
export type MetricsOutcome = 'allowed' | 'denied' | 'cached_denial' | 'shadow_denial' | 'error';
const OUTCOMES: readonly MetricsOutcome[] = ['allowed', 'denied', 'cached_denial', 'shadow_denial', 'error'];

/** The `error.type` of a failure without a store code: the semantic conventions' fallback value. */
const OTHER_ERROR = '_OTHER';
/** The codes of store failures; any other failure of a store (a custom one) is `_OTHER`. */
const STORE_FAILURE_CODES: ReadonlySet<string> = new Set(['SWL_TIMEOUT', 'SWL_STORE_UNAVAILABLE', 'SWL_STORE_ERROR']);

/**
 * Bucket boundaries of the latency histogram, in seconds: from 0.1 ms (a local Redis) to 1 s,
 * past any sensible `timeoutMs`. OpenTelemetry's default boundaries start at 5 (seconds, once
 * the unit is `s`), where a Redis call would land in the first bucket whatever it took.
 */
const STORE_DURATION_BUCKETS: readonly number[] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1];

interface Instruments {
  readonly decisions: MetricsCounter;
  readonly storeDuration: MetricsHistogram;
  readonly storeErrors: MetricsCounter;
}

/** Instruments per meter: every limiter on one meter records into the same three. */
const instrumentsOf = new WeakMap<MetricsMeter, Instruments>();

function instruments(meter: MetricsMeter): Instruments {
  let made = instrumentsOf.get(meter);
  if (made === undefined) {
    made = {
      decisions: meter.createCounter(METRIC_NAMES.decisions, {
        description: 'Rate-limit checks, by outcome.',
        unit: '{decision}',
      }),
      storeDuration: meter.createHistogram(METRIC_NAMES.storeDuration, {
        description: 'Duration of rate-limit store calls (checks), whether they succeeded or failed.',
        unit: 's',
        advice: { explicitBucketBoundaries: [...STORE_DURATION_BUCKETS] },
      }),
      storeErrors: meter.createCounter(METRIC_NAMES.storeErrors, {
        description: 'Rate-limit store calls that failed or timed out.',
        unit: '{error}',
      }),
    };
    instrumentsOf.set(meter, made);
  }
  return made;
}

/** The meter of a `metrics` option, or throws an `OptionError` naming it. */
export function resolveMetrics(option: unknown): MetricsMeter | undefined {
  if (option === undefined) return undefined;
  const candidate = option as Partial<MetricsMeterProvider & MetricsMeter> | null;
  if (candidate !== null && typeof candidate === 'object') {
    if (typeof candidate.getMeter === 'function') {
      const meter = candidate.getMeter(METER_NAME);
      if (isMeter(meter)) return meter;
    } else if (isMeter(candidate)) return candidate;
  }
  throw new OptionError(
    'SWL_INVALID_TYPE',
    `metrics: must be an OpenTelemetry MeterProvider or Meter (from @opentelemetry/api), got ${describeValue(option)}`,
  );
}

function isMeter(value: unknown): value is MetricsMeter {
  const meter = value as Partial<MetricsMeter> | null;
  return (
    meter !== null && typeof meter === 'object' && typeof meter.createCounter === 'function' && typeof meter.createHistogram === 'function'
  );
}

/** The `error.type` of a failure: its code for a store failure, `_OTHER` for any other store failure; undefined for an invalid check. */
function errorTypeOf(error: unknown): string | undefined {
  if (error instanceof OptionError) return undefined;
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && STORE_FAILURE_CODES.has(code) ? code : OTHER_ERROR;
}

/** What the outcome of a decision is read from (a `Decision`; not imported, which would make a circle with core/types.ts). */
interface Decided {
  readonly allowed: boolean;
  readonly shadow: boolean;
  readonly cached: boolean;
}

/** One limiter's recording: its attribute sets built once, so a measurement allocates nothing. */
export class LimiterMetrics {
  private readonly instruments: Instruments;
  private readonly byOutcome: Readonly<Record<MetricsOutcome, MetricsAttributes>>;
  private readonly succeeded: MetricsAttributes;
  /** Attribute sets of failures, by `error.type`: a handful of codes at most. */
  private readonly failures = new Map<string, MetricsAttributes>();

  constructor(
    meter: MetricsMeter,
    private readonly prefix: string,
  ) {
    this.instruments = instruments(meter);
    const byOutcome = {} as Record<MetricsOutcome, MetricsAttributes>;
    for (const outcome of OUTCOMES) {
      byOutcome[outcome] = Object.freeze({ [METRIC_ATTRIBUTES.prefix]: prefix, [METRIC_ATTRIBUTES.outcome]: outcome });
    }
    this.byOutcome = byOutcome;
    this.succeeded = Object.freeze({ [METRIC_ATTRIBUTES.prefix]: prefix });
  }

  /** Counts the outcome of one check: its decision, or its failure. */
  record(error: unknown, decision: Decided | undefined): void {
    if (decision === undefined) this.failed(error);
    else this.instruments.decisions.add(1, this.byOutcome[outcomeOf(decision)]);
  }

  private failed(error: unknown): void {
    this.instruments.decisions.add(1, this.byOutcome.error);
    const type = errorTypeOf(error);
    if (type !== undefined) this.instruments.storeErrors.add(1, this.failure(type));
  }

  /** Records how long a store call took, from `started` (`performance.now()`); `error` when it failed. */
  storeAnswered(started: number, error: unknown): void {
    const seconds = (performance.now() - started) / 1000;
    this.instruments.storeDuration.record(seconds, error === undefined ? this.succeeded : this.failure(errorTypeOf(error) ?? OTHER_ERROR));
  }

  private failure(type: string): MetricsAttributes {
    let attributes = this.failures.get(type);
    if (attributes === undefined) {
      attributes = Object.freeze({ [METRIC_ATTRIBUTES.prefix]: this.prefix, [METRIC_ATTRIBUTES.errorType]: type });
      this.failures.set(type, attributes);
    }
    return attributes;
  }
}

function outcomeOf(decision: Decided): MetricsOutcome {
  if (decision.allowed) return 'allowed';
  if (decision.shadow) return 'shadow_denial';
  return decision.cached ? 'cached_denial' : 'denied';
}
