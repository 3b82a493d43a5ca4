/**
 * The Express middleware on real Express 5 and Express 4 apps, over HTTP (supertest),
 * counting in a real Redis. Time comes from a manual clock.
 */
import express5, { type NextFunction, type Request, type Response } from 'express';
import type { Redis } from 'ioredis';
import request from 'supertest';
import type { ExpressRateLimitOptions } from '../../src/express';
import { type Decision, type RateLimitMiddleware, RedisStore, rateLimit } from '../../src/express';
import { manualClock, redisClient, uniquePrefix } from '../helpers/redis';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const express4 = require('express4') as typeof express5;

const WINDOW = 10_000;
const START = 1_700_000_000_000 - (1_700_000_000_000 % WINDOW); // a window boundary

let client: Redis;
beforeAll(() => {
  client = redisClient();
});
afterAll(() => client.quit());

describe.each([
  ['Express 5', express5],
  ['Express 4', express4],
])('%s', (_name, express) => {
  /** A middleware on a fresh Redis prefix and manual clock; `identify` defaults to one fixed client. */
  function limiter(options: ExpressRateLimitOptions = {}) {
    const clock = manualClock(START);
    const decisions: Decision[] = [];
    const onDecision = options.onDecision;
    const middleware = rateLimit({
      store: new RedisStore({ client }),
      limit: 2,
      window: WINDOW,
      prefix: uniquePrefix('ex'),
      clock: clock.now,
      identify: () => 'client',
      ...options,
      onDecision: (decision, req) => {
        decisions.push(decision);
        onDecision?.(decision, req);
      },
    });
    return { middleware, clock, decisions };
  }

  /** An app with `middleware` in front of every route; routes count their calls. */
  function appWith(...middleware: RateLimitMiddleware[]) {
    const app = express();
    const hits: string[] = [];
    app.use(...middleware);
    // A catch-all that reads the same on Express 4 and 5 (their path syntaxes differ).
    app.use((req: Request, res: Response) => {
      hits.push(req.path);
      res.send(`route ${req.path}`);
    });
    return { app, hits };
  }

  describe('allowed and denied requests', () => {
    test('allowed: X-RateLimit-* headers (Reset in epoch seconds of resetAt) and the route runs', async () => {
      const { middleware, decisions } = limiter();
      const { app, hits } = appWith(middleware);
      const first = await request(app).get('/a').expect(200, 'route /a');
      expect(first.headers['x-ratelimit-limit']).toBe('2');
      expect(first.headers['x-ratelimit-remaining']).toBe('1');
      // Reset: when quota next grows. The one unit counted weighs until the next window has passed
      // (sliding window counter: it becomes 'previous' and decays), so at 2 x 10 s.
      expect(decisions[0].resetAt).toBe(START + 20_000);
      expect(first.headers['x-ratelimit-reset']).toBe(String((START + 20_000) / 1000));
      const second = await request(app).get('/a').expect(200);
      expect(second.headers['x-ratelimit-remaining']).toBe('0');
      // Full: a unit comes back (and the next request fits) 5 s into the next window, when the 2 previous weigh 1.
      expect(decisions[1].resetAt).toBe(START + 15_000);
      expect(second.headers['x-ratelimit-reset']).toBe(String((START + 15_000) / 1000));
      expect(second.headers['retry-after']).toBeUndefined();
      expect(hits).toEqual(['/a', '/a']);
    });

    test("resetFormat 'delta': X-RateLimit-Reset in seconds from now", async () => {
      const { middleware } = limiter({ resetFormat: 'delta' });
      const { app } = appWith(middleware);
      expect((await request(app).get('/').expect(200)).headers['x-ratelimit-reset']).toBe('20');
      expect((await request(app).get('/').expect(200)).headers['x-ratelimit-reset']).toBe('15');
    });

    test('denied: 429, Retry-After = ceil(retryAfterMs / 1000), JSON body, the route does not run', async () => {
      const { middleware, clock, decisions } = limiter();
      const { app, hits } = appWith(middleware);
      await request(app).get('/').expect(200);
      await request(app).get('/').expect(200);
      clock.set(START + 1_500);
      const denied = await request(app).get('/').expect(429);
      expect(decisions[2].retryAfterMs).toBe(13_500);
      expect(denied.headers['retry-after']).toBe('14');
      expect(denied.headers['content-type']).toBe('application/json; charset=utf-8');
      expect(denied.text).toBe('{"error":"Too Many Requests","retryAfter":14}');
      expect(denied.body).toEqual({ error: 'Too Many Requests', retryAfter: 14 });
      expect(denied.headers['x-ratelimit-remaining']).toBe('0');
      expect(denied.headers['x-ratelimit-limit']).toBe('2');
      expect(hits).toHaveLength(2);
      // A whole number of seconds stays as it is.
      clock.set(START + 5_000);
      const later = await request(app).get('/').expect(429);
      expect(later.headers['retry-after']).toBe('10');
      expect(later.body.retryAfter).toBe(10);
      // Once Retry-After has passed, the client gets in again.
      clock.set(START + 15_000);
      await request(app).get('/').expect(200);
      expect(hits).toHaveLength(3);
    });

    test('a denial is written as is: exact Content-Length in bytes, no ETag, and no body for HEAD', async () => {
      const { middleware } = limiter({ limit: 1, message: 'trop de requêtes' });
      const { app } = appWith(middleware);
      await request(app).get('/').expect(200);
      const denied = await request(app).get('/').expect(429);
      expect(denied.text).toBe('trop de requêtes');
      expect(denied.headers['content-type']).toBe('text/plain; charset=utf-8');
      expect(denied.headers['content-length']).toBe(String(Buffer.byteLength('trop de requêtes')));
      // Express's send would add one; a refusal is nothing for a cache to validate.
      expect(denied.headers.etag).toBeUndefined();
      const head = await request(app).head('/').expect(429);
      expect(head.text).toBeUndefined();
      expect(head.headers['retry-after']).toBeDefined();
      const json = await request(appWith(limiter({ limit: 0 }).middleware).app)
        .get('/')
        .expect(429);
      expect(json.headers['content-length']).toBe(String(json.text.length));
      expect(json.headers.etag).toBeUndefined();
    });

    test('statusCode is configurable', async () => {
      const { middleware } = limiter({ limit: 1, statusCode: 503 });
      const { app } = appWith(middleware);
      await request(app).get('/').expect(200);
      const denied = await request(app).get('/').expect(503);
      expect(denied.body.error).toBe('Too Many Requests');
      expect(denied.headers['retry-after']).toBeDefined();
    });

    test('message as a string is sent as text', async () => {
      const { middleware } = limiter({ limit: 1, message: 'slow down' });
      const { app } = appWith(middleware);
      await request(app).get('/').expect(200);
      const denied = await request(app).get('/').expect(429);
      expect(denied.text).toBe('slow down');
      expect(denied.headers['content-type']).toMatch(/^text\/plain/);
    });

    test('message as an object is sent as JSON', async () => {
      const { middleware } = limiter({ limit: 1, message: { code: 'RATE', detail: 'later' } });
      const { app } = appWith(middleware);
      await request(app).get('/').expect(200);
      const denied = await request(app).get('/').expect(429);
      expect(denied.headers['content-type']).toMatch(/^application\/json/);
      expect(denied.body).toEqual({ code: 'RATE', detail: 'later' });
    });

    test('message as a function gets the request and the decision', async () => {
      const seen: [string, Decision][] = [];
      const message = (req: Request, decision: Decision) => {
        seen.push([req.path, decision]);
        return req.path === '/text' ? `wait ${decision.retryAfterMs} ms` : { wait: decision.retryAfterMs, limit: decision.limit };
      };
      const { middleware } = limiter({ limit: 1, message });
      const { app } = appWith(middleware);
      await request(app).get('/').expect(200);
      const text = await request(app).get('/text').expect(429);
      expect(text.text).toBe('wait 20000 ms');
      expect(text.headers['content-type']).toMatch(/^text\/plain/);
      const json = await request(app).get('/json').expect(429);
      expect(json.body).toEqual({ wait: 20_000, limit: 1 });
      expect(seen.map(([path]) => path)).toEqual(['/text', '/json']);
      expect(seen[0][1].allowed).toBe(false);
    });

    test('handler(req, res, next, decision) replaces the answer; headers are already set when it runs', async () => {
      const calls: { path: string; retryAfterHeader: unknown; decision: Decision }[] = [];
      const handler = (req: Request, res: Response, _next: NextFunction, decision: Decision) => {
        calls.push({ path: req.path, retryAfterHeader: res.getHeader('Retry-After'), decision });
        res.status(402).json({ upgrade: true });
      };
      const { middleware } = limiter({ limit: 1, handler });
      const { app, hits } = appWith(middleware);
      await request(app).get('/').expect(200);
      const denied = await request(app).get('/x').expect(402);
      expect(denied.body).toEqual({ upgrade: true });
      // limit 1: the next request fits only when the previous window's 1 has fully decayed.
      expect(denied.headers['retry-after']).toBe('20');
      expect(denied.headers['x-ratelimit-remaining']).toBe('0');
      expect(calls).toHaveLength(1);
      expect(calls[0]).toMatchObject({ path: '/x', retryAfterHeader: '20' });
      expect(calls[0].decision.allowed).toBe(false);
      expect(hits).toEqual(['/']);
    });

    test('handler is not called for allowed requests', async () => {
      const handler = jest.fn();
      const { middleware } = limiter({ limit: 5, handler });
      const { app } = appWith(middleware);
      await request(app).get('/').expect(200);
      expect(handler).not.toHaveBeenCalled();
    });
  });

  describe('options', () => {
    test('skip(req): skipped requests are not counted and get no headers', async () => {
      const { middleware } = limiter({ limit: 1, skip: (req) => req.path === '/health' });
      const { app } = appWith(middleware);
      for (let i = 0; i < 3; i++) {
        const health = await request(app).get('/health').expect(200);
        expect(health.headers['x-ratelimit-limit']).toBeUndefined();
      }
      expect(await client.exists(middleware.limiter.keyFor('client'))).toBe(0);
      await request(app).get('/').expect(200);
      await request(app).get('/').expect(429);
      await request(app).get('/health').expect(200);
    });

    test('headers: false sends no rate-limit headers (Retry-After still tells when to retry)', async () => {
      const { middleware } = limiter({ limit: 1, headers: false });
      const { app } = appWith(middleware);
      const allowed = await request(app).get('/').expect(200);
      const denied = await request(app).get('/').expect(429);
      for (const response of [allowed, denied]) {
        expect(Object.keys(response.headers).filter((name) => name.includes('ratelimit'))).toEqual([]);
      }
      expect(denied.headers['retry-after']).toBe('20');
    });

    test("headers: 'draft-6', 'draft-7', 'ietf' and arrays of styles", async () => {
      // One unit counted: the reset (when quota grows again) is 20 s away, as for X-RateLimit-Reset.
      const cases: [ExpressRateLimitOptions['headers'], Record<string, string | undefined>][] = [
        [
          'draft-6',
          {
            'ratelimit-policy': '2;w=10',
            'ratelimit-limit': '2',
            'ratelimit-remaining': '1',
            'ratelimit-reset': '20',
            'x-ratelimit-limit': undefined,
          },
        ],
        ['draft-7', { 'ratelimit-policy': '2;w=10', ratelimit: 'limit=2, remaining=1, reset=20', 'x-ratelimit-limit': undefined }],
        ['ietf', { 'ratelimit-policy': '"default";q=2;w=10', ratelimit: '"default";r=1;t=20', 'x-ratelimit-limit': undefined }],
        [['legacy', 'draft-7'], { ratelimit: 'limit=2, remaining=1, reset=20', 'x-ratelimit-limit': '2', 'x-ratelimit-remaining': '1' }],
      ];
      for (const [headers, expected] of cases) {
        const { middleware } = limiter({ headers });
        const { app } = appWith(middleware);
        const response = await request(app).get('/').expect(200);
        for (const [name, value] of Object.entries(expected))
          expect([headers, name, response.headers[name]]).toEqual([headers, name, value]);
      }
    });

    test('onDecision(decision, req) sees every decision, with ratio = estimated / limit', async () => {
      const seen: [number, boolean, string][] = [];
      const { middleware } = limiter({ limit: 4, onDecision: (decision, req) => seen.push([decision.ratio, decision.allowed, req.path]) });
      const { app } = appWith(middleware);
      for (let i = 0; i < 5; i++) await request(app).get(`/r${i}`);
      expect(seen).toEqual([
        [0.25, true, '/r0'],
        [0.5, true, '/r1'],
        [0.75, true, '/r2'],
        [1, true, '/r3'],
        [1, false, '/r4'],
      ]);
    });

    test('onNearLimit fires only inside the default band [0.9, 1.1]', async () => {
      const near: number[] = [];
      const { middleware, decisions } = limiter({ limit: 10, onNearLimit: (decision) => near.push(decision.ratio) });
      const { app } = appWith(middleware);
      for (let i = 0; i < 12; i++) await request(app).get('/');
      expect(decisions.map((decision) => decision.ratio)).toEqual([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1, 1]);
      expect(near).toEqual([0.9, 1, 1, 1]);
    });

    test('nearLimitBand is configurable', async () => {
      const near: [number, string][] = [];
      const { middleware } = limiter({
        limit: 10,
        nearLimitBand: [0.5, 0.6],
        onNearLimit: (decision, req) => near.push([decision.ratio, req.path]),
      });
      const { app } = appWith(middleware);
      for (let i = 1; i <= 10; i++) await request(app).get(`/${i}`).expect(200);
      expect(near).toEqual([
        [0.5, '/5'],
        [0.6, '/6'],
      ]);
    });

    test('cost(req): each request consumes what the function says', async () => {
      const { middleware, decisions } = limiter({ limit: 10, cost: (req) => Number(req.headers['x-cost'] ?? 1) });
      const { app } = appWith(middleware);
      expect((await request(app).get('/').set('x-cost', '4').expect(200)).headers['x-ratelimit-remaining']).toBe('6');
      expect((await request(app).get('/').set('x-cost', '6').expect(200)).headers['x-ratelimit-remaining']).toBe('0');
      await request(app).get('/').set('x-cost', '1').expect(429);
      // A zero-cost request still gets through and is told what is left.
      expect((await request(app).get('/').set('x-cost', '0').expect(200)).headers['x-ratelimit-remaining']).toBe('0');
      expect(decisions.map((decision) => decision.cost)).toEqual([4, 6, 1, 0]);
    });

    test('numeric cost', async () => {
      const { middleware } = limiter({ limit: 10, cost: 5 });
      const { app } = appWith(middleware);
      expect((await request(app).get('/').expect(200)).headers['x-ratelimit-remaining']).toBe('5');
      await request(app).get('/').expect(200);
      await request(app).get('/').expect(429);
    });

    test('limits: the headers report the binding tier', async () => {
      const { middleware, clock } = limiter({
        limit: undefined,
        window: undefined,
        limits: [
          { limit: 10, window: '1s' },
          { limit: 3, window: '1m' },
        ],
      });
      const { app } = appWith(middleware);
      // The per-minute tier has least left from the start.
      const first = await request(app).get('/').expect(200);
      expect(first.headers['x-ratelimit-limit']).toBe('3');
      expect(first.headers['x-ratelimit-remaining']).toBe('2');
      await request(app).get('/').expect(200);
      await request(app).get('/').expect(200);
      const denied = await request(app).get('/').expect(429);
      expect(denied.headers['x-ratelimit-limit']).toBe('3');
      // 2 s later the per-second tier is long clear, but the per-minute one still binds.
      clock.advance(2_000);
      const stillDenied = await request(app).get('/').expect(429);
      expect(stillDenied.headers['x-ratelimit-limit']).toBe('3');
    });

    test('limits: a short tier binds while it is the one that denies', async () => {
      const { middleware, clock, decisions } = limiter({
        limit: undefined,
        window: undefined,
        limits: [
          { limit: 2, window: '1s' },
          { limit: 100, window: '1h' },
        ],
      });
      const { app } = appWith(middleware);
      await request(app).get('/').expect(200);
      const full = await request(app).get('/').expect(200);
      expect(full.headers['x-ratelimit-limit']).toBe('2');
      expect(full.headers['x-ratelimit-remaining']).toBe('0');
      const denied = await request(app).get('/').expect(429);
      expect(denied.headers['x-ratelimit-limit']).toBe('2');
      expect(decisions[2].tier).toBe(0);
      expect(denied.headers['retry-after']).toBe(String(Math.ceil(decisions[2].retryAfterMs / 1000)));
      expect(decisions[2].retryAfterMs).toBeLessThanOrEqual(2_000);
      clock.advance(decisions[2].retryAfterMs);
      const again = await request(app).get('/').expect(200);
      // The denied request was counted by neither tier: 3 of 100 per hour.
      expect(decisions[3].tiers[1].estimated).toBe(3);
      expect(again.headers['x-ratelimit-limit']).toBe('2');
    });
  });

  describe('placement', () => {
    test('app.use limits every route; a per-route middleware with its own prefix counts separately', async () => {
      const prefix = uniquePrefix('ex');
      const global = rateLimit({
        store: new RedisStore({ client }),
        limit: 5,
        window: WINDOW,
        prefix: `${prefix}-global`,
        identify: () => 'client',
      });
      const login = rateLimit({
        store: new RedisStore({ client }),
        limit: 2,
        window: WINDOW,
        prefix: `${prefix}-login`,
        identify: () => 'client',
      });
      const app = express();
      app.use(global);
      app.post('/login', login, (_req, res) => {
        res.send('logged in');
      });
      app.get('/other', (_req, res) => {
        res.send('other');
      });

      expect((await request(app).get('/other').expect(200)).headers['x-ratelimit-remaining']).toBe('4');
      const firstLogin = await request(app).post('/login').expect(200);
      // The route's middleware runs last, so its headers are the ones sent.
      expect(firstLogin.headers['x-ratelimit-limit']).toBe('2');
      expect(firstLogin.headers['x-ratelimit-remaining']).toBe('1');
      await request(app).post('/login').expect(200);
      await request(app).post('/login').expect(429);
      // /other only sees the global count: 1 + 3 logins (the global middleware counted all three).
      const other = await request(app).get('/other').expect(200);
      expect(other.headers['x-ratelimit-limit']).toBe('5');
      expect(other.headers['x-ratelimit-remaining']).toBe('0');
      await request(app).get('/other').expect(429);

      expect(global.limiter.keyFor('client')).not.toBe(login.limiter.keyFor('client'));
      expect(await client.exists(global.limiter.keyFor('client'), login.limiter.keyFor('client'))).toBe(2);
    });

    test('a request nothing identifies counts under the shared "anonymous" key; the middleware exposes .limiter', async () => {
      const { middleware } = limiter({ limit: 2, identify: () => undefined });
      const { app } = appWith(middleware);
      expect(middleware.limiter.prefix).toMatch(/^ex-/);
      await request(app).get('/').set('x-api-key', 'one').expect(200);
      await request(app).get('/').set('x-api-key', 'two').expect(200);
      await request(app).get('/').set('x-api-key', 'three').expect(429);
      expect(await client.exists(middleware.limiter.keyFor('anonymous'))).toBe(1);
      expect((await middleware.limiter.peek('anonymous', { cost: 0 })).estimated).toBe(2);
      await middleware.limiter.reset('anonymous');
      await request(app).get('/').expect(200);
    });
  });

  describe('errors in callbacks go to Express error handling', () => {
    function appWithErrorHandler(middleware: RateLimitMiddleware) {
      const { app, hits } = appWith(middleware);
      const errors: unknown[] = [];
      app.use((error: Error, _req: Request, res: Response, _next: NextFunction) => {
        errors.push(error);
        res.status(500).send(`handled: ${error.message}`);
      });
      return { app, hits, errors };
    }

    test('identify throwing', async () => {
      const { middleware } = limiter({
        identify: () => {
          throw new Error('identify broke');
        },
      });
      const { app, hits, errors } = appWithErrorHandler(middleware);
      await request(app).get('/').expect(500, 'handled: identify broke');
      expect(errors).toHaveLength(1);
      expect(hits).toEqual([]);
      // The app keeps serving.
      await request(app).get('/').expect(500);
    });

    test('cost throwing, and cost returning an invalid number', async () => {
      const { middleware } = limiter({
        limit: 5,
        cost: (req) => {
          if (req.path === '/throw') throw new Error('cost broke');
          return Number(req.path.slice(1));
        },
      });
      const { app, hits, errors } = appWithErrorHandler(middleware);
      await request(app).get('/throw').expect(500, 'handled: cost broke');
      const negative = await request(app).get('/-1').expect(500);
      expect(negative.text).toMatch(/^handled: cost: /);
      expect(errors[1]).toBeInstanceOf(TypeError);
      // A cost that can never fit is the client's doing: refused as a denial, with no Retry-After.
      const tooBig = await request(app).get('/6').expect(429);
      expect(tooBig.headers['retry-after']).toBeUndefined();
      expect(tooBig.body).toEqual({ error: 'Too Many Requests', retryAfter: null });
      await request(app).get('/2').expect(200);
      expect(hits).toEqual(['/2']);
      expect(errors).toHaveLength(2);
    });

    test('skip throwing', async () => {
      const { middleware } = limiter({
        skip: () => {
          throw new Error('skip broke');
        },
      });
      const { app } = appWithErrorHandler(middleware);
      await request(app).get('/').expect(500, 'handled: skip broke');
    });
  });
});
