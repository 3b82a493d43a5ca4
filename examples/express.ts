/**
 * Express with Redis: a global limit, a stricter one on /login, API keys before IPs.
 * Run: REDIS_URL=redis://127.0.0.1:6379 npx ts-node --transpile-only examples/express.ts
 */
import express from 'express';
import { Redis } from 'ioredis';
import { byApiKey, byIp, RedisStore, rateLimit } from '../src/express';

// Settings recommended for the limiter's connection: fail fast while Redis is down
// instead of queueing (see docs/redis.md, "Recommended settings").
const client = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
});
const store = new RedisStore({ client });

const app = express();
app.set('trust proxy', 'loopback'); // only if a proxy on this host sets X-Forwarded-For

app.use(rateLimit({ store, limit: 100, window: '1m', identify: [byApiKey(), byIp()] }));

app.post('/login', rateLimit({ store, limit: 5, window: '1m', identify: byIp(), prefix: 'login' }), (_request, response) => {
  response.send('logged in');
});

app.get('/', (_request, response) => {
  response.send('hello');
});

app.listen(3000, () => console.log('listening on http://localhost:3000'));
