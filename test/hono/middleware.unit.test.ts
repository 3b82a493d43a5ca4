/**
 * The Hono middleware on @hono/node-server, beyond the shared scenarios of test/http/: per-route
 * use, `c.get('rateLimit')`, the headers on a response a handler built itself, the 429 with an
 * exact `Retry-After`, the 503 of `failMode: 'closed'`, and identification: the connection's
 * address, `trustProxy` (hops or a function), the untrusted-proxy warning, `byApiKey`. Real
 * sockets, MemoryStore, a manual clock.
 */
import type { AddressInfo } from 'node:net';
import { type HttpBindings, serve } from '@hono/node-server';
import { Hono } from 'hono';
import request from 'supertest';
import { type Decision, MemoryStore, OptionError, type Store } from '../../src';
import { byApiKey, byIp, type HonoRateLimitOptions, type RateLimitEnv, rateLimit } from '../../src/hono';
import { captureWarnings } from '../helpers/warnings';

const START = 1_800_000_000_000;
let now = START;
const clock = () => now;

const servers: ReturnType<typeof serve>[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => new Promise((resolve) => server.close(resolve))));
});

async function listen(app: Hono<{ Bindings: HttpBindings } & RateLimitEnv>): Promise<request.Agent> {
  const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
    const started = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(started));
  });
  servers.push(server);
  return request.agent(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
}

beforeEach(() => {
  now = START;
});

describe('rateLimit() on a route', () => {
  test('per route: own limit, headers on allowed requests, c.get("rateLimit"), an exact Retry-After on the 429', async () => {
    const app = new Hono<{ Bindings: HttpBindings } & RateLimitEnv>();
    const limited = rateLimit({ store: new MemoryStore(), clock, limit: 2, window: '10s', prefix: 'route' });
    app.get('/limited', limited, (c) => c.json({ remaining: c.get('rateLimit')?.remaining }));
    app.get('/free', (c) => c.text(`free ${c.get('rateLimit') === undefined}`));
    const agent = await listen(app);

    const first = await agent.get('/limited');
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ remaining: 1 });
    expect(first.headers['x-ratelimit-limit']).toBe('2');
    expect(first.headers['x-ratelimit-remaining']).toBe('1');
    expect((await agent.get('/limited')).status).toBe(200);

    now += 2_500;
    const denied = await agent.get('/limited');
    expect(denied.status).toBe(429);
    // Sliding window: the window rolls over in 7.5 s; its two counts then weigh 2 x (1 - t/10 s),
    // room for one more at t = 5 s: 12.5 s from now, sent rounded up.
    expect(denied.headers['retry-after']).toBe('13');
    expect(denied.headers['content-type']).toBe('application/json; charset=utf-8');
    expect(denied.body).toEqual({ error: 'Too Many Requests', retryAfter: 13 });
    expect(denied.headers['x-ratelimit-remaining']).toBe('0');

    expect((await agent.get('/free')).text).toBe('free true');
    now += 12_499;
    expect((await agent.get('/limited')).status).toBe(429);
    now += 1;
    expect((await agent.get('/limited')).status).toBe(200);
  });

  test('headers reach a Response the handler built itself, and a header the handler set stays its own', async () => {
    const app = new Hono<{ Bindings: HttpBindings } & RateLimitEnv>();
    app.use(rateLimit({ store: new MemoryStore(), clock, limit: 5, window: '1m', headers: ['legacy', 'ietf'] }));
    app.get('/raw', () => new Response('raw', { headers: { 'X-RateLimit-Limit': 'mine' } }));
    const agent = await listen(app);
    const response = await agent.get('/raw');
    expect(response.text).toBe('raw');
    expect(response.headers['x-ratelimit-limit']).toBe('mine');
    expect(response.headers['x-ratelimit-remaining']).toBe('4');
    // One count at the start of a 60 s window decays through the next one: quota grows back in 120 s.
    expect(response.headers.ratelimit).toBe('"default";r=4;t=120');
    expect(response.headers['ratelimit-policy']).toBe('"default";q=5;w=60');
  });

  test('two limiters in a row: the inner one denies with its own headers, the outer one counted', async () => {
    const store = new MemoryStore();
    const outer = rateLimit({ store, clock, limit: 10, window: '1m', prefix: 'outer' });
    const inner = rateLimit({ store, clock, limit: 1, window: '1m', prefix: 'inner' });
    const app = new Hono<{ Bindings: HttpBindings } & RateLimitEnv>();
    app.get('/', outer, inner, (c) => c.text('ok'));
    const agent = await listen(app);
    expect((await agent.get('/')).status).toBe(200);
    const denied = await agent.get('/');
    expect(denied.status).toBe(429);
    expect(denied.headers['x-ratelimit-limit']).toBe('1');
    expect((await outer.limiter.peek('ip:127.0.0.1', { cost: 0 })).estimated).toBe(2);
  });

  test('a message of text, and a status of your own', async () => {
    const app = new Hono<{ Bindings: HttpBindings } & RateLimitEnv>();
    app.use(rateLimit({ store: new MemoryStore(), clock, limit: 1, window: '1m', message: 'slow down', statusCode: 503 }));
    app.get('/', (c) => c.text('ok'));
    const agent = await listen(app);
    await agent.get('/');
    const denied = await agent.get('/');
    expect(denied.status).toBe(503);
    expect(denied.text).toBe('slow down');
    expect(denied.headers['content-type']).toBe('text/plain; charset=utf-8');
    // Room for one more once the count of this window weighs nothing: at the end of the next one.
    expect(denied.headers['retry-after']).toBe('120');
  });

  test("failMode 'closed' answers 503 while the store fails; 'open' lets the request through and onError hears it", async () => {
    const failing: Store = {
      needsTimeout: false,
      check: () => Promise.reject(new Error('down')),
      settle: () => Promise.reject(new Error('down')),
      reset: () => Promise.reject(new Error('down')),
    };
    const errors: unknown[] = [];
    const app = new Hono<{ Bindings: HttpBindings } & RateLimitEnv>();
    app.get('/closed', rateLimit({ store: failing, failMode: 'closed', onError: (error) => errors.push(error) }), (c) => c.text('ok'));
    app.get('/open', rateLimit({ store: failing, onError: (error) => errors.push(error) }), (c) => c.text('ok'));
    const agent = await listen(app);
    const closed = await agent.get('/closed');
    expect(closed.status).toBe(503);
    expect(closed.body).toEqual({ error: 'Service Unavailable' });
    expect((await agent.get('/open')).text).toBe('ok');
    expect(errors.map((error) => (error as Error).message)).toEqual(['down', 'down']);
  });

  test('resetRequest forgets what the middleware counted for the request', async () => {
    const app = new Hono<{ Bindings: HttpBindings } & RateLimitEnv>();
    const limiter = rateLimit({ store: new MemoryStore(), clock, limit: 2, window: '1m' });
    app.post('/login', limiter, async (c) => {
      if (c.req.header('x-password') === 'right') await limiter.resetRequest(c);
      return c.text('ok');
    });
    const agent = await listen(app);
    await agent.post('/login');
    await agent.post('/login').set('x-password', 'right');
    expect((await limiter.limiter.peek('ip:127.0.0.1', { cost: 0 })).estimated).toBe(0);
  });

  test('invalid options throw at construction, naming the option', () => {
    expect(() => rateLimit({ limt: 5 } as never)).toThrow(expect.objectContaining({ code: 'SWL_UNKNOWN_OPTION' }));
    expect(() => rateLimit({ handler: () => undefined } as never)).toThrow(/^handler: unknown option for rateLimit/);
    expect(() => rateLimit({ failMode: 'maybe' as never })).toThrow(OptionError);
  });
});

describe('identification', () => {
  const XFF = '198.51.100.7, 203.0.113.1';

  async function identified(identify: HonoRateLimitOptions['identify'], headers: Record<string, string> = {}) {
    const decisions: Decision[] = [];
    const app = new Hono<{ Bindings: HttpBindings } & RateLimitEnv>();
    app.use(rateLimit({ store: new MemoryStore(), clock, identify, onDecision: (decision) => decisions.push(decision) }));
    app.get('/', (c) => c.text('ok'));
    const agent = await listen(app);
    expect((await agent.get('/').set(headers)).status).toBe(200);
    return decisions[0].identifier;
  }

  describe('untrusted forwarded headers', () => {
    const warnings = captureWarnings();

    test('by default, the connection address; X-Forwarded-For is never read, and warns once per byIp()', async () => {
      expect(await identified(undefined, { 'x-forwarded-for': XFF })).toBe('ip:127.0.0.1');
      expect(warnings.codes()).toEqual(['SWL_UNTRUSTED_FORWARDED']);
      expect(warnings.list[0].message).toContain('byIp({ trustProxy })');
      const identify = byIp();
      expect(await identified(identify, { forwarded: 'for=198.51.100.7' })).toBe('ip:127.0.0.1');
      expect(await identified(identify, { 'x-forwarded-for': XFF })).toBe('ip:127.0.0.1');
      expect(warnings.codes()).toEqual(['SWL_UNTRUSTED_FORWARDED', 'SWL_UNTRUSTED_FORWARDED']);
    });
  });

  test('byIp({ warnOnForwarded: false }) and a request without those headers: no warning', async () => {
    const spy = jest.spyOn(process, 'emitWarning');
    try {
      expect(await identified(byIp({ warnOnForwarded: false }), { 'x-forwarded-for': XFF })).toBe('ip:127.0.0.1');
      expect(await identified(byIp())).toBe('ip:127.0.0.1');
      expect(spy).not.toHaveBeenCalled();
    } finally {
      spy.mockRestore();
    }
  });

  test('trustProxy as hops: 1 takes the last address of X-Forwarded-For, 2 the one before, more than listed the first', async () => {
    expect(await identified(byIp({ trustProxy: 1 }), { 'x-forwarded-for': XFF })).toBe('ip:203.0.113.1');
    expect(await identified(byIp({ trustProxy: 2 }), { 'x-forwarded-for': XFF })).toBe('ip:198.51.100.7');
    expect(await identified(byIp({ trustProxy: 5 }), { 'x-forwarded-for': XFF })).toBe('ip:198.51.100.7');
    expect(await identified(byIp({ trustProxy: 1 }))).toBe('ip:127.0.0.1');
  });

  test('trustProxy as a function: the first address it does not trust, walking from the connection', async () => {
    const ours = (address: string) => address === '127.0.0.1' || address.startsWith('203.0.113.');
    expect(await identified(byIp({ trustProxy: ours }), { 'x-forwarded-for': XFF })).toBe('ip:198.51.100.7');
    expect(await identified(byIp({ trustProxy: ours }), { 'x-forwarded-for': '198.51.100.7, 192.0.2.9' })).toBe('ip:192.0.2.9');
    const hops: [string, number][] = [];
    const trustAll = (address: string, hop: number) => {
      hops.push([address, hop]);
      return true;
    };
    await identified(byIp({ trustProxy: trustAll }), { 'x-forwarded-for': XFF });
    expect(hops).toEqual([
      ['127.0.0.1', 0],
      ['203.0.113.1', 1],
    ]);
  });

  test('IPv6 from a trusted proxy is masked to ipv6Subnet', async () => {
    expect(await identified(byIp({ trustProxy: 1 }), { 'x-forwarded-for': '2001:db8:1:2:3::9' })).toBe('ip:2001:db8:1:0::/56');
    expect(await identified(byIp({ trustProxy: 1, ipv6Subnet: false }), { 'x-forwarded-for': '2001:db8:1:2:3::9' })).toBe(
      'ip:2001:db8:1:2:3:0:0:9',
    );
  });

  test('byApiKey reads and hashes the header; a list falls back to the IP', async () => {
    expect(await identified([byApiKey(), byIp()], { 'x-api-key': 'secret' })).toMatch(/^key:[0-9a-f]{32}$/);
    expect(await identified([byApiKey({ header: 'Authorization' }), byIp()])).toBe('ip:127.0.0.1');
  });

  test('invalid byIp options throw, naming the option', () => {
    expect(() => byIp({ trustProxy: 0 })).toThrow(/^trustProxy: must be a positive integer/);
    expect(() => byIp({ trustProxy: true as never })).toThrow(expect.objectContaining({ code: 'SWL_INVALID_NUMBER' }));
    expect(() => byIp({ trustproxy: 1 } as never)).toThrow(expect.objectContaining({ code: 'SWL_UNKNOWN_OPTION' }));
    expect(() => byApiKey({ header: '' })).toThrow(/^header: must be a header name/);
  });

  test.each([
    [
      "Bun.serve's server (requestIP)",
      (address: string) => ({ requestIP: (request: Request) => (request.url ? { address, family: 'IPv4', port: 1 } : null) }),
    ],
    ["Deno.serve's info (remoteAddr)", (address: string) => ({ remoteAddr: { transport: 'tcp', hostname: address, port: 1 } })],
    ['bindings around them (server)', (address: string) => ({ server: { remoteAddr: { transport: 'tcp', hostname: address, port: 1 } } })],
  ])('the connection info of %s in c.env gives the peer, and trustProxy counts it as the first hop', async (_name, envOf) => {
    const decisions: Decision[] = [];
    const app = new Hono();
    app.get('/', rateLimit({ store: new MemoryStore(), onDecision: (decision) => decisions.push(decision) }), (c) => c.text('ok'));
    app.get(
      '/proxied',
      rateLimit({ store: new MemoryStore(), identify: byIp({ trustProxy: 1 }), onDecision: (decision) => decisions.push(decision) }),
      (c) => c.text('ok'),
    );
    expect((await app.request('/', {}, envOf('::ffff:198.51.100.3'))).status).toBe(200);
    expect((await app.request('/proxied', { headers: { 'x-forwarded-for': '192.0.2.1, 203.0.113.5' } }, envOf('10.0.0.1'))).status).toBe(
      200,
    );
    expect(decisions.map((decision) => decision.identifier)).toEqual(['ip:198.51.100.3', 'ip:203.0.113.5']);
  });

  test("a Deno request over a Unix socket has no address: byIp() does not identify it, and it counts as 'anonymous'", async () => {
    const decisions: Decision[] = [];
    const app = new Hono();
    app.get('/', rateLimit({ store: new MemoryStore(), onDecision: (decision) => decisions.push(decision) }), (c) => c.text('ok'));
    expect((await app.request('/', {}, { remoteAddr: { transport: 'unix', path: '/run/app.sock' } })).status).toBe(200);
    expect(decisions[0].identifier).toBe('anonymous');
  });

  test('without connection info (app.request), byIp() fails the request loudly rather than share one quota', async () => {
    const errors: unknown[] = [];
    const app = new Hono();
    app.use(rateLimit({ store: new MemoryStore(), onError: (error) => errors.push(error) }));
    app.get('/', (c) => c.text('ok'));
    app.onError((error, c) => c.text(String((error as Error).message), 500));
    const response = await app.request('/');
    expect(response.status).toBe(500);
    expect(await response.text()).toMatch(/byIp\(\) reads the client's address from the server's connection info/);
    expect(errors).toHaveLength(1);
  });
});
