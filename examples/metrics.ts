/**
 * Near-limit monitoring with prom-client: counts allowed and denied decisions, and the
 * decisions whose estimate lies within 90%..110% of the limit, where an approximating
 * algorithm can be wrong. Serves them on /metrics.
 * Run: npx ts-node --transpile-only examples/metrics.ts  (memory store; set REDIS_URL for Redis)
 */
import express, { type Express } from 'express';
import { Redis } from 'ioredis';
import { Counter, Histogram, Registry } from 'prom-client';
import type { Store } from '../src';
import { MemoryStore, RedisStore, rateLimit } from '../src/express';

/** An app limited to `limit` requests per 10 s whose decisions are exported on /metrics. */
export function createMetricsApp(store: Store, limit = 20, prefix = 'metrics-example'): Express {
  const registry = new Registry();
  const decisions = new Counter({
    name: 'rate_limit_decisions_total',
    help: 'Rate-limit decisions',
    labelNames: ['result'],
    registers: [registry],
  });
  const nearLimit = new Counter({
    name: 'rate_limit_near_limit_total',
    help: 'Decisions whose estimate / limit lies in [0.9, 1.1]',
    labelNames: ['result'],
    registers: [registry],
  });
  const ratio = new Histogram({
    name: 'rate_limit_ratio',
    help: 'estimated / limit at decision time',
    buckets: [0.25, 0.5, 0.75, 0.9, 1, 1.1],
    registers: [registry],
  });

  const app = express();
  // Registered before the limiter, so scraping is never limited.
  app.get('/metrics', async (_request, response) => {
    response.type(registry.contentType).send(await registry.metrics());
  });
  app.use(
    rateLimit({
      store,
      limit,
      window: '10s',
      prefix,
      onDecision: (decision) => {
        decisions.inc({ result: decision.allowed ? 'allowed' : 'denied' });
        ratio.observe(decision.ratio);
      },
      onNearLimit: (decision) => nearLimit.inc({ result: decision.allowed ? 'allowed' : 'denied' }),
      nearLimitBand: [0.9, 1.1],
    }),
  );
  app.get('/', (_request, response) => {
    response.send('hello');
  });
  return app;
}

if (require.main === module) {
  const store = process.env.REDIS_URL
    ? new RedisStore({ client: new Redis(process.env.REDIS_URL, { enableOfflineQueue: false, maxRetriesPerRequest: 1 }) })
    : new MemoryStore();
  const port = Number(process.env.PORT ?? 3000);
  createMetricsApp(store).listen(port, () => console.log(`listening on http://localhost:${port}; metrics on /metrics`));
}
