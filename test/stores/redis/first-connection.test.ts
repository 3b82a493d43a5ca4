/**
 * A store whose client is still making its first connection: a check made right after the client
 * is created (ioredis `new Redis(...)`, node-redis before `connect()` resolves) waits for the
 * connection, within the limiter's `timeoutMs`, and is answered. A client that does not connect
 * in time fails the check with `RateLimitTimeoutError` (SWL_TIMEOUT) at `timeoutMs`, and that
 * check is never sent later, when the client connects. Both clients, with and without their
 * offline queues, on real redis-servers: the run's, and one this file starts and stops.
 */
import express from 'express';
import { Redis } from 'ioredis';
import { createClient } from 'redis';
import request from 'supertest';
import { createLimiter, type Limiter, RateLimitTimeoutError, RedisStore, type RedisStoreClient, StoreUnavailableError } from '../../../src';
import { rateLimit } from '../../../src/express';
import { type RedisProcess, startRedis } from '../../../support/redis-server';
import { closeClient, redisUrl, uniquePrefix } from '../../helpers/redis';

/** How late a timer may fire on a loaded two-core machine (as in deadlines.unit.test.ts). */
const LATE_MS = 100;

interface Made {
  readonly client: RedisStoreClient;
  /** Resolves once the client is connected (node-redis: `connect()`, not awaited by the test). */
  readonly connected: Promise<unknown>;
}

/** Ways to make a client, each left connecting: the README's ioredis options, ioredis's defaults, node-redis with and without its offline queue. */
const CLIENTS: [string, (url: string) => Made][] = [
  [
    'ioredis, enableOfflineQueue: false',
    (url) => {
      const client = new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
      client.on('error', () => undefined);
      return { client, connected: new Promise((resolve) => client.once('ready', resolve)) };
    },
  ],
  [
    'ioredis, default options',
    (url) => {
      const client = new Redis(url);
      client.on('error', () => undefined);
      return { client, connected: new Promise((resolve) => client.once('ready', resolve)) };
    },
  ],
  [
    'node-redis, disableOfflineQueue: true',
    (url) => {
      const client = createClient({ url, disableOfflineQueue: true });
      client.on('error', () => undefined);
      return { client, connected: client.connect() };
    },
  ],
  [
    'node-redis, default options',
    (url) => {
      const client = createClient({ url });
      client.on('error', () => undefined);
      return { client, connected: client.connect() };
    },
  ],
];

const opened: RedisStoreClient[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map(closeClient));
});

function make(factory: (url: string) => Made, url: string): Made {
  const made = factory(url);
  opened.push(made.client);
  return made;
}

function limiterOn(client: RedisStoreClient, timeoutMs = 500): Limiter {
  return createLimiter({ store: new RedisStore({ client }), prefix: uniquePrefix('first'), limit: 5, window: '1m', timeoutMs });
}

describe.each(CLIENTS)('%s', (_name, factory) => {
  test('checks made while the client connects wait for it and are answered: counted, none failed', async () => {
    const { client, connected } = make(factory, redisUrl());
    const limiter = limiterOn(client);
    const decisions = await Promise.all(Array.from({ length: 6 }, () => limiter.check('u')));
    expect(decisions.map((decision) => decision.allowed)).toEqual([true, true, true, true, true, false]);
    await connected;
    expect(await limiter.peek('u', { cost: 0 })).toMatchObject({ estimated: 5 });
  });

  test('a settlement and a reset made while the client connects wait for it too', async () => {
    const first = make(factory, redisUrl());
    const limiter = limiterOn(first.client);
    const decision = await limiter.check('u');
    await first.connected;
    const second = make(factory, redisUrl());
    const again = createLimiter({ store: new RedisStore({ client: second.client }), prefix: limiter.prefix, limit: 5, window: '1m' });
    await again.refund('u', decision);
    expect(await limiter.peek('u', { cost: 0 })).toMatchObject({ estimated: 0 });
    await limiter.check('u');
    const third = make(factory, redisUrl());
    await createLimiter({ store: new RedisStore({ client: third.client }), prefix: limiter.prefix }).reset('u');
    expect(await limiter.peek('u', { cost: 0 })).toMatchObject({ estimated: 0 });
  });

  test("an app's first requests, made as the client connects, are limited, not failed open", async () => {
    const { client } = make(factory, redisUrl());
    const errors: unknown[] = [];
    const app = express();
    app.use(
      rateLimit({
        store: new RedisStore({ client }),
        prefix: uniquePrefix('app'),
        limit: 2,
        window: '1m',
        onError: (error) => errors.push(error),
      }),
    );
    app.get('/', (_req, res) => res.send('ok'));
    const statuses = await Promise.all(Array.from({ length: 3 }, () => request(app).get('/')));
    expect(statuses.map((response) => response.status).sort()).toEqual([200, 200, 429]);
    expect(errors).toEqual([]);
  });

  describe('a client that cannot connect in time', () => {
    let server: RedisProcess;
    beforeEach(async () => {
      server = await startRedis();
    });
    afterEach(() => server.stop());

    test('fails the check with RateLimitTimeoutError at timeoutMs; once connected, that check was never sent', async () => {
      await server.kill();
      const { client, connected } = make(factory, server.url);
      const limiter = limiterOn(client, 200);
      const started = Date.now();
      const error = await limiter.check('u').then(
        () => undefined,
        (rejection: unknown) => rejection,
      );
      const elapsed = Date.now() - started;
      expect(error).toBeInstanceOf(RateLimitTimeoutError);
      expect(error).toMatchObject({ code: 'SWL_TIMEOUT' });
      expect(elapsed).toBeGreaterThanOrEqual(199);
      expect(elapsed).toBeLessThan(200 + LATE_MS);

      await server.restart();
      await connected;
      // Its waiting stopped at the deadline: the connection sends nothing of it.
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(await limiter.peek('u', { cost: 0 })).toMatchObject({ estimated: 0 });
      expect(await limiter.check('u')).toMatchObject({ allowed: true, remaining: 4 });
    });
  });
});

test('a node-redis client whose connect() was never called fails at once, saying so', async () => {
  const client = createClient({ url: redisUrl() });
  const limiter = limiterOn(client);
  const started = Date.now();
  const error = await limiter.check('u').then(
    () => undefined,
    (rejection: unknown) => rejection,
  );
  expect(Date.now() - started).toBeLessThan(LATE_MS);
  expect(error).toBeInstanceOf(StoreUnavailableError);
  expect((error as Error).message).toMatch(/await client\.connect\(\)/);
});
