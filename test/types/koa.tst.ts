// Type tests of the Koa middleware (`ratewarden/koa`) against the real types of koa and @koa/router.

import Router from '@koa/router';
import Koa, { type Context, type Middleware } from 'koa';
import { describe, expect, test } from 'tstyche';
import type { Decision } from '../../src';
import { byIp, type KoaRateLimitOptions, type RateLimitState, rateLimit } from '../../src/koa';

describe('ratewarden/koa', () => {
  test('is Koa middleware, for the app and for a route of @koa/router', () => {
    expect(rateLimit()).type.toBeAssignableTo<Middleware>();
    const app = new Koa();
    app.use(rateLimit({ limit: 5 }));
    const router = new Router();
    router.get('/', rateLimit({ limit: 5 }), (ctx) => {
      ctx.body = 'ok';
    });
    const typed = new Router<RateLimitState>();
    typed.post('/login', rateLimit({ limit: 5, prefix: 'login' }), (ctx) => {
      expect(ctx.state.rateLimit).type.toBe<Decision | undefined>();
    });
  });

  test('the decision is typed on ctx.state, in the default state and in RateLimitState', () => {
    const app = new Koa();
    app.use((ctx) => {
      expect(ctx.state.rateLimit).type.toBe<Decision | undefined>();
    });
    new Koa<RateLimitState>().use((ctx) => {
      expect(ctx.state.rateLimit).type.toBe<Decision | undefined>();
    });
  });

  test("options' functions take Koa's Context", () => {
    expect(rateLimit).type.toBeCallableWith({
      skip: (ctx: Context) => ctx.path === '/health',
      cost: async (ctx: Context) => Number(ctx.query.n),
      requestWasSuccessful: (ctx: Context) => ctx.status < 400,
    });
    expect<{ identify: (ctx: Context) => string }>().type.toBeAssignableTo<KoaRateLimitOptions>();
    expect(rateLimit).type.toBeCallableWith({ identify: byIp({ ipv6Subnet: 64 }) });
    expect(rateLimit).type.not.toBeCallableWith({ handler: () => undefined });
    expect(rateLimit({}).resetRequest).type.toBeCallableWith({} as Context);
  });
});
