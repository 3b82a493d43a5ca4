/**
 * Fastify with Redis: a global limit, per-route overrides, an exempt health check.
 * Run: REDIS_URL=redis://127.0.0.1:6379 npx ts-node --transpile-only examples/fastify.ts
 */
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import { byIp, byUser, RedisStore, rateLimitPlugin } from '../src/fastify';

const client = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
});

async function main(): Promise<void> {
  const app = Fastify({ trustProxy: false });
  await app.register(rateLimitPlugin, {
    store: new RedisStore({ client }),
    limit: 100,
    window: '1m',
    identify: byIp(),
    headers: ['legacy', 'ietf'],
  });

  // Its own limit, so its own key space: searches do not use up the global quota.
  app.get('/search', { config: { rateLimit: { limit: 10, window: '1s' } } }, async () => ({ results: [] }));
  // Same quota as the plugin's, but counted per user when one is signed in.
  app.get(
    '/me',
    { config: { rateLimit: { identify: [byUser((request) => request.headers['x-user-id'] as string | undefined), byIp()] } } },
    async () => ({ me: true }),
  );
  app.get('/health', { config: { rateLimit: false } }, async () => 'ok');

  await app.listen({ port: 3000 });
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
