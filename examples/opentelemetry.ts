/**
 * Rate-limit metrics through OpenTelemetry: an Express app whose limiter records into a
 * MeterProvider (decisions by outcome, store latency, store errors). Run directly, it exports to
 * the console every 5 s; a real app gives its MeterProvider an OTLP or Prometheus exporter.
 * Run: npx ts-node --transpile-only examples/opentelemetry.ts  (memory store; set REDIS_URL for Redis)
 */
import { ConsoleMetricExporter, MeterProvider, type MetricReader, PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import express, { type Express } from 'express';
import { Redis } from 'ioredis';
import type { Store } from '../src';
import { MemoryStore, RedisStore, rateLimit } from '../src/express';

/** An app limited to `limit` requests per 10 s, recording through a MeterProvider read by `reader`. */
export function createOpenTelemetryApp(store: Store, reader: MetricReader, limit = 20, prefix = 'otel-example'): Express {
  const provider = new MeterProvider({ readers: [reader] });
  const app = express();
  app.use(rateLimit({ store, limit, window: '10s', prefix, metrics: provider }));
  app.get('/', (_request, response) => {
    response.send('hello');
  });
  return app;
}

if (require.main === module) {
  const client = process.env.REDIS_URL
    ? new Redis(process.env.REDIS_URL, { enableOfflineQueue: false, maxRetriesPerRequest: 1 })
    : undefined;
  client?.on('error', (error) => console.warn('redis:', error.message));
  const store = client ? new RedisStore({ client }) : new MemoryStore();
  const reader = new PeriodicExportingMetricReader({ exporter: new ConsoleMetricExporter(), exportIntervalMillis: 5_000 });
  const server = createOpenTelemetryApp(store, reader).listen(Number(process.env.PORT ?? 3000), () => {
    console.log(`listening on http://localhost:${(server.address() as { port: number }).port}; metrics print every 5 s`);
  });
}
