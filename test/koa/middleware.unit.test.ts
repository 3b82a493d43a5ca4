/**
 * The Koa middleware, beyond the shared scenarios of test/http/: app-wide and per-route use with
 * @koa/router, `ctx.state.rateLimit`, the 429 with an exact `Retry-After`, the 503 of
 * `failMode: 'closed'`, errors into Koa's error handling, `resetRequest`, and identification
 * through Koa's own proxy settings (`app.proxy`, `proxyIpHeader`, `maxIpsCount`) with the
 * warnings of a setting that defeats the limit. Real sockets, MemoryStore, a manual clock.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Router from '@koa/router';
import Koa from 'koa';
import request from 'supertest';
import { type Decision, MemoryStore, OptionError, type Store } from '../../src';
import { byApiKey, byIp, type KoaRateLimitOptions, type RateLimitState, rateLimit } from '../../src/koa';
import { captureWarnings } from '../helpers/warnings';

const START = 1_800_000_000_000;
let now = START;
const clock = () => now;

beforeEach(() => {
  now = START;
});

const servers: http.Server[] = [];
afterEach(async () => {
  await Promise.all(
    servers.splice(0).map(
      (server) =>
        new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        }),
    ),
  );
});

async function listen(app: Koa<RateLimitState>): Promise<request.Agent> {
  const server = http.createServer(app.callback());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(server);
  return request.agent(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
}

describe('rateLimit() as app middleware', () => {
  test('headers on allowed requests, ctx.state.rateLimit, an exact Retry-After and the JSON body on the 429', async () => {
    const app = new Koa<RateLimitState>();
    app.use(rateLimit({ store: new MemoryStore(), clock, limit: 2, window: '10s' }));
    app.use((ctx) => {
      ctx.body = { remaining: ctx.state.rateLimit?.remaining, identifier: ctx.state.rateLimit?.identifier };
    });
    const agent = await listen(app);

    const first = await agent.get('/');
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ remaining: 1, identifier: 'ip:127.0.0.1' });
    expect(first.headers['x-ratelimit-limit']).toBe('2');
    expect(first.headers['x-ratelimit-remaining']).toBe('1');
    expect((await agent.get('/')).status).toBe(200);

    now += 2_500;
    const denied = await agent.get('/');
    expect(denied.status).toBe(429);
    // Sliding window: the window rolls over in 7.5 s; its two counts then weigh 2 x (1 - t/10 s),
    // room for one more at t = 5 s: 12.5 s from now, sent rounded up.
    expect(denied.headers['retry-after']).toBe('13');
    expect(denied.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(denied.body).toEqual({ error: 'Too Many Requests', retryAfter: 13 });
    expect(denied.headers['x-ratelimit-remaining']).toBe('0');

    now += 12_499;
    expect((await agent.get('/')).status).toBe(429);
    now += 1;
    expect((await agent.get('/')).status).toBe(200);
  });

  test('the middleware after a denial does not run, and one before it sees the 429 the limiter set', async () => {
    const seen: number[] = [];
    let handled = 0;
    const app = new Koa<RateLimitState>();
    app.use(async (ctx, next) => {
      await next();
      seen.push(ctx.status);
    });
    app.use(rateLimit({ store: new MemoryStore(), clock, limit: 1, window: '1m' }));
    app.use((ctx) => {
      handled++;
      ctx.body = 'ok';
    });
    const agent = await listen(app);
    await agent.get('/');
    await agent.get('/');
    expect(seen).toEqual([200, 429]);
    expect(handled).toBe(1);
  });

  test('a message of text, an object message, and a status of your own', async () => {
    const app = new Koa<RateLimitState>();
    const router = new Router<RateLimitState>();
    const store = new MemoryStore();
    router.get(
      '/text',
      rateLimit({ store, clock, limit: 1, window: '1m', prefix: 'text', message: 'slow down', statusCode: 503 }),
      (ctx) => {
        ctx.body = 'ok';
      },
    );
    router.get('/object', rateLimit({ store, clock, limit: 1, window: '1m', prefix: 'object', message: { slow: true } }), (ctx) => {
      ctx.body = 'ok';
    });
    app.use(router.routes());
    const agent = await listen(app);
    await agent.get('/text');
    const text = await agent.get('/text');
    expect(text.status).toBe(503);
    expect(text.text).toBe('slow down');
    expect(text.headers['content-type']).toBe('text/plain; charset=utf-8');
    // Room for one more once the count of this window weighs nothing: at the end of the next one.
    expect(text.headers['retry-after']).toBe('120');
    await agent.get('/object');
    const object = await agent.get('/object');
    expect(object.status).toBe(429);
    expect(object.body).toEqual({ slow: true });
    expect(object.headers['content-type']).toBe('application/json; charset=utf-8');
  });

  test("failMode 'closed' answers 503 while the store fails; 'open' lets the request through and onError hears it", async () => {
    const failing: Store = {
      needsTimeout: false,
      check: () => Promise.reject(new Error('down')),
      settle: () => Promise.reject(new Error('down')),
      reset: () => Promise.reject(new Error('down')),
    };
    const errors: unknown[] = [];
    const app = new Koa<RateLimitState>();
    const router = new Router<RateLimitState>();
    const ok = (ctx: Koa.Context) => {
      ctx.body = `ok ${ctx.state.rateLimit === undefined}`;
    };
    router.get('/closed', rateLimit({ store: failing, failMode: 'closed', onError: (error) => errors.push(error) }), ok);
    router.get('/open', rateLimit({ store: failing, onError: (error) => errors.push(error) }), ok);
    app.use(router.routes());
    const agent = await listen(app);
    const closed = await agent.get('/closed');
    expect(closed.status).toBe(503);
    expect(closed.body).toEqual({ error: 'Service Unavailable' });
    expect((await agent.get('/open')).text).toBe('ok true');
    expect(errors.map((error) => (error as Error).message)).toEqual(['down', 'down']);
  });

  test("a function of yours that throws goes to Koa's error handling and to onError; the handler does not run", async () => {
    const reported: unknown[] = [];
    const caught: unknown[] = [];
    let handled = 0;
    const app = new Koa<RateLimitState>();
    app.use(async (ctx, next) => {
      try {
        await next();
      } catch (error) {
        caught.push(error);
        ctx.status = 500;
        ctx.body = 'caught';
      }
    });
    app.use(
      rateLimit({
        store: new MemoryStore(),
        identify: async () => {
          throw new Error('no session store');
        },
        onError: (error) => reported.push(error),
      }),
    );
    app.use((ctx) => {
      handled++;
      ctx.body = 'ok';
    });
    const agent = await listen(app);
    const response = await agent.get('/');
    expect([response.status, response.text]).toEqual([500, 'caught']);
    expect((caught[0] as Error).message).toBe('no session store');
    expect(reported).toEqual(caught);
    expect(handled).toBe(0);
  });

  test('invalid options throw at construction, naming the option', () => {
    expect(() => rateLimit({ limt: 5 } as never)).toThrow(expect.objectContaining({ code: 'SWL_UNKNOWN_OPTION' }));
    expect(() => rateLimit({ handler: () => undefined } as never)).toThrow(/^handler: unknown option for rateLimit/);
    expect(() => rateLimit({ failMode: 'maybe' as never })).toThrow(OptionError);
  });
});

describe('per route with @koa/router', () => {
  test('a route of its own limit in its own key space; the other routes are not limited by it', async () => {
    const store = new MemoryStore();
    const login = rateLimit({ store, clock, limit: 2, window: '1m', prefix: 'login' });
    const app = new Koa<RateLimitState>();
    const router = new Router<RateLimitState>();
    router.post('/login', login, (ctx) => {
      ctx.body = `welcome, ${ctx.state.rateLimit?.remaining} left`;
    });
    router.get('/free', (ctx) => {
      ctx.body = `free ${ctx.state.rateLimit === undefined}`;
    });
    app.use(router.routes());
    const agent = await listen(app);
    expect((await agent.post('/login')).text).toBe('welcome, 1 left');
    expect((await agent.post('/login')).text).toBe('welcome, 0 left');
    const denied = await agent.post('/login');
    expect(denied.status).toBe(429);
    // Two counts at the start of a 60 s window weigh 2 x (1 - t/60 s) in the next: room for one at t = 30 s.
    expect(denied.headers['retry-after']).toBe('90');
    expect((await agent.get('/free')).text).toBe('free true');
    expect((await login.limiter.peek('ip:127.0.0.1', { cost: 0 })).estimated).toBe(2);
  });

  test('router.use limits every route of a router; an app-wide limiter and a route limiter both count', async () => {
    const store = new MemoryStore();
    const everywhere = rateLimit({ store, clock, limit: 10, window: '1m', prefix: 'app' });
    const api = rateLimit({ store, clock, limit: 1, window: '1m', prefix: 'api' });
    const app = new Koa<RateLimitState>();
    app.use(everywhere);
    const router = new Router<RateLimitState>({ prefix: '/api' });
    router.use(api);
    router.get('/items', (ctx) => {
      ctx.body = 'items';
    });
    router.get('/users', (ctx) => {
      ctx.body = 'users';
    });
    app.use(router.routes());
    app.use((ctx) => {
      ctx.body = 'home';
    });
    const agent = await listen(app);
    expect((await agent.get('/api/items')).status).toBe(200);
    const denied = await agent.get('/api/users');
    expect(denied.status).toBe(429);
    // The inner limiter's headers: it decided.
    expect(denied.headers['x-ratelimit-limit']).toBe('1');
    expect((await agent.get('/')).text).toBe('home');
    expect((await everywhere.limiter.peek('ip:127.0.0.1', { cost: 0 })).estimated).toBe(3);
  });

  test('resetRequest forgets what the middleware counted for the request, e.g. after a successful login', async () => {
    const login = rateLimit({ store: new MemoryStore(), clock, limit: 2, window: '1m', prefix: 'login' });
    const app = new Koa<RateLimitState>();
    const router = new Router<RateLimitState>();
    router.post('/login', login, async (ctx) => {
      if (ctx.get('x-password') === 'right') await login.resetRequest(ctx);
      ctx.body = 'ok';
    });
    app.use(router.routes());
    const agent = await listen(app);
    await agent.post('/login');
    expect((await login.limiter.peek('ip:127.0.0.1', { cost: 0 })).estimated).toBe(1);
    await agent.post('/login').set('x-password', 'right');
    expect((await login.limiter.peek('ip:127.0.0.1', { cost: 0 })).estimated).toBe(0);
  });
});

describe("identification through Koa's proxy settings", () => {
  const XFF = '198.51.100.7, 203.0.113.1';
  const warnings = captureWarnings();

  /** The identifier of one request to an app with `settings`, and the warning codes it raised. */
  async function identified(
    settings: { proxy?: boolean; proxyIpHeader?: string; maxIpsCount?: number },
    headers: Record<string, string>,
    identify?: KoaRateLimitOptions['identify'],
  ): Promise<string> {
    const decisions: Decision[] = [];
    const app = new Koa<RateLimitState>(settings);
    app.use(rateLimit({ store: new MemoryStore(), identify, onDecision: (decision) => decisions.push(decision) }));
    app.use((ctx) => {
      ctx.body = 'ok';
    });
    const agent = await listen(app);
    expect((await agent.get('/').set(headers)).status).toBe(200);
    return decisions[0].identifier;
  }

  test("app.proxy off: the connection address; X-Forwarded-For is never read, and warns naming Koa's setting", async () => {
    expect(await identified({}, { 'x-forwarded-for': XFF })).toBe('ip:127.0.0.1');
    expect(warnings.codes()).toEqual(['SWL_UNTRUSTED_FORWARDED']);
    expect(warnings.list[0].message).toContain("Koa's 'proxy' (with 'maxIpsCount')");
  });

  test('app.proxy off with a proxyIpHeader of its own: that header warns too, and is not read', async () => {
    expect(await identified({ proxyIpHeader: 'X-Real-IP' }, { 'x-real-ip': '198.51.100.7' })).toBe('ip:127.0.0.1');
    expect(warnings.codes()).toEqual(['SWL_UNTRUSTED_FORWARDED']);
  });

  test('app.proxy with maxIpsCount 1: the last X-Forwarded-For address (what the one proxy saw); no warning', async () => {
    expect(await identified({ proxy: true, maxIpsCount: 1 }, { 'x-forwarded-for': XFF })).toBe('ip:203.0.113.1');
    expect(await identified({ proxy: true, maxIpsCount: 2 }, { 'x-forwarded-for': XFF })).toBe('ip:198.51.100.7');
    expect(await identified({ proxy: true, maxIpsCount: 1 }, {})).toBe('ip:127.0.0.1');
    expect(warnings.codes()).toEqual([]);
  });

  test('app.proxy with proxyIpHeader: the address in that header, masked as IPv6 is', async () => {
    const settings = { proxy: true, proxyIpHeader: 'X-Real-IP', maxIpsCount: 1 };
    expect(await identified(settings, { 'x-real-ip': '198.51.100.7', 'x-forwarded-for': '192.0.2.1' })).toBe('ip:198.51.100.7');
    expect(await identified(settings, { 'x-real-ip': '2001:db8:1:2:3::9' })).toBe('ip:2001:db8:1:0::/56');
    expect(warnings.codes()).toEqual([]);
  });

  test('app.proxy without maxIpsCount trusts every hop: SWL_TRUST_ALL_PROXIES once, naming maxIpsCount', async () => {
    // What the warning is about: ctx.ip is the leftmost address, which the client wrote.
    expect(await identified({ proxy: true }, { 'x-forwarded-for': XFF })).toBe('ip:198.51.100.7');
    expect(warnings.codes()).toEqual(['SWL_TRUST_ALL_PROXIES']);
    expect(warnings.list[0].message).toMatch(/Koa's 'proxy' is on with no 'maxIpsCount'.*Set 'maxIpsCount'/);
    const quiet = byIp({ warnOnForwarded: false });
    expect(await identified({ proxy: true }, { 'x-forwarded-for': XFF }, quiet)).toBe('ip:198.51.100.7');
    expect(warnings.codes()).toEqual(['SWL_TRUST_ALL_PROXIES']);
  });

  test('byApiKey reads and hashes the header; a list falls back to the IP', async () => {
    expect(await identified({}, { 'x-api-key': 'secret' }, [byApiKey(), byIp()])).toMatch(/^key:[0-9a-f]{32}$/);
    expect(await identified({}, {}, [byApiKey(), byIp()])).toBe('ip:127.0.0.1');
    expect(warnings.codes()).toEqual([]);
  });
});
