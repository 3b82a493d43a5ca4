/**
 * Trying a stricter limit in shadow mode before enforcing it: the app keeps enforcing its
 * current limit (10 requests per 10 s) and, beside it, runs the new one (5 per 10 s) with
 * `shadow: true`. The shadow limiter refuses nothing and sends no headers; it counts exactly as
 * it would if enforced, and each of its would-be denials is counted in prom-client, served on
 * /metrics. When the counter shows what the new limit would cost, enforce it (drop `shadow`).
 * Run: npx ts-node --transpile-only examples/shadow.ts  (memory store; set REDIS_URL for Redis)
 */
import express, { type Express } from 'express';
import { Redis } from 'ioredis';
import { Counter, Registry } from 'prom-client';
import type { Store } from '../src';
import { MemoryStore, RedisStore, rateLimit } from '../src/express';

/** The limit enforced today. */
export const ENFORCED = { limit: 10, window: '10s' };
/** The stricter limit under watch. */
export const SHADOWED = { limit: 5, window: '10s' };

/** An app enforcing {@link ENFORCED} and watching {@link SHADOWED} in shadow mode; each limiter has its own key space. */
export function createShadowApp(store: Store, prefix = 'shadow-example'): Express {
  const registry = new Registry();
  const wouldDeny = new Counter({
    name: 'rate_limit_shadow_would_deny_total',
    help: 'Requests the shadow limit would have refused',
    registers: [registry],
  });
  const enforcedDenials = new Counter({
    name: 'rate_limit_denied_total',
    help: 'Requests refused by the enforced limit',
    registers: [registry],
  });

  const app = express();
  // Registered before the limiters, so scraping is never limited.
  app.get('/metrics', async (_request, response) => {
    response.type(registry.contentType).send(await registry.metrics());
  });
  // The shadow limiter first, so it sees every request, including those the enforced limit refuses.
  app.use(
    rateLimit({
      store,
      ...SHADOWED,
      prefix: `${prefix}-shadow`,
      shadow: true,
      onDecision: (decision) => {
        if (!decision.allowed) wouldDeny.inc();
      },
    }),
  );
  app.use(
    rateLimit({
      store,
      ...ENFORCED,
      prefix,
      onDecision: (decision) => {
        if (!decision.allowed) enforcedDenials.inc();
      },
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
  createShadowApp(store).listen(port, () => console.log(`listening on http://localhost:${port}; metrics on /metrics`));
}
