/**
 * Requests in progress with Fastify: at most two reports rendered at once per API key, and at
 * most 60 started per minute, decided together in one atomic script. The headers follow the
 * IETF draft's structured fields, with an item for the requests in progress
 * (`qu="concurrent-requests"`), which no built-in header style sends.
 * `createApp` is what test/examples.test.ts runs, with its own renderer.
 * Run: REDIS_URL=redis://127.0.0.1:6379 npx ts-node --transpile-only examples/concurrency.ts
 */
import Fastify, { type FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { byApiKey, type HeaderFormat, RedisStore, rateLimitPlugin, type Store } from '../src/fastify';

/** Renders a report: the slow work the bound protects. */
export type Render = (id: string) => Promise<string>;

const slowRender: Render = (id) => new Promise((resolve) => setTimeout(() => resolve(`report ${id}`), 2_000));

/** `RateLimit-Policy` and `RateLimit` with one item for the rate and, when known, one for the requests in progress. */
export const rateAndInProgress: HeaderFormat = (decision, set) => {
  const policies = [`"minute";q=${decision.limit};w=${Math.round(decision.window / 1000)}`];
  const limits = [`"minute";r=${decision.remaining};t=${Math.ceil(Math.max(0, decision.resetAt - decision.now) / 1000)}`];
  const inProgress = decision.concurrency;
  if (inProgress !== undefined) {
    policies.push(`"inflight";q=${inProgress.limit};qu="concurrent-requests"`);
    limits.push(`"inflight";r=${Math.max(0, inProgress.limit - inProgress.inProgress)}`);
  }
  set('RateLimit-Policy', policies.join(', '));
  set('RateLimit', limits.join(', '));
};

export async function createApp(store: Store, prefix = 'example', render: Render = slowRender): Promise<FastifyInstance> {
  const app = Fastify();
  await app.register(rateLimitPlugin, { store, identify: byApiKey(), prefix, global: false });
  app.get<{ Params: { id: string } }>(
    '/reports/:id',
    {
      config: {
        rateLimit: {
          prefix: `${prefix}-reports`,
          concurrency: 2,
          limit: 60,
          window: '1m',
          headers: rateAndInProgress,
          // Which bound refused: the requests in progress (no wait is known), or the rate.
          message: (_request, decision) =>
            decision.concurrency?.refused
              ? { error: 'Two reports are in progress already: retry when one is done' }
              : { error: 'Sixty reports a minute at most', retryInMs: decision.retryAfterMs },
        },
      },
    },
    async (request) => ({ report: await render(request.params.id) }),
  );
  return app;
}

if (require.main === module) {
  const client = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  createApp(new RedisStore({ client }))
    .then((app) => app.listen({ port: 3000 }))
    .then((address) => console.log(`GET ${address}/reports/1 with x-api-key, three at once`))
    .catch((error) => {
      console.error(error);
      process.exit(1);
    });
}
