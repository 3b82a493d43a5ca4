/**
 * Several limits at once: 10 per second and 1000 per hour, checked and counted in one
 * atomic Redis call. A request refused by either tier counts in neither.
 * Run: REDIS_URL=redis://127.0.0.1:6379 npx ts-node --transpile-only examples/tiers.ts
 */
import { Redis } from 'ioredis';
import { createLimiter, RedisStore } from '../src';

async function main(): Promise<void> {
  const client = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  await new Promise((resolve) => client.once('ready', resolve));
  const limiter = createLimiter({
    store: new RedisStore({ client }),
    limits: [
      { limit: 10, window: '1s' },
      { limit: 1000, window: '1h' },
    ],
    prefix: 'tiers-example',
  });
  for (let i = 0; i < 12; i++) {
    const d = await limiter.check('user:42');
    const tiers = d.tiers.map((t) => `${t.limit}/${t.window / 1000}s: ${t.remaining} left`).join(', ');
    console.log(`${d.allowed ? 'allowed' : 'denied '}  binding tier ${d.tier}  retry in ${d.retryAfterMs} ms  [${tiers}]`);
  }
  await limiter.reset('user:42');
  await client.quit();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
