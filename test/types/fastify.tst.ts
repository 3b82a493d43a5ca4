// Type tests of the Fastify plugin (`ratewarden/fastify`), through the public entry only.
// A line that must not compile is marked `// @ts-expect-error <fragment of the expected message>`:
// tsc (npm run typecheck) fails when the error disappears, TSTyche also when its message changes.
import Fastify, { type FastifyReply, type FastifyRequest, type onRequestHookHandler } from 'fastify';
import { describe, expect, test } from 'tstyche';
import {
  byApiKey,
  byIp,
  type Decision,
  type FastifyRateLimitOptions,
  type Limiter,
  MemoryStore,
  type RateLimitHook,
  type RouteRateLimitOptions,
  rateLimitPlugin,
} from '../../src/fastify';

const app = Fastify();

describe('app.register(rateLimitPlugin, options)', () => {
  test('compiles with good options', async () => {
    await app.register(rateLimitPlugin);
    await app.register(rateLimitPlugin, {});
    await app.register(rateLimitPlugin, { store: new MemoryStore(), limit: 100, window: '1m', identify: byIp() });
    await app.register(rateLimitPlugin, {
      limits: [
        { limit: 10, window: '1s' },
        { limit: 1000, window: '1h' },
      ],
      algorithm: 'fixed-window',
      global: false,
      hook: 'preHandler',
      identify: [byApiKey(), byIp()],
      cost: 2,
      headers: ['draft-6', 'ietf'],
      resetFormat: 'epoch',
      statusCode: 429,
      message: 'Too many requests',
      nearLimitBand: [0.9, 1.1],
      failMode: 'open',
      prefix: 'api',
      timeoutMs: 200,
      denyCacheSize: 0,
    });
    expect<RateLimitHook>().type.toBe<'onRequest' | 'preValidation' | 'preHandler'>();
    expect<FastifyRateLimitOptions['global']>().type.toBe<boolean | undefined>();
  });

  test('fails with bad options', async () => {
    // @ts-expect-error Type 'string' is not assignable to type 'number | ((request
    await app.register(rateLimitPlugin, { limit: 'x' });
    // @ts-expect-error Type '"onSend"' is not assignable to type 'RateLimitHook | undefined'
    await app.register(rateLimitPlugin, { hook: 'onSend' });
    // @ts-expect-error Type 'string' is not assignable to type 'boolean | undefined'
    await app.register(rateLimitPlugin, { global: 'yes' });
    // @ts-expect-error Type '"leaky-bucket"' is not assignable to type 'AlgorithmName | undefined'
    await app.register(rateLimitPlugin, { algorithm: 'leaky-bucket' });
    // @ts-expect-error Type '"sometimes"' is not assignable to type
    await app.register(rateLimitPlugin, { failMode: 'sometimes' });
    // @ts-expect-error Type '"draft-99"' is not assignable to type 'HeadersOption | undefined'
    await app.register(rateLimitPlugin, { headers: 'draft-99' });
    // @ts-expect-error Type 'string' is not assignable to type 'number'
    await app.register(rateLimitPlugin, { statusCode: '429' });
    // The Express-only `handler`:
    // @ts-expect-error 'handler' does not exist in type
    await app.register(rateLimitPlugin, { handler: () => {} });
    // @ts-expect-error 'limitt' does not exist in type
    await app.register(rateLimitPlugin, { limitt: 5 });
  });
});

describe('route config.rateLimit', () => {
  test('an options object or false compiles', () => {
    app.get('/search', { config: { rateLimit: { limit: 10, window: '1s' } } }, async () => []);
    app.get('/health', { config: { rateLimit: false } }, async () => 'ok');
    app.post('/upload', { config: { rateLimit: { hook: 'preValidation', cost: (request) => (request.body ? 2 : 1) } } }, async () => 'ok');
    app.route({
      method: 'GET',
      url: '/tiers',
      config: { rateLimit: { limits: [{ limit: 5, window: '1s' }], prefix: 'tiers', identify: [byApiKey({ header: 'x-key' }), byIp()] } },
      handler: async () => 'ok',
    });
    expect<RouteRateLimitOptions['hook']>().type.toBe<RateLimitHook | undefined>();
  });

  test('bad route options do not compile', () => {
    // @ts-expect-error Type '{ limit: string; }' is not assignable to type
    app.get('/a', { config: { rateLimit: { limit: 'x' } } }, async () => 'ok');
    // @ts-expect-error Type '{ hook: "onSend"; }' is not assignable to type
    app.get('/c', { config: { rateLimit: { hook: 'onSend' } } }, async () => 'ok');
    // @ts-expect-error Type '{ window: string; limit: string; }' is not assignable to type
    app.route({ method: 'GET', url: '/e', config: { rateLimit: { window: '1s', limit: '10' } }, handler: async () => 'ok' });
    // GAP: Fastify types a route's `config` as `FastifyContextConfig & ContextConfig`, inferring ContextConfig from
    // the object given, so `config.rateLimit` is checked only where the two types conflict (a wrong type for a known
    // option, as above). These compile today, though the plugin's onRoute hook throws for each ('must be an options
    // object or false', 'global: unknown option'). Enable them, each under a ts-expect-error directive, when the
    // route config type rejects them:
    // app.get('/b', { config: { rateLimit: true } }, async () => 'ok');
    // app.get('/b2', { config: { rateLimit: 42 } }, async () => 'ok');
    // app.get('/d', { config: { rateLimit: { global: false } } }, async () => 'ok');
    // app.route({ method: 'GET', url: '/d2', config: { rateLimit: true }, handler: async () => 'ok' });
  });
});

describe('request.rateLimit and app.rateLimiter', () => {
  test('request.rateLimit is Decision | null', () => {
    app.get('/', async (request) => {
      expect(request.rateLimit).type.toBe<Decision | null>();
      return { remaining: request.rateLimit?.remaining };
    });
    expect<FastifyRequest['rateLimit']>().type.toBe<Decision | null>();
  });

  test('app.rateLimiter is a Limiter', () => {
    expect(app.rateLimiter).type.toBe<Limiter>();
    expect(app.rateLimiter.reset('ip:203.0.113.7')).type.toBe<Promise<void>>();
  });

  test('app.rateLimitHook() makes a hook from route options but hook', () => {
    expect(app.rateLimitHook()).type.toBe<onRequestHookHandler>();
    app.setNotFoundHandler({ preHandler: app.rateLimitHook({ identify: byApiKey() }) }, async () => 'not found');
    app.addHook('onRequest', app.rateLimitHook({ limit: 5, prefix: 'hook', cost: (request) => (request.method === 'POST' ? 2 : 1) }));
    // @ts-expect-error 'hook' does not exist in type
    app.rateLimitHook({ hook: 'preHandler' });
  });
});

describe('callbacks get the FastifyRequest', () => {
  test('in the plugin options', async () => {
    await app.register(rateLimitPlugin, {
      identify: (request) => {
        expect(request).type.toBe<FastifyRequest>();
        return request.ip;
      },
      skip: (request) => {
        expect(request).type.toBe<FastifyRequest>();
        return request.url === '/health';
      },
      cost: (request) => {
        expect(request).type.toBe<FastifyRequest>();
        return 1;
      },
      message: (request, decision) => {
        expect(request).type.toBe<FastifyRequest>();
        expect(decision).type.toBe<Decision>();
        return { error: 'Too Many Requests', retryAfterMs: decision.retryAfterMs };
      },
      onDecision: (decision, request) => {
        expect(decision).type.toBe<Decision>();
        expect(request).type.toBe<FastifyRequest>();
      },
      onNearLimit: (decision, request) => {
        expect(decision).type.toBe<Decision>();
        expect(request).type.toBe<FastifyRequest>();
      },
      onError: (error, request) => {
        expect(error).type.toBe<unknown>();
        expect(request).type.toBe<FastifyRequest>();
      },
    });
  });

  test('in a route config', () => {
    app.get(
      '/user',
      {
        config: {
          rateLimit: {
            identify: (request) => {
              expect(request).type.toBe<FastifyRequest>();
              return request.headers['x-user'] as string | undefined;
            },
            skip: (request) => {
              expect(request).type.toBe<FastifyRequest>();
              return false;
            },
          },
        },
      },
      async () => 'ok',
    );
  });

  test('callbacks may be async, and must answer what is expected', async () => {
    await app.register(rateLimitPlugin, { skip: async () => true, cost: async () => 1, limit: async () => 10 });
    await app.register(rateLimitPlugin, { limits: async () => [{ limit: 10, window: '1s' }], message: async () => ({ error: 'slow' }) });
    // @ts-expect-error Type 'Promise<string>' is not assignable to type 'Awaitable<number>'
    await app.register(rateLimitPlugin, { cost: async () => 'one' });
    // @ts-expect-error Type 'string' is not assignable to type 'Awaitable<boolean>'
    await app.register(rateLimitPlugin, { skip: () => 'yes' });
    await app.register(rateLimitPlugin, {
      skipFailedRequests: true,
      requestWasSuccessful: (request, reply) => {
        expect(request).type.toBe<FastifyRequest>();
        expect(reply).type.toBe<FastifyReply>();
        return reply.statusCode < 500;
      },
    });
  });
});
