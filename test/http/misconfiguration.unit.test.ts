/**
 * The footguns a first install met, caught with a coded warning or turned into the answer the
 * client deserves: a Fastify plugin loaded after the routes (`SWL_ROUTES_NOT_LIMITED`), a
 * numeric window in the wrong unit (`SWL_SHORT_DURATION`), one request counted twice by two
 * limiters (`SWL_COUNTED_TWICE`), a reset by request that finds the key `req.ip` would miss,
 * and a cost priced from the body that can never fit (a 429, not a 500). Real apps on real
 * sockets, MemoryStore: no Redis.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type NextFunction, type Request, type Response } from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
import request from 'supertest';
import { createLimiter, MemoryStore, type Store } from '../../src';
import { rateLimit } from '../../src/express';
import { rateLimitPlugin } from '../../src/fastify';
import { captureWarnings } from '../helpers/warnings';

const warnings = captureWarnings();
const store = (): Store => new MemoryStore({ sweepIntervalMs: 0 });

const servers: http.Server[] = [];
const fastifyApps: FastifyInstance[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => new Promise((resolve) => server.close(resolve))));
  await Promise.all(fastifyApps.splice(0).map((app) => app.close()));
});

/** Serves `app` on `host` (a dual-stack `::` makes an IPv4 client's address `::ffff:127.0.0.1`). */
async function listen(app: express.Express, host = '127.0.0.1'): Promise<request.Agent> {
  const server = http.createServer(app);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return request.agent(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
}

async function listenFastify(app: FastifyInstance, host = '127.0.0.1'): Promise<request.Agent> {
  fastifyApps.push(app);
  await app.listen({ port: 0, host });
  return request.agent(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}`);
}

async function statuses(send: () => request.Test, times: number): Promise<number[]> {
  const seen: number[] = [];
  for (let i = 0; i < times; i++) seen.push((await send()).status);
  return seen;
}

describe('a Fastify plugin that loaded after the routes (SWL_ROUTES_NOT_LIMITED)', () => {
  test('register not awaited before the routes: the routes are not limited, and the app says so when ready', async () => {
    const app = Fastify();
    void app.register(rateLimitPlugin, { store: store(), limit: 1, window: '1m' });
    app.get('/orders', async () => 'ok');
    const agent = await listenFastify(app);
    expect(warnings.codes()).toEqual(['SWL_ROUTES_NOT_LIMITED']);
    expect(warnings.list[0].message).toMatch(
      /2 route\(s\).*\/orders \(GET\); \/orders \(HEAD\).*await app\.register\(rateLimitPlugin, options\)/,
    );
    // What the warning is about: with limit 1, nothing is refused.
    expect(await statuses(() => agent.get('/orders'), 3)).toEqual([200, 200, 200]);
  });

  test('register after the routes: counted per method, the automatic HEAD route included', async () => {
    const app = Fastify();
    app.get('/a', async () => 'a');
    app.post('/b', async () => 'b');
    await app.register(rateLimitPlugin, { store: store(), limit: 1, window: '1m' });
    app.get('/limited', async () => 'ok');
    await app.ready();
    fastifyApps.push(app);
    expect(warnings.codes()).toEqual(['SWL_ROUTES_NOT_LIMITED']);
    // GET /a, its HEAD, POST /b; /limited (and its HEAD) has the hook.
    expect(warnings.list[0].message).toMatch(/but 3 route\(s\)/);
    expect(warnings.list[0].message).not.toMatch(/limited \(GET/);
  });

  test('register awaited first: the routes are limited, and nothing is said', async () => {
    const app = Fastify();
    await app.register(rateLimitPlugin, { store: store(), limit: 1, window: '1m' });
    app.get('/orders', async () => 'ok');
    app.route({ method: ['GET', 'PUT'], url: '/many', handler: async () => 'ok' });
    await app.register(async (child) => {
      child.get('/child', async () => 'ok');
    });
    const agent = await listenFastify(app);
    expect(await statuses(() => agent.get('/orders'), 2)).toEqual([200, 429]);
    expect(warnings.codes()).toEqual([]);
  });

  test('routes exempted with config.rateLimit: false are not reported, even grouped with others', async () => {
    const app = Fastify();
    await app.register(rateLimitPlugin, { store: store(), limit: 1, window: '1m' });
    app.get('/health', { config: { rateLimit: false } }, async () => 'ok');
    app.route({ method: ['GET', 'POST'], url: '/open', config: { rateLimit: false }, handler: async () => 'ok' });
    await app.ready();
    fastifyApps.push(app);
    expect(warnings.codes()).toEqual([]);
  });

  test('an exempt route does not hide a route registered before the plugin', async () => {
    const app = Fastify();
    app.post('/early', async () => 'ok');
    await app.register(rateLimitPlugin, { store: store(), limit: 1, window: '1m' });
    app.route({ method: ['GET', 'POST'], url: '/open', config: { rateLimit: false }, handler: async () => 'ok' });
    await app.ready();
    fastifyApps.push(app);
    expect(warnings.codes()).toEqual(['SWL_ROUTES_NOT_LIMITED']);
    expect(warnings.list[0].message).toMatch(/but 1 route\(s\).*\/early \(POST\)/);
  });

  test('global: false limits only the routes that ask, so routes without the hook are expected', async () => {
    const app = Fastify();
    app.get('/before', async () => 'ok');
    await app.register(rateLimitPlugin, { store: store(), global: false });
    await app.ready();
    fastifyApps.push(app);
    expect(warnings.codes()).toEqual([]);
  });
});

describe('a numeric window in the wrong unit (SWL_SHORT_DURATION)', () => {
  test('a number under 1000 warns once per limiter, option and value, naming both readings', async () => {
    const limiter = createLimiter({ store: store(), limit: 10, window: 60 });
    expect(warnings.codes()).toEqual(['SWL_SHORT_DURATION']);
    expect(warnings.list[0].message).toMatch(/window: 60 is read as 60 ms\. For 60 s write '60s' \(or 60000\).*'60ms'/);
    // The same value again, per call: this limiter has said it already.
    for (let i = 0; i < 3; i++) await limiter.check('x', { limit: 10, window: 60 });
    expect(warnings.codes()).toEqual(['SWL_SHORT_DURATION']);
    // Another value, and another limiter: each warns for itself, whatever warned before.
    await limiter.check('x', { limit: 10, window: 70 });
    createLimiter({ store: store(), limit: 10, window: 60 });
    expect(warnings.codes()).toEqual(['SWL_SHORT_DURATION', 'SWL_SHORT_DURATION', 'SWL_SHORT_DURATION']);
    expect(warnings.list[1].message).toMatch(/^window: 70 /);
  });

  test('blockFor is checked too; a string in ms, or a number of a second or more, says it on purpose', () => {
    createLimiter({ store: store(), limit: 10, window: '60ms', blockFor: '500ms' });
    createLimiter({ store: store(), limit: 10, window: 1_000, blockFor: 60_000 });
    createLimiter({ store: store(), limits: [{ limit: 10, window: '1s' }] });
    // An option whose name says milliseconds is taken at its word.
    createLimiter({ store: store(), concurrency: 2, leaseMs: 500 });
    expect(warnings.codes()).toEqual([]);
    createLimiter({ store: store(), limit: 10, window: '1m', blockFor: 30 });
    expect(warnings.codes()).toEqual(['SWL_SHORT_DURATION']);
    expect(warnings.list[0].message).toMatch(/^blockFor: 30 /);
  });

  test('a window given as a function of the request warns only of what it answers', () => {
    rateLimit({ store: store(), limit: 10, window: () => '1m' });
    rateLimit({ store: store(), limit: () => 10, window: '1m' });
    expect(warnings.codes()).toEqual([]);
  });

  test('a tier of limits with a short numeric window warns', () => {
    createLimiter({ store: store(), limits: [{ limit: 10, window: 1 }] });
    expect(warnings.codes()).toEqual(['SWL_SHORT_DURATION']);
  });
});

describe('one request counted twice (SWL_COUNTED_TWICE)', () => {
  test('Express: two middlewares with one store, prefix and limits double the cost, and the package says so', async () => {
    const shared = store();
    const app = express();
    app.use(rateLimit({ store: shared, limit: 4, window: '1m' }));
    app.get('/', rateLimit({ store: shared, limit: 4, window: '1m' }), (_req, res) => {
      res.send('ok');
    });
    const agent = await listen(app);
    expect(await statuses(() => agent.get('/'), 3)).toEqual([200, 200, 429]);
    expect(warnings.codes()).toEqual(['SWL_COUNTED_TWICE']);
    expect(warnings.list[0].message).toMatch(/'ip:127\.0\.0\.1' under the prefix 'rl'.*own prefix/);
  });

  test('Fastify: the plugin registered twice with one store and prefix', async () => {
    const shared = store();
    const app = Fastify();
    await app.register(rateLimitPlugin, { store: shared, limit: 4, window: '1m' });
    await app.register(rateLimitPlugin, { store: shared, limit: 4, window: '1m' });
    app.get('/', async () => 'ok');
    const agent = await listenFastify(app);
    expect(await statuses(() => agent.get('/'), 3)).toEqual([200, 200, 429]);
    expect(warnings.codes()).toEqual(['SWL_COUNTED_TWICE']);
  });

  test('Express: counted in the app and again in a mounted sub-app, which gives the request another prototype', async () => {
    const shared = store();
    const api = express();
    api.get('/', rateLimit({ store: shared, limit: 4, window: '1m' }), (_req, res) => {
      res.send('ok');
    });
    const app = express();
    app.use(rateLimit({ store: shared, limit: 4, window: '1m' }));
    app.use('/api', api);
    const agent = await listen(app);
    expect(await statuses(() => agent.get('/api'), 3)).toEqual([200, 200, 429]);
    expect(warnings.codes()).toEqual(['SWL_COUNTED_TWICE']);
  });

  test('own prefixes, or one limiter mounted once: nothing is said', async () => {
    const shared = store();
    const app = express();
    app.use(rateLimit({ store: shared, limit: 4, window: '1m', prefix: 'all' }));
    app.get('/', rateLimit({ store: shared, limit: 4, window: '1m', prefix: 'root' }), (_req, res) => {
      res.send('ok');
    });
    const agent = await listen(app);
    expect(await statuses(() => agent.get('/'), 4)).toEqual([200, 200, 200, 200]);
    expect(warnings.codes()).toEqual([]);
  });
});

describe('a reset by request finds the key the limiter counted', () => {
  /** A login limited to 3 attempts: a right password resets what the limiter counted for the request. */
  function expressLogin(resetBy: 'request' | 'req.ip') {
    const limit = rateLimit({ store: store(), limit: 3, window: '15m', prefix: 'login' });
    const app = express();
    const identifiers: string[] = [];
    app.post('/login', limit, async (req: Request, res: Response, next: NextFunction) => {
      try {
        identifiers.push(req.rateLimit?.identifier ?? 'none');
        if (req.headers['x-password'] === 'right') {
          if (resetBy === 'request') await limit.resetRequest(req);
          else await limit.limiter.reset(`ip:${req.ip}`);
          res.send('welcome');
        } else {
          res.status(401).send('wrong');
        }
      } catch (error) {
        next(error);
      }
    });
    return { app, identifiers };
  }

  test.each([['request'], ['req.ip']] as const)(
    'Express on a dual-stack socket (req.ip is ::ffff:127.0.0.1), reset by %s',
    async (resetBy) => {
      const { app, identifiers } = expressLogin(resetBy);
      const agent = await listen(app, '::');
      const wrong = () => agent.post('/login').set('x-password', 'wrong');
      expect(await statuses(wrong, 2)).toEqual([401, 401]);
      await agent.post('/login').set('x-password', 'right').expect(200);
      expect(identifiers).toEqual(['ip:127.0.0.1', 'ip:127.0.0.1', 'ip:127.0.0.1']);
      // Reset by request: three more attempts. Reset by 'ip:' + req.ip: a key nothing counted, so the client stays at its limit.
      expect(await statuses(wrong, 3)).toEqual(resetBy === 'request' ? [401, 401, 401] : [429, 429, 429]);
    },
  );

  test('Fastify: request.resetRateLimit() resets what the plugin counted, on a dual-stack socket', async () => {
    const app = Fastify();
    await app.register(rateLimitPlugin, { store: store(), limit: 3, window: '15m', prefix: 'login' });
    const identifiers: string[] = [];
    app.post('/login', async (req, reply) => {
      identifiers.push(req.rateLimit?.identifier ?? 'none');
      if (req.headers['x-password'] !== 'right') return reply.code(401).send('wrong');
      await req.resetRateLimit();
      return 'welcome';
    });
    const agent = await listenFastify(app, '::');
    const wrong = () => agent.post('/login').set('x-password', 'wrong');
    expect(await statuses(wrong, 2)).toEqual([401, 401]);
    await agent.post('/login').set('x-password', 'right').expect(200);
    expect(identifiers).toEqual(['ip:127.0.0.1', 'ip:127.0.0.1', 'ip:127.0.0.1']);
    expect(await statuses(wrong, 4)).toEqual([401, 401, 401, 429]);
  });

  test('Express: a reset by request in a mounted sub-app, after the app set res.locals, finds what the app counted', async () => {
    const limit = rateLimit({ store: store(), limit: 2, window: '1m' });
    const account = express();
    account.post('/login', async (req, res) => {
      res.locals.user = 'ada';
      if (req.headers['x-password'] === 'right') await limit.resetRequest(req);
      res.send('ok');
    });
    const app = express();
    app.use(limit);
    app.use('/account', account);
    const agent = await listen(app);
    await agent.post('/account/login').expect(200);
    await agent.post('/account/login').set('x-password', 'right').expect(200);
    // The right password forgot both attempts: two more pass, not none.
    expect(await statuses(() => agent.post('/account/login'), 3)).toEqual([200, 200, 429]);
  });

  test('a reset by request resets nothing a limiter did not count (a skipped request)', async () => {
    const limit = rateLimit({ store: store(), limit: 2, window: '1m', skip: (req) => req.headers['x-skip'] === '1' });
    const app = express();
    app.get('/', limit, async (req, res) => {
      if (req.headers['x-reset'] === '1') await limit.resetRequest(req);
      res.send('ok');
    });
    const agent = await listen(app);
    expect(await statuses(() => agent.get('/'), 2)).toEqual([200, 200]);
    await agent.get('/').set({ 'x-skip': '1', 'x-reset': '1' }).expect(200);
    await agent.get('/').expect(429);
  });
});

describe('a cost priced from the body that can never fit is refused as a denial, not a 500', () => {
  interface Order {
    items?: unknown[];
  }
  /** The docs' guarded cost: one unit per item, one for a request without items. */
  const perItem = (body: unknown): number => {
    const items = (body as Order | undefined)?.items;
    return Array.isArray(items) && items.length > 0 ? items.length : 1;
  };
  const items = (n: number) => ({ items: Array.from({ length: n }, (_, i) => i) });

  async function expressOrders(cost: (body: unknown) => number) {
    const errors: unknown[] = [];
    const limit = rateLimit({ store: store(), limit: 10, window: '1m', cost: (req) => cost(req.body) });
    const app = express();
    app.use(express.json());
    app.post('/orders', limit, (_req, res) => {
      res.send('ok');
    });
    app.use((error: unknown, _req: Request, res: Response, _next: NextFunction) => {
      errors.push(error);
      res.status(500).send('error');
    });
    return { agent: await listen(app), errors, limiter: limit.limiter };
  }

  async function fastifyOrders(cost: (body: unknown) => number) {
    const app = Fastify();
    await app.register(rateLimitPlugin, { store: store(), limit: 10, window: '1m', hook: 'preHandler', cost: (req) => cost(req.body) });
    const errors: unknown[] = [];
    app.setErrorHandler((error, _req, reply) => {
      errors.push(error);
      reply.code(500).send('error');
    });
    app.post('/orders', async () => 'ok');
    return { agent: await listenFastify(app), errors, limiter: app.rateLimiter };
  }

  test.each([
    ['Express', expressOrders],
    ['Fastify', fastifyOrders],
  ])('%s: 11 items against a limit of 10 is a 429 without Retry-After, and counts nothing', async (_name, start) => {
    const { agent, errors, limiter } = await start(perItem);
    const refused = await agent.post('/orders').send(items(11));
    expect(refused.status).toBe(429);
    expect(refused.headers['retry-after']).toBeUndefined();
    expect(refused.body).toEqual({ error: 'Too Many Requests', retryAfter: null });
    expect(errors).toEqual([]);
    expect((await limiter.peek('ip:127.0.0.1', { cost: 0 })).estimated).toBe(0);
    // No body is one unit, and what fits still fits.
    await agent.post('/orders').expect(200);
    await agent.post('/orders').send(items(9)).expect(200);
    await agent.post('/orders').send(items(1)).expect(429);
  });

  test.each([
    ['Express', expressOrders],
    ['Fastify', fastifyOrders],
  ])('%s: a cost that is not a non-negative integer stays an application error (SWL_INVALID_COST)', async (_name, start) => {
    for (const bad of [-1, 1.5, Number.NaN]) {
      const { agent, errors } = await start(() => bad);
      await agent.post('/orders').send(items(1)).expect(500);
      expect(errors).toEqual([expect.objectContaining({ code: 'SWL_INVALID_COST' })]);
    }
  });

  test('the core: a cost above the smallest limit is a denial that never ends, and counts nothing', async () => {
    const limiter = createLimiter({
      store: store(),
      limits: [
        { limit: 5, window: '1s' },
        { limit: 100, window: '1h' },
      ],
    });
    const decision = await limiter.check('user:1', { cost: 6 });
    expect(decision).toMatchObject({ allowed: false, counted: false, retryAfterMs: Number.POSITIVE_INFINITY });
    expect((await limiter.check('user:1', { cost: 5 })).allowed).toBe(true);
    await expect(limiter.check('user:1', { cost: -1 })).rejects.toMatchObject({ code: 'SWL_INVALID_COST' });
    // A fixed cost the app chose that can never fit is the app's mistake: refused at construction.
    expect(() => rateLimit({ store: store(), limit: 5, cost: 6 })).toThrow(expect.objectContaining({ code: 'SWL_INVALID_COST' }));
  });
});
