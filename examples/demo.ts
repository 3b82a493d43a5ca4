/**
 * `npm run demo`: starts an Express app limited to 5 requests per 10 seconds on a free
 * port, sends requests at it until the 429s appear, prints each answer with its
 * rate-limit headers, and exits. Uses Redis when REDIS_URL is set, memory otherwise.
 */
import type { AddressInfo } from 'node:net';
import express from 'express';
import { Redis } from 'ioredis';
import { byIp, MemoryStore, RedisStore, rateLimit } from '../src/express';

async function main(): Promise<void> {
  const client = process.env.REDIS_URL
    ? new Redis(process.env.REDIS_URL, { enableOfflineQueue: false, maxRetriesPerRequest: 1 })
    : undefined;
  if (client) await new Promise((resolve, reject) => client.once('ready', resolve).once('error', reject));
  const store = client ? new RedisStore({ client }) : new MemoryStore();

  const app = express();
  app.use(rateLimit({ store, limit: 5, window: '10s', identify: byIp(), prefix: `demo-${process.pid}` }));
  app.get('/', (_request, response) => {
    response.send('hello');
  });
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address() as AddressInfo;
  console.log(`Express on http://127.0.0.1:${port}, limit 5 per 10 s, store: ${client ? `Redis at ${process.env.REDIS_URL}` : 'memory'}\n`);

  let denied = 0;
  for (let i = 1; denied < 3; i++) {
    const response = await fetch(`http://127.0.0.1:${port}/`);
    const h = (name: string) => response.headers.get(name) ?? '-';
    const body = await response.text();
    console.log(
      `#${String(i).padStart(2)}  ${response.status}  X-RateLimit-Limit: ${h('x-ratelimit-limit')}  X-RateLimit-Remaining: ${h('x-ratelimit-remaining')}  ` +
        `X-RateLimit-Reset: ${h('x-ratelimit-reset')}${response.status === 429 ? `  Retry-After: ${h('retry-after')}  ${body}` : ''}`,
    );
    if (response.status === 429) denied++;
  }
  server.close();
  await client?.quit();
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
