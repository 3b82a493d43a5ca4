/**
 * Fastify: the `hook` option (a check after body parsing can price a request by its body)
 * and routes that change only how a check runs (timeoutMs, denyCacheSize) sharing the
 * plugin's counts. Real Fastify over real sockets, real Redis, manual clock.
 */
import Fastify, { type FastifyInstance } from 'fastify';
import type { Redis } from 'ioredis';
import request from 'supertest';
import type { FastifyRateLimitOptions } from '../../src/fastify';
import { RedisStore, rateLimitPlugin } from '../../src/fastify';
import { keysMatching, manualClock, redisClient, uniquePrefix } from '../helpers/redis';

let client: Redis;
const apps: FastifyInstance[] = [];
beforeAll(() => {
  client = redisClient();
});
afterAll(async () => {
  await Promise.all(apps.map((app) => app.close()));
  await client.quit();
});

async function setup(options: FastifyRateLimitOptions = {}) {
  const clock = manualClock();
  const prefix = uniquePrefix('fyhook');
  const app = Fastify();
  apps.push(app);
  await app.register(rateLimitPlugin, {
    store: new RedisStore({ client }),
    limit: 10,
    window: '1m',
    prefix,
    clock: clock.now,
    identify: () => 'client',
    ...options,
  });
  return { app, prefix };
}

describe('hook option', () => {
  test("'preHandler' runs after body parsing, so cost can read request.body", async () => {
    const { app } = await setup({ hook: 'preHandler', cost: (req) => (req.body as { items?: unknown[] } | undefined)?.items?.length ?? 1 });
    app.post('/batch', async () => 'ok');
    await app.ready();
    const first = await request(app.server)
      .post('/batch')
      .send({ items: [1, 2, 3, 4, 5, 6] });
    expect(first.status).toBe(200);
    expect(first.headers['x-ratelimit-remaining']).toBe('4');
    const second = await request(app.server)
      .post('/batch')
      .send({ items: [1, 2, 3, 4, 5] });
    expect(second.status).toBe(429);
    const third = await request(app.server)
      .post('/batch')
      .send({ items: [1, 2, 3, 4] });
    expect(third.status).toBe(200);
    expect(third.headers['x-ratelimit-remaining']).toBe('0');
  });

  test("a route can choose its own hook; the default 'onRequest' answers before the body is read", async () => {
    const { app } = await setup({ limit: 1 });
    let parsed = 0;
    app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
      parsed++;
      done(null, JSON.parse(body as string));
    });
    app.post('/early', async () => 'ok');
    app.post('/late', { config: { rateLimit: { hook: 'preValidation', prefix: uniquePrefix('late'), limit: 1 } } }, async () => 'ok');
    await app.ready();
    expect((await request(app.server).post('/early').send({ a: 1 })).status).toBe(200);
    expect(parsed).toBe(1);
    expect((await request(app.server).post('/early').send({ a: 1 })).status).toBe(429);
    expect(parsed).toBe(1); // denied in onRequest: the body was never parsed
    expect((await request(app.server).post('/late').send({ a: 1 })).status).toBe(200);
    expect((await request(app.server).post('/late').send({ a: 1 })).status).toBe(429);
    expect(parsed).toBe(3); // preValidation: parsed, then denied
  });

  test('an unknown hook fails registration naming the option', async () => {
    const app = Fastify();
    apps.push(app);
    await expect(app.register(rateLimitPlugin, { hook: 'onSend' as never })).rejects.toThrow(/^hook:/);
    const other = Fastify();
    apps.push(other);
    await other.register(rateLimitPlugin, {});
    expect(() => other.get('/x', { config: { rateLimit: { hook: 'onResponse' as never } } }, async () => 'ok')).toThrow(/^hook:/);
  });
});

describe('routes that change only how a check runs', () => {
  test.each([
    ['timeoutMs', { timeoutMs: 100 }],
    ['denyCacheSize', { denyCacheSize: 0 }],
  ])('a route overriding only %s shares the plugin quota and keys', async (_name, override) => {
    const { app, prefix } = await setup({ limit: 3 });
    app.get('/plain', async () => 'ok');
    app.get('/tuned', { config: { rateLimit: override } }, async () => 'ok');
    await app.ready();
    expect((await request(app.server).get('/plain')).headers['x-ratelimit-remaining']).toBe('2');
    expect((await request(app.server).get('/tuned')).headers['x-ratelimit-remaining']).toBe('1');
    expect((await request(app.server).get('/plain')).headers['x-ratelimit-remaining']).toBe('0');
    expect((await request(app.server).get('/tuned')).status).toBe(429);
    expect(await keysMatching(client, `${prefix}*`)).toEqual([`${prefix}:client`]);
  });
});
