/**
 * The Fastify plugin on real Fastify 5 apps over real sockets (supertest against
 * `app.server`: `inject` needs an ESM-only dependency that jest on Node 20 cannot load),
 * counting in a real Redis, with time from a manual clock.
 */
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify';
import { Redis } from 'ioredis';
import request from 'supertest';
import type { FastifyRateLimitOptions } from '../../src/fastify';
import { type Decision, RedisStore, rateLimitPlugin } from '../../src/fastify';
import { freePort } from '../../support/redis-server';
import { manualClock, redisClient, uniquePrefix } from '../helpers/redis';

const WINDOW = 10_000;
const START = 1_700_000_000_000 - (1_700_000_000_000 % WINDOW); // a window boundary

let client: Redis;
const apps: FastifyInstance[] = [];
const deadClients: Redis[] = [];
beforeAll(() => {
  client = redisClient();
});
afterAll(async () => {
  for (const dead of deadClients) dead.disconnect();
  await Promise.all(apps.map((app) => app.close()));
  await client.quit();
});

/** An app with the plugin registered (one fixed client unless `identify` says otherwise) and a few routes. */
async function setup(options: FastifyRateLimitOptions = {}) {
  const clock = manualClock(START);
  const prefix = uniquePrefix('fy');
  const decisions: Decision[] = [];
  const app = Fastify();
  apps.push(app);
  await app.register(rateLimitPlugin, {
    store: new RedisStore({ client }),
    limit: 2,
    window: WINDOW,
    prefix,
    clock: clock.now,
    identify: () => 'client',
    onDecision: (decision) => decisions.push(decision),
    ...options,
  });
  const hits: string[] = [];
  const handler = async (req: FastifyRequest) => {
    hits.push(req.url);
    return { route: req.url };
  };
  return { app, clock, prefix, decisions, hits, handler };
}

/** GET over a real socket; the first call readies the app (routes are added before it). */
async function get(app: FastifyInstance, url: string, headers: Record<string, string> = {}) {
  await app.ready();
  const response = await request(app.server).get(url).set(headers);
  return { statusCode: response.status, headers: response.headers, body: response.text, json: () => JSON.parse(response.text) };
}

describe('global limiting', () => {
  test('every route is limited by default: headers, then 429 with Retry-After and the JSON body', async () => {
    const { app, clock, decisions, hits, handler } = await setup();
    app.get('/a', handler);
    app.get('/b', handler);

    const first = await get(app, '/a');
    expect(first.statusCode).toBe(200);
    expect(first.json()).toEqual({ route: '/a' });
    expect(first.headers['x-ratelimit-limit']).toBe('2');
    expect(first.headers['x-ratelimit-remaining']).toBe('1');
    // One unit counted: quota grows again once it has stopped weighing, two windows on.
    expect(first.headers['x-ratelimit-reset']).toBe(String((START + 2 * WINDOW) / 1000));
    // A different route counts against the same quota.
    const second = await get(app, '/b');
    expect(second.headers['x-ratelimit-remaining']).toBe('0');
    expect(second.headers['x-ratelimit-reset']).toBe(String((START + 15_000) / 1000));

    clock.set(START + 1_500);
    const denied = await get(app, '/a');
    expect(denied.statusCode).toBe(429);
    expect(decisions[2].retryAfterMs).toBe(13_500);
    expect(denied.headers['retry-after']).toBe('14');
    expect(denied.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(denied.body).toBe('{"error":"Too Many Requests","retryAfter":14}');
    expect(denied.json()).toEqual({ error: 'Too Many Requests', retryAfter: 14 });
    expect(denied.headers['x-ratelimit-remaining']).toBe('0');
    expect(hits).toEqual(['/a', '/b']);
  });

  test('the 429 goes through the reply: onSend and onResponse hooks see it', async () => {
    const { app, handler } = await setup({ limit: 1 });
    const sent: [number, unknown][] = [];
    const responded: number[] = [];
    app.addHook('onSend', async (_req, reply, payload) => {
      sent.push([reply.statusCode, payload]);
      return payload;
    });
    app.addHook('onResponse', async (_req, reply) => {
      responded.push(reply.statusCode);
    });
    app.get('/', handler);
    await get(app, '/');
    const denied = await get(app, '/');
    expect(denied.statusCode).toBe(429);
    expect(sent).toHaveLength(2);
    expect(sent[1][0]).toBe(429);
    expect(JSON.parse(sent[1][1] as string)).toEqual({ error: 'Too Many Requests', retryAfter: 20 });
    expect(responded).toEqual([200, 429]);
  });

  test('the default body is sent as ready JSON text: preSerialization hooks and the reply serializer see only a message object', async () => {
    for (const message of [undefined, { wait: 'a while' }]) {
      const { app, handler } = await setup({ limit: 1, message });
      const serialized: unknown[] = [];
      app.addHook('preSerialization', async (_req, reply, payload) => {
        if (reply.statusCode === 429) serialized.push(payload);
        return payload;
      });
      app.setReplySerializer((payload, statusCode) => JSON.stringify(statusCode === 429 ? { wrapped: payload } : payload));
      app.get('/', handler);
      await get(app, '/');
      const denied = await get(app, '/');
      expect(denied.statusCode).toBe(429);
      if (message === undefined) {
        expect(serialized).toEqual([]);
        expect(denied.body).toBe('{"error":"Too Many Requests","retryAfter":20}');
      } else {
        expect(serialized).toEqual([message]);
        expect(denied.body).toBe('{"wrapped":{"wait":"a while"}}');
      }
    }
  });

  test('an onSend hook can rewrite the 429 payload', async () => {
    const { app, handler } = await setup({ limit: 1 });
    app.addHook('onSend', async (_req, reply, payload) => (reply.statusCode === 429 ? '{"rewritten":true}' : payload));
    app.get('/', handler);
    await get(app, '/');
    expect((await get(app, '/')).json()).toEqual({ rewritten: true });
  });

  test('statusCode, string message (text) and function message', async () => {
    const text = await setup({ limit: 1, statusCode: 503, message: 'slow down' });
    text.app.get('/', text.handler);
    await get(text.app, '/');
    const deniedText = await get(text.app, '/');
    expect(deniedText.statusCode).toBe(503);
    expect(deniedText.headers['content-type']).toMatch(/^text\/plain/);
    expect(deniedText.body).toBe('slow down');

    const fn = await setup({ limit: 1, message: (req, decision) => ({ url: req.url, wait: decision.retryAfterMs }) });
    fn.app.get('/x', fn.handler);
    await get(fn.app, '/x');
    const deniedFn = await get(fn.app, '/x');
    expect(deniedFn.statusCode).toBe(429);
    expect(deniedFn.json()).toEqual({ url: '/x', wait: 20_000 });
  });

  test("header styles: 'ietf' with several limits", async () => {
    const { app, handler } = await setup({
      limit: undefined,
      window: undefined,
      limits: [
        { limit: 10, window: '1s' },
        { limit: 3, window: '1m' },
      ],
      headers: 'ietf',
    });
    app.get('/', handler);
    const response = await get(app, '/');
    expect(response.headers['ratelimit-policy']).toBe('"1s";q=10;w=1, "1m";q=3;w=60');
    // One unit in each tier weighs until the end of the window after the current one.
    const minuteReset = (Math.floor(START / 60_000) + 2) * 60_000;
    expect(response.headers.ratelimit).toBe(`"1s";r=9;t=2, "1m";r=2;t=${(minuteReset - START) / 1000}`);
    expect(response.headers['x-ratelimit-limit']).toBeUndefined();
  });

  test('routes in a child context registered after the plugin are limited', async () => {
    const { app, handler } = await setup({ limit: 1 });
    await app.register(
      async (child) => {
        child.get('/child', handler);
      },
      { prefix: '/v1' },
    );
    const allowed = await get(app, '/v1/child');
    expect(allowed.statusCode).toBe(200);
    expect(allowed.headers['x-ratelimit-limit']).toBe('1');
    expect((await get(app, '/v1/child')).statusCode).toBe(429);
  });

  test('app.rateLimiter is the plugin limiter: its keys, reset() and peek()', async () => {
    const { app, prefix, handler } = await setup({ limit: 1 });
    app.get('/', handler);
    expect(app.rateLimiter.keyFor('client')).toBe(`${prefix}:client`);
    await get(app, '/');
    expect(await client.exists(`${prefix}:client`)).toBe(1);
    expect((await get(app, '/')).statusCode).toBe(429);
    await app.rateLimiter.reset('client');
    expect((await get(app, '/')).statusCode).toBe(200);
    expect((await app.rateLimiter.peek('client', { cost: 0 })).estimated).toBe(1);
  });

  test('skip, cost and callback errors', async () => {
    const { app, handler } = await setup({
      limit: 5,
      skip: (req) => req.url === '/health',
      cost: (req) => {
        if (req.headers['x-cost'] === 'boom') throw new Error('cost broke');
        return Number(req.headers['x-cost'] ?? 1);
      },
    });
    app.get('/', handler);
    app.get('/health', handler);
    const health = await get(app, '/health', { 'x-cost': '5' });
    expect(health.statusCode).toBe(200);
    expect(health.headers['x-ratelimit-limit']).toBeUndefined();
    expect((await get(app, '/', { 'x-cost': '3' })).headers['x-ratelimit-remaining']).toBe('2');
    expect((await get(app, '/', { 'x-cost': '3' })).statusCode).toBe(429);
    // A throwing callback becomes a 500 through Fastify's error handling, not a crash.
    const broken = await get(app, '/', { 'x-cost': 'boom' });
    expect(broken.statusCode).toBe(500);
    expect(broken.json().message).toBe('cost broke');
    expect((await get(app, '/', { 'x-cost': '2' })).statusCode).toBe(200);
  });
});

describe('per-route config.rateLimit', () => {
  test('a route with its own limit counts in its own key space, apart from the global quota', async () => {
    const { app, prefix, handler } = await setup({ limit: 2 });
    app.get('/global', handler);
    app.get('/strict', { config: { rateLimit: { limit: 1 } } }, handler);

    const strict = await get(app, '/strict');
    expect(strict.statusCode).toBe(200);
    expect(strict.headers['x-ratelimit-limit']).toBe('1');
    expect((await get(app, '/strict')).statusCode).toBe(429);
    expect(await client.exists(`${prefix}:GET:/strict:client`)).toBe(1);
    // /strict consumed nothing of the global quota...
    expect((await get(app, '/global')).headers['x-ratelimit-remaining']).toBe('1');
    expect((await get(app, '/global')).headers['x-ratelimit-remaining']).toBe('0');
    expect((await get(app, '/global')).statusCode).toBe(429);
    expect(await client.exists(`${prefix}:client`)).toBe(1);
    expect((await app.rateLimiter.peek('client', { cost: 0 })).estimated).toBe(2);
  });

  test('the global quota being used up does not touch a route with its own limit', async () => {
    const { app, handler } = await setup({ limit: 1 });
    app.get('/global', handler);
    app.get('/own', { config: { rateLimit: { limit: 3 } } }, handler);
    await get(app, '/global');
    expect((await get(app, '/global')).statusCode).toBe(429);
    const own = await get(app, '/own');
    expect(own.statusCode).toBe(200);
    expect(own.headers['x-ratelimit-remaining']).toBe('2');
  });

  test('window, prefix, cost and statusCode overrides', async () => {
    const { app, handler } = await setup({ limit: 2 });
    app.get('/global', handler);
    app.get('/window', { config: { rateLimit: { window: 1_000 } } }, handler);
    const customPrefix = uniquePrefix('route');
    app.get('/prefixed', { config: { rateLimit: { prefix: customPrefix } } }, handler);
    app.get('/costly', { config: { rateLimit: { cost: 2 } } }, handler);
    app.get('/teapot', { config: { rateLimit: { limit: 1, statusCode: 418 } } }, handler);

    // window: 2 per second, in its own key space.
    await get(app, '/window');
    await get(app, '/window');
    const windowDenied = await get(app, '/window');
    expect(windowDenied.statusCode).toBe(429);
    // 2 in the 1-second window at its start: the next fits 1.5 s later.
    expect(windowDenied.headers['retry-after']).toBe('2');
    // prefix: exactly that prefix.
    await get(app, '/prefixed');
    expect(await client.exists(`${customPrefix}:client`)).toBe(1);
    // statusCode.
    await get(app, '/teapot');
    expect((await get(app, '/teapot')).statusCode).toBe(418);
    // cost alone does not change the counting: it spends the global quota, 2 at a time.
    expect((await get(app, '/costly')).headers['x-ratelimit-remaining']).toBe('0');
    expect((await get(app, '/global')).statusCode).toBe(429);
  });

  test('a route overriding only identify shares the plugin counts', async () => {
    const { app, handler } = await setup({ limit: 3 });
    app.get('/global', handler);
    app.get('/by-header', { config: { rateLimit: { identify: (req) => req.headers['x-id'] as string } } }, handler);
    expect((await get(app, '/by-header', { 'x-id': 'client' })).headers['x-ratelimit-remaining']).toBe('2');
    expect((await get(app, '/global')).headers['x-ratelimit-remaining']).toBe('1');
    expect((await get(app, '/by-header', { 'x-id': 'client' })).headers['x-ratelimit-remaining']).toBe('0');
    expect((await get(app, '/global')).statusCode).toBe(429);
    // Someone else, identified by the route's own function, has a quota of their own.
    expect((await get(app, '/by-header', { 'x-id': 'other' })).statusCode).toBe(200);
  });

  test('options that do not change the counting (failMode, headers, statusCode, message) keep the plugin counts', async () => {
    const { app, prefix, handler } = await setup({ limit: 3 });
    app.get('/global', handler);
    app.get('/tuned', { config: { rateLimit: { failMode: 'closed', headers: 'draft-7', statusCode: 503, message: 'busy' } } }, handler);
    expect((await get(app, '/tuned')).headers.ratelimit).toBe(`limit=3, remaining=2, reset=${(2 * WINDOW) / 1000}`);
    expect((await get(app, '/global')).headers['x-ratelimit-remaining']).toBe('1');
    expect(await client.exists(`${prefix}:GET:/tuned:client`)).toBe(0);
  });

  test("Fastify's automatic HEAD route counts with its GET route: HEAD does not get a second quota", async () => {
    const { app, handler, hits } = await setup({ limit: 10 });
    app.get('/search', { config: { rateLimit: { limit: 2 } } }, handler);
    await app.ready();
    const head = () => request(app.server).head('/search');
    expect((await get(app, '/search')).statusCode).toBe(200);
    const headed = await head();
    expect(headed.status).toBe(200);
    expect(headed.headers['x-ratelimit-remaining']).toBe('0');
    expect((await head()).status).toBe(429);
    expect((await get(app, '/search')).statusCode).toBe(429);
    expect(hits).toEqual(['/search', '/search']);
  });

  test('config.rateLimit: false exempts a route', async () => {
    const { app, handler, hits } = await setup({ limit: 1 });
    app.get('/global', handler);
    app.get('/free', { config: { rateLimit: false } }, handler);
    await get(app, '/global');
    expect((await get(app, '/global')).statusCode).toBe(429);
    for (let i = 0; i < 3; i++) {
      const free = await get(app, '/free');
      expect(free.statusCode).toBe(200);
      expect(free.headers['x-ratelimit-limit']).toBeUndefined();
    }
    expect(hits.filter((url) => url === '/free')).toHaveLength(3);
  });

  test('global: false limits only routes with a config.rateLimit object', async () => {
    const { app, prefix, handler } = await setup({ limit: 1, global: false });
    app.get('/open', handler);
    app.get('/limited', { config: { rateLimit: {} } }, handler);
    app.get('/own', { config: { rateLimit: { limit: 2 } } }, handler);
    for (let i = 0; i < 3; i++) {
      const open = await get(app, '/open');
      expect(open.statusCode).toBe(200);
      expect(open.headers['x-ratelimit-limit']).toBeUndefined();
    }
    expect((await get(app, '/limited')).headers['x-ratelimit-limit']).toBe('1');
    expect((await get(app, '/limited')).statusCode).toBe(429);
    // An empty config uses the plugin's settings and key space.
    expect(await client.exists(`${prefix}:client`)).toBe(1);
    expect((await get(app, '/own')).headers['x-ratelimit-limit']).toBe('2');
  });

  test('invalid route config throws at route registration, naming the option', async () => {
    const { app, handler } = await setup();
    expect(() => app.get('/typo', { config: { rateLimit: { limt: 5 } as never } }, handler)).toThrow(
      /^limt: unknown option for config\.rateLimit of GET \/typo/,
    );
    expect(() => app.get('/status', { config: { rateLimit: { statusCode: 200 } } }, handler)).toThrow(/^statusCode: /);
    expect(() => app.get('/limit', { config: { rateLimit: { limit: -1 } } }, handler)).toThrow(/^limit: /);
    expect(() => app.get('/window', { config: { rateLimit: { window: 'soon' } } }, handler)).toThrow(/^window: /);
    expect(() => app.get('/cost', { config: { rateLimit: { cost: 3 } } }, handler)).toThrow(/^cost: /);
    expect(() => app.get('/global', { config: { rateLimit: { global: false } as never } }, handler)).toThrow(/^global: unknown option/);
    expect(() => app.get('/number', { config: { rateLimit: 5 as never } }, handler)).toThrow(/^config\.rateLimit of GET \/number: /);
    expect(() => app.get('/null', { config: { rateLimit: null as never } }, handler)).toThrow(/config\.rateLimit/);
  });

  test('invalid route config inside a plugin fails the app at ready()', async () => {
    const { app, handler } = await setup();
    app.register(async (child) => {
      child.get('/typo', { config: { rateLimit: { limt: 5 } as never } }, handler);
    });
    await expect(app.ready()).rejects.toThrow(/^limt: /);
  });
});

describe('app.rateLimitHook(): a hook for what no route reaches', () => {
  test('the not-found handler with its preHandler: 404s count against the plugin quota, then 429', async () => {
    const { app, prefix, handler } = await setup({ limit: 3 });
    app.get('/known', handler);
    let notFound = 0;
    app.setNotFoundHandler({ preHandler: app.rateLimitHook() }, (_request, reply) => {
      notFound++;
      reply.code(404).send({ error: 'Not Found' });
    });
    expect((await get(app, '/known')).statusCode).toBe(200);
    const guess = await get(app, '/admin');
    expect(guess.statusCode).toBe(404);
    expect(guess.headers['x-ratelimit-remaining']).toBe('1');
    expect((await get(app, '/wp-login.php')).statusCode).toBe(404);
    const refused = await get(app, '/.env');
    expect(refused.statusCode).toBe(429);
    expect(refused.headers['retry-after']).toBeDefined();
    expect(notFound).toBe(2);
    expect((await get(app, '/known')).statusCode).toBe(429);
    expect(await client.exists(`${prefix}:client`)).toBe(1);
  });

  test('with counting options and a prefix of its own, a hook counts apart from the plugin', async () => {
    const { app, prefix, handler } = await setup({ limit: 1 });
    await app.register(async (child) => {
      child.addHook('onRequest', app.rateLimitHook({ limit: 2, prefix: `${prefix}-child` }));
      child.get('/child', { config: { rateLimit: false } }, handler);
    });
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await get(app, '/child')).statusCode);
    expect(statuses).toEqual([200, 200, 429]);
    expect(await client.exists(`${prefix}-child:client`)).toBe(1);
    expect(await client.exists(`${prefix}:client`)).toBe(0);
  });

  test('bad options throw when the hook is made, naming the option', async () => {
    const { app } = await setup();
    expect(() => app.rateLimitHook({ limit: 5 })).toThrow(
      expect.objectContaining({ code: 'SWL_CONFLICTING_OPTIONS', message: expect.stringMatching(/^rateLimitHook\(\): .*limit.*prefix/) }),
    );
    expect(() => app.rateLimitHook({ hook: 'preHandler' } as never)).toThrow(expect.objectContaining({ code: 'SWL_UNKNOWN_OPTION' }));
    expect(() => app.rateLimitHook({ limit: 0.5, prefix: 'x' })).toThrow(expect.objectContaining({ code: 'SWL_INVALID_LIMIT' }));
  });
});

describe('Redis down', () => {
  async function deadStore() {
    // disconnectTimeout: on disconnect ioredis 6 arms a timer for a refused stream that never
    // closes again; keep it short so jest can exit promptly.
    const dead = new Redis({ host: '127.0.0.1', port: await freePort(), enableOfflineQueue: false, disconnectTimeout: 10 });
    dead.on('error', () => {});
    deadClients.push(dead);
    return new RedisStore({ client: dead });
  }

  test('fails open by default with onError, 503 with failMode closed', async () => {
    const onError = jest.fn();
    const open = await setup({ store: await deadStore(), onError, timeoutMs: 100 });
    open.app.get('/', open.handler);
    const passed = await get(open.app, '/');
    expect(passed.statusCode).toBe(200);
    expect(passed.headers['x-ratelimit-limit']).toBeUndefined();
    expect(onError).toHaveBeenCalledTimes(1);
    expect(onError.mock.calls[0][1].url).toBe('/');

    const closedOnError = jest.fn();
    const closed = await setup({ store: await deadStore(), failMode: 'closed', timeoutMs: 100, onError: closedOnError });
    closed.app.get('/', closed.handler);
    const refused = await get(closed.app, '/');
    expect(refused.statusCode).toBe(503);
    expect(closedOnError).toHaveBeenCalledTimes(1);
    expect(refused.json()).toEqual({ error: 'Service Unavailable' });
    expect(closed.hits).toEqual([]);
  });

  test('a route with a lazily connecting client never waits longer than timeoutMs', async () => {
    const lazy = new Redis({ host: '127.0.0.1', port: await freePort(), lazyConnect: true, disconnectTimeout: 10 });
    lazy.on('error', () => {});
    deadClients.push(lazy);
    {
      const { app, handler } = await setup({ limit: 5 });
      app.get(
        '/slow',
        { config: { rateLimit: { store: new RedisStore({ client: lazy }), timeoutMs: 150, failMode: 'closed', onError: () => {} } } },
        handler,
      );
      const started = Date.now();
      expect((await get(app, '/slow')).statusCode).toBe(503);
      expect(Date.now() - started).toBeLessThan(150 + 350);
    }
  });
});
