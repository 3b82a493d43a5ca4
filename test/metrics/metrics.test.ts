/**
 * The `metrics` option, read back through @opentelemetry/sdk-metrics (2.x) with an in-memory
 * reader: through Express and Fastify, the decision counter's counts equal the decisions the app
 * saw (`onDecision`), by outcome; the attributes are the prefix and the outcome, nothing of the
 * request; store latency is one measurement per store call, in seconds; a failing or slow store is
 * counted by `error.type`. On MemoryStore and RedisStore.
 */
import { metrics as otelMetrics } from '@opentelemetry/api';
import {
  AggregationTemporality,
  DataPointType,
  type HistogramMetricData,
  MeterProvider,
  MetricReader,
  type SumMetricData,
} from '@opentelemetry/sdk-metrics';
import express from 'express';
import Fastify from 'fastify';
import request from 'supertest';
import { createLimiter, type Decision, OptionError, type Store } from '../../src';
import { rateLimit } from '../../src/express';
import { rateLimitPlugin } from '../../src/fastify';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { storesOfTestFile } from '../helpers/stores';

/** A reader the test collects from when it wants (cumulative sums). */
class TestReader extends MetricReader {
  protected override async onForceFlush(): Promise<void> {}
  protected override async onShutdown(): Promise<void> {}
}

let reader: TestReader;
let provider: MeterProvider;
beforeEach(() => {
  reader = new TestReader({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  provider = new MeterProvider({ readers: [reader] });
});
afterEach(() => provider.shutdown());

interface Collected {
  scopes: string[];
  /** Data points of a sum, as `attribute=value,...` -> value. */
  sum(name: string): Record<string, number>;
  histogram(name: string): { attributes: Record<string, unknown>; count: number; min?: number; max?: number; boundaries: number[] }[];
  unit(name: string): string | undefined;
}

async function collect(): Promise<Collected> {
  const { resourceMetrics, errors } = await reader.collect();
  expect(errors).toEqual([]);
  const all = resourceMetrics.scopeMetrics.flatMap((scope) => scope.metrics);
  const find = (name: string) => all.find((metric) => metric.descriptor.name === name);
  const label = (attributes: Record<string, unknown>) =>
    Object.entries(attributes)
      .sort()
      .map(([key, value]) => `${key}=${value}`)
      .join(',');
  return {
    scopes: resourceMetrics.scopeMetrics.map((scope) => scope.scope.name),
    sum(name) {
      const metric = find(name) as SumMetricData | undefined;
      if (metric === undefined) return {};
      expect(metric.dataPointType).toBe(DataPointType.SUM);
      return Object.fromEntries(metric.dataPoints.map((point) => [label(point.attributes), point.value]));
    },
    histogram(name) {
      const metric = find(name) as HistogramMetricData | undefined;
      if (metric === undefined) return [];
      return metric.dataPoints.map((point) => ({
        attributes: point.attributes,
        count: point.value.count,
        min: point.value.min,
        max: point.value.max,
        boundaries: point.value.buckets.boundaries,
      }));
    },
    unit: (name) => find(name)?.descriptor.unit,
  };
}

/** The decisions an app saw, tallied by the outcome the counter must show for each. */
function tally(decisions: readonly Decision[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const decision of decisions) {
    const outcome = decision.allowed ? 'allowed' : decision.shadow ? 'shadow_denial' : decision.cached ? 'cached_denial' : 'denied';
    counts[outcome] = (counts[outcome] ?? 0) + 1;
  }
  return counts;
}

function byOutcome(sums: Record<string, number>, prefix: string): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const [label, value] of Object.entries(sums)) {
    const match = new RegExp(`^ratewarden\\.outcome=(\\w+),ratewarden\\.prefix=${prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`).exec(
      label,
    );
    if (match !== null) counts[match[1]] = value;
  }
  return counts;
}

const STORES = storesOfTestFile();

describe.each(STORES)('on %s', (_storeName, makeStore) => {
  test('Express: the decision counter equals the decisions made, by outcome; store latency once per store call', async () => {
    const prefix = uniquePrefix('express');
    const decisions: Decision[] = [];
    const app = express();
    app.use(
      rateLimit({
        store: makeStore(),
        prefix,
        limit: 3,
        window: '1m',
        clock: manualClock().now,
        metrics: provider,
        onDecision: (decision) => decisions.push(decision),
      }),
    );
    app.get('/', (_req, res) => {
      res.send('ok');
    });
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) statuses.push((await request(app).get(`/?n=${i}`)).status);
    expect(statuses).toEqual([200, 200, 200, 429, 429, 429, 429, 429, 429, 429]);

    const collected = await collect();
    expect(collected.scopes).toEqual(['ratewarden']);
    const counts = byOutcome(collected.sum('ratewarden.decisions'), prefix);
    expect(counts).toEqual(tally(decisions));
    // The first denial from the store, the rest from the deny cache.
    expect(counts).toEqual({ allowed: 3, denied: 1, cached_denial: 6 });
    expect(collected.unit('ratewarden.decisions')).toBe('{decision}');

    const [latency] = collected.histogram('ratewarden.store.duration');
    expect(latency.attributes).toEqual({ 'ratewarden.prefix': prefix });
    expect(latency.count).toBe(4);
    expect(latency.min).toBeGreaterThan(0);
    expect(latency.max).toBeLessThan(1);
    expect(latency.boundaries[0]).toBe(0.0001);
    expect(collected.unit('ratewarden.store.duration')).toBe('s');
    expect(collected.sum('ratewarden.store.errors')).toEqual({});
  });

  test('Fastify: plugin and route limiters each count their decisions under their own prefix', async () => {
    const prefix = uniquePrefix('fastify');
    const decisions: Decision[] = [];
    const app = Fastify();
    await app.register(rateLimitPlugin, {
      store: makeStore(),
      prefix,
      limit: 2,
      window: '1m',
      clock: manualClock().now,
      metrics: provider,
      identify: (req) => `client:${req.headers['x-client']}`,
      onDecision: (decision) => decisions.push(decision),
    });
    app.get('/', async () => 'ok');
    app.get('/search', { config: { rateLimit: { limit: 1, window: '1s' } } }, async () => 'results');
    await app.listen({ port: 0, host: '127.0.0.1' });
    const agent = request(app.server);
    try {
      for (let i = 0; i < 4; i++) await agent.get('/').set('x-client', '203.0.113.7');
      for (let i = 0; i < 3; i++) await agent.get('/search').set('x-client', '203.0.113.7');
      for (let i = 0; i < 2; i++) await agent.get('/').set('x-client', '203.0.113.8');
    } finally {
      await app.close();
    }

    const sums = (await collect()).sum('ratewarden.decisions');
    const plugin = byOutcome(sums, prefix);
    const route = byOutcome(sums, `${prefix}:GET:/search`);
    expect(plugin).toEqual({ allowed: 4, denied: 1, cached_denial: 1 });
    expect(route).toEqual({ allowed: 1, denied: 1, cached_denial: 1 });
    const total = (counts: Record<string, number>) => Object.values(counts).reduce((a, b) => a + b, 0);
    expect(total(plugin) + total(route)).toBe(decisions.length);
    expect({ ...tally(decisions) }).toEqual({ allowed: 5, denied: 2, cached_denial: 2 });
    // Bounded attributes only: no identifier, no URL of a request, anywhere.
    expect(Object.keys(sums).join(' ')).not.toMatch(/203\.0\.113|client:/);
  });

  test('shadow mode: would-be denials are shadow_denial', async () => {
    const prefix = uniquePrefix('shadow');
    const limiter = createLimiter({ store: makeStore(), prefix, limit: 1, window: '1m', shadow: true, metrics: provider.getMeter('app') });
    await limiter.check('a');
    await limiter.check('a');
    await limiter.peek('a');
    expect(byOutcome((await collect()).sum('ratewarden.decisions'), prefix)).toEqual({ allowed: 1, shadow_denial: 1 });
  });
});

describe('a failing store', () => {
  const stalled: Store = {
    needsTimeout: true,
    check: () => new Promise(() => undefined),
    settle: () => new Promise(() => undefined),
    reset: () => new Promise(() => undefined),
  };
  const broken: Store = {
    needsTimeout: false,
    check: () => Promise.reject(new Error('disk on fire')),
    settle: () => Promise.reject(new Error('disk on fire')),
    reset: () => Promise.reject(new Error('disk on fire')),
  };

  test('timeouts and other failures: decisions of outcome error, store errors by error.type, failed calls timed', async () => {
    const slow = createLimiter({ store: stalled, prefix: 'slow', timeoutMs: 20, metrics: provider });
    const failing = createLimiter({ store: broken, prefix: 'broken', metrics: provider });
    await expect(slow.check('a')).rejects.toMatchObject({ code: 'SWL_TIMEOUT' });
    await expect(failing.check('a')).rejects.toThrow('disk on fire');
    await expect(failing.check('b')).rejects.toThrow('disk on fire');
    const collected = await collect();
    expect(collected.sum('ratewarden.decisions')).toEqual({
      'ratewarden.outcome=error,ratewarden.prefix=slow': 1,
      'ratewarden.outcome=error,ratewarden.prefix=broken': 2,
    });
    expect(collected.sum('ratewarden.store.errors')).toEqual({
      'error.type=SWL_TIMEOUT,ratewarden.prefix=slow': 1,
      'error.type=_OTHER,ratewarden.prefix=broken': 2,
    });
    // The stalled store never answered: no duration. The broken one's failures were timed.
    expect(collected.histogram('ratewarden.store.duration').map((point) => [point.attributes, point.count])).toEqual([
      [{ 'ratewarden.prefix': 'broken', 'error.type': '_OTHER' }, 2],
    ]);
  });
});

describe('the option', () => {
  test('takes a MeterProvider (the meter named ratewarden) or a Meter; anything else throws naming it', async () => {
    createLimiter({ metrics: provider });
    createLimiter({ metrics: otelMetrics.getMeter('global, a no-op until registered') });
    expect(() => createLimiter({ metrics: {} as never })).toThrow(OptionError);
    expect(() => rateLimit({ metrics: 'prometheus' as never })).toThrow(/^metrics: must be an OpenTelemetry MeterProvider or Meter/);
    expect(() => createLimiter({ metrics: { getMeter: () => ({}) } as never })).toThrow(
      expect.objectContaining({ code: 'SWL_INVALID_TYPE' }),
    );
  });

  test('without it, nothing is recorded', async () => {
    const limiter = createLimiter({ limit: 1 });
    await limiter.check('a');
    await limiter.check('a');
    expect((await collect()).sum('ratewarden.decisions')).toEqual({});
  });
});
