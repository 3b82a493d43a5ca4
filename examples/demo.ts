/**
 * `npm run demo`: starts an Express app limited to 5 requests per 10 seconds on a free
 * port, sends requests at it until the 429s appear, prints each answer with its
 * rate-limit headers, and exits. Uses Redis when REDIS_URL is set, memory otherwise.
 */
import type { AddressInfo } from 'node:net';
import express from 'express';
import { Redis } from 'ioredis';
import { byIp, MemoryStore, RedisStore, rateLimit } from '../src/express';

/** A ready ioredis client of `url`, or a one-line reason why there is none within two seconds. */
async function connect(url: string): Promise<Redis> {
  // No reconnection: the demo either has Redis now or says why it has not.
  const client = new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 1, retryStrategy: () => null, lazyConnect: true });
  let cause: unknown;
  client.on('error', (error: unknown) => {
    cause ??= error; // the first failure is reported once, below
  });
  const timeout = setTimeout(() => client.disconnect(), 2_000);
  try {
    await client.connect();
    return client;
  } catch (error) {
    client.disconnect();
    const reason = (cause ?? error) instanceof Error ? ((cause ?? error) as Error).message : String(cause ?? error);
    throw new Error(`cannot reach Redis at ${url} (${reason}): start redis-server, or unset REDIS_URL to use memory`);
  } finally {
    clearTimeout(timeout);
  }
}

async function main(): Promise<void> {
  const client = process.env.REDIS_URL ? await connect(process.env.REDIS_URL) : undefined;
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

main().catch((error: unknown) => {
  console.error(`demo: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = 1;
});
