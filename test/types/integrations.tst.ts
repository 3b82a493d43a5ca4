// Type tests of the Hono middleware (`ratewarden/hono`), the NestJS storage (`ratewarden/nestjs`)
// and the `metrics` option, against the real types of hono, @nestjs/throttler and @opentelemetry/api.

import type { ThrottlerStorage } from '@nestjs/throttler';
import type { Meter, MeterProvider } from '@opentelemetry/api';
import { type Context, Hono, type MiddlewareHandler } from 'hono';
import { describe, expect, test } from 'tstyche';
import { createLimiter, type Decision, type LimiterOptions, type MetricsOption } from '../../src';
import { byIp, type HonoRateLimitOptions, type RateLimitEnv, rateLimit } from '../../src/hono';
import { RatewardenThrottlerStorage } from '../../src/nestjs';

describe('metrics', () => {
  test('takes an OpenTelemetry Meter or MeterProvider', () => {
    expect<Meter>().type.toBeAssignableTo<MetricsOption>();
    expect<MeterProvider>().type.toBeAssignableTo<MetricsOption>();
    expect<{ metrics: Meter }>().type.toBeAssignableTo<LimiterOptions>();
    expect(createLimiter).type.not.toBeCallableWith({ metrics: 'prometheus' });
  });
});

describe('ratewarden/hono', () => {
  test('is Hono middleware whose decision is typed in the handlers after it', () => {
    expect(rateLimit()).type.toBeAssignableTo<MiddlewareHandler<RateLimitEnv>>();
    const app = new Hono<RateLimitEnv>();
    app.get('/', rateLimit({ limit: 5 }), (c) => {
      expect(c.get('rateLimit')).type.toBe<Decision | undefined>();
      return c.text('ok');
    });
  });

  test("options' functions take Hono's Context", () => {
    expect(rateLimit).type.toBeCallableWith({
      skip: (c: Context) => c.req.path === '/health',
      cost: async (c: Context) => Number(c.req.query('n')),
    });
    expect<{ identify: (c: Context) => string }>().type.toBeAssignableTo<HonoRateLimitOptions>();
    expect(byIp).type.toBeCallableWith({ trustProxy: 1 });
    expect(byIp).type.toBeCallableWith({ trustProxy: (address: string, hop: number) => hop < 2 && address !== '' });
    expect(byIp).type.not.toBeCallableWith({ trustProxy: true });
  });
});

describe('ratewarden/nestjs', () => {
  test('is a ThrottlerStorage of @nestjs/throttler', () => {
    expect(new RatewardenThrottlerStorage()).type.toBeAssignableTo<ThrottlerStorage>();
    expect(RatewardenThrottlerStorage).type.not.toBeConstructableWith({ limit: 5 });
    expect(RatewardenThrottlerStorage).type.toBeConstructableWith({ algorithm: 'sliding-window', afterBlock: 'keep' });
    expect(RatewardenThrottlerStorage).type.not.toBeConstructableWith({ afterBlock: 'never' });
  });
});
