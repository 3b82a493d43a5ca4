/**
 * Two everyday limits with Express: failed logins only (successful ones are free), and
 * limits that depend on the caller's plan. `createApp` is what test/examples.test.ts runs.
 * Run: REDIS_URL=redis://127.0.0.1:6379 npx ts-node --transpile-only examples/login-and-plans.ts
 */
import express, { type Request } from 'express';
import { Redis } from 'ioredis';
import { byApiKey, byIp, type RateLimitMiddleware, RedisStore, rateLimit, type Store } from '../src/express';

const PLANS: Record<string, { perMinute: number }> = { free: { perMinute: 100 }, pro: { perMinute: 1000 } };

/** The plan of an API key: a stand-in for a lookup in your own database (cache it: it runs per request). */
async function planOf(request: Request): Promise<keyof typeof PLANS> {
  return request.headers['x-api-key'] === 'pro-key' ? 'pro' : 'free';
}

export function createApp(store: Store, prefix = 'example'): { app: express.Express; login: RateLimitMiddleware } {
  const app = express();
  app.use(express.json());
  const login = rateLimit({ store, limit: 5, window: '15m', identify: byIp(), prefix: `${prefix}-login`, skipSuccessfulRequests: true });

  // Five wrong passwords per 15 minutes and IP; a successful login counts nothing. Each
  // attempt is counted when it arrives, so a burst of parallel guesses cannot pass five,
  // and given back when the response is a success.
  app.post('/login', login, (request, response) => {
    if (request.body?.password === 'correct horse') response.send('welcome');
    else response.status(401).send('wrong password');
  });

  // Per-plan limits: an upgraded key keeps what it has used this minute.
  app.use(
    '/api',
    rateLimit({
      store,
      identify: [byApiKey(), byIp()],
      limit: async (request) => PLANS[await planOf(request)].perMinute,
      window: '1m',
      headers: ['legacy', 'ietf'],
      prefix: `${prefix}-api`,
    }),
  );
  app.get('/api/data', (_request, response) => {
    response.json({ ok: true });
  });
  return { app, login };
}

if (require.main === module) {
  const client = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  createApp(new RedisStore({ client })).app.listen(3000, () => console.log('listening on http://localhost:3000'));
}
