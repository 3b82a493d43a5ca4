/**
 * Option validation through the adapters: every mistake is a TypeError naming the
 * option, thrown when the middleware / plugin / route is set up, not on a request.
 */
import express from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
import type { Redis } from 'ioredis';
import request from 'supertest';
import { createLimiter, RedisStore, rateLimit } from '../../src/express';
import { rateLimitPlugin } from '../../src/fastify';
import { redisClient, uniquePrefix } from '../helpers/redis';
import { expectOptionError, rejectionOf, thrownBy } from '../helpers/thrown';

/** [what, options, the option the error must name] */
const BAD: [string, Record<string, unknown>, string][] = [
  ['misspelt key', { limt: 5 }, 'limt'],
  ['statusCode 200', { statusCode: 200 }, 'statusCode'],
  ['statusCode 600', { statusCode: 600 }, 'statusCode'],
  ['statusCode 429.5', { statusCode: 429.5 }, 'statusCode'],
  ["statusCode '429'", { statusCode: '429' }, 'statusCode'],
  ["headers 'draft-8'", { headers: 'draft-8' }, 'headers'],
  ['headers true', { headers: true }, 'headers'],
  ['headers with a bad style in a list', { headers: ['legacy', 'rfc'] }, 'headers'],
  ["resetFormat 'iso'", { resetFormat: 'iso' }, 'resetFormat'],
  ["failMode 'fail'", { failMode: 'fail' }, 'failMode'],
  ['nearLimitBand reversed', { nearLimitBand: [1.1, 0.9] }, 'nearLimitBand'],
  ['nearLimitBand of one number', { nearLimitBand: [0.9] }, 'nearLimitBand'],
  ['nearLimitBand with NaN', { nearLimitBand: [0.9, Number.NaN] }, 'nearLimitBand'],
  ['nearLimitBand a string', { nearLimitBand: '0.9-1.1' }, 'nearLimitBand'],
  ['skip not a function', { skip: true }, 'skip'],
  ['onDecision not a function', { onDecision: 'log' }, 'onDecision'],
  ['onNearLimit not a function', { onNearLimit: 1 }, 'onNearLimit'],
  ['onError not a function', { onError: {} }, 'onError'],
  ['cost < 0', { cost: -1 }, 'cost'],
  ['cost > limit', { cost: 101 }, 'cost'],
  ['cost not an integer', { cost: 1.5 }, 'cost'],
  ['cost a string', { cost: '1' }, 'cost'],
  [
    'cost above the smallest tier',
    {
      limit: undefined,
      window: undefined,
      limits: [
        { limit: 5, window: '1s' },
        { limit: 100, window: '1m' },
      ],
      cost: 6,
    },
    'cost',
  ],
  ['message a number', { message: 5 }, 'message'],
  ['identify a string', { identify: 'ip' }, 'identify'],
  ['identify an empty list', { identify: [] }, 'identify'],
  ['limit -1', { limit: -1 }, 'limit'],
  ['window unparsable', { window: 'soon' }, 'window'],
  ['limits and limit together', { limit: 5, limits: [{ limit: 5, window: '1s' }] }, 'limits'],
  ['algorithm unknown', { algorithm: 'leaky-bucket' }, 'algorithm'],
  ['prefix with a brace', { prefix: 'a{b}' }, 'prefix'],
  ['timeoutMs 0', { timeoutMs: 0 }, 'timeoutMs'],
];

const GOOD = { limit: 100, window: '1m' };

/** Asserts `thrown` is an OptionError naming `option` (a space after its colon). */
function expectNamed(thrown: unknown, option: string): void {
  expectOptionError(thrown, option);
  expect((thrown as Error).message.startsWith(`${option}: `)).toBe(true);
}

/** The error a Fastify app fails to load with (before the fix, a bad plugin option hung ready() forever). */
function loadError(app: FastifyInstance): Promise<unknown> {
  return rejectionOf(() => app.ready());
}

describe('Express rateLimit(options)', () => {
  test.each(BAD)('%s: TypeError naming the option, at construction', (_what, options, option) => {
    expectNamed(
      thrownBy(() => rateLimit({ ...GOOD, ...options } as never)),
      option,
    );
  });

  test('Express-only option handler must be a function; Fastify-only global is unknown here', () => {
    expectNamed(
      thrownBy(() => rateLimit({ handler: 'reply' } as never)),
      'handler',
    );
    expectNamed(
      thrownBy(() => rateLimit({ global: false } as never)),
      'global',
    );
  });

  test('options must be an object', () => {
    expectNamed(
      thrownBy(() => rateLimit(null as never)),
      'options',
    );
    expectNamed(
      thrownBy(() => rateLimit('100/m' as never)),
      'options',
    );
  });

  test('the unknown-key error lists the known options', () => {
    expect(() => rateLimit({ limt: 5 } as never)).toThrow(/known: .*\blimit\b.*\bwindow\b/);
  });

  test.each([
    ['windowMs', 15 * 60 * 1000, /^windowMs: unknown option for rateLimit; here it is `window`/],
    ['max', 100, /^max: unknown option for rateLimit; here it is `limit`/],
    ['keyGenerator', () => 'k', /^keyGenerator: unknown option for rateLimit; here it is `identify`/],
    ['standardHeaders', 'draft-8', /; here it is `headers` \('draft-6', 'draft-7' or 'ietf' for draft-8\)/],
  ])("another library's option (%s) is named with this package's own", (key, value, message) => {
    expect(() => rateLimit({ [key]: value } as never)).toThrow(
      expect.objectContaining({ code: 'SWL_UNKNOWN_OPTION', message: expect.stringMatching(message) }),
    );
  });

  test('headers: true names the styles there are', () => {
    expect(() => rateLimit({ headers: true } as never)).toThrow(
      /^headers: expected a style name \('legacy', 'draft-6', 'draft-7', 'ietf'\)/,
    );
  });

  test("a peer's option is only hinted where its counterpart exists: createLimiter has no skip", () => {
    expect(() => createLimiter({ allowList: [] } as never)).toThrow(/^allowList: unknown option for createLimiter \(known: /);
    expect(() => createLimiter({ points: 5 } as never)).toThrow(/^points: unknown option for createLimiter; here it is `limit`/);
  });

  test('boundary values are accepted: cost 0 and cost = limit, statusCode 400 and 599, an empty band', () => {
    expect(() => rateLimit({ ...GOOD, cost: 0 })).not.toThrow();
    expect(() => rateLimit({ ...GOOD, cost: 100 })).not.toThrow();
    expect(() => rateLimit({ ...GOOD, statusCode: 400 })).not.toThrow();
    expect(() => rateLimit({ ...GOOD, statusCode: 599 })).not.toThrow();
    expect(() => rateLimit({ ...GOOD, nearLimitBand: [1, 1] })).not.toThrow();
    expect(() => rateLimit({ ...GOOD, headers: [] })).not.toThrow();
  });
});

describe('Fastify rateLimitPlugin options', () => {
  test.each(BAD)('%s: the plugin fails to load with a TypeError naming the option', async (_what, options, option) => {
    const app = Fastify();
    app.register(rateLimitPlugin, { ...GOOD, ...options } as never);
    expectNamed(await loadError(app), option);
    await app.close();
  });

  test.each(BAD)('%s in config.rateLimit: throws when the route is added', async (_what, options, option) => {
    const app = Fastify();
    await app.register(rateLimitPlugin, GOOD);
    expectNamed(
      thrownBy(() => app.get('/', { config: { rateLimit: options as never } }, async () => 'ok')),
      option,
    );
    await app.close();
  });

  test('Fastify-only option global must be a boolean; Express-only handler is unknown here', async () => {
    for (const [options, option] of [
      [{ global: 'yes' }, 'global'],
      [{ handler: () => undefined }, 'handler'],
    ] as const) {
      const app = Fastify();
      app.register(rateLimitPlugin, options as never);
      expectNamed(await loadError(app), option);
      await app.close();
    }
  });
});

describe('limiters sharing a store and a prefix', () => {
  let client: Redis;
  beforeAll(() => {
    client = redisClient();
  });
  afterAll(() => client.quit());

  test('different limits on one store and prefix: a warning, since they count into the same keys', async () => {
    const warn = jest.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const store = new RedisStore({ client });
      const prefix = uniquePrefix('shared');
      const wide = rateLimit({ store, limit: 5, prefix, identify: () => 'client' });
      rateLimit({ store, limit: 5, prefix, identify: () => 'client' });
      expect(warn).not.toHaveBeenCalled();
      const narrow = rateLimit({ store, limit: 2, prefix, identify: () => 'client' });
      expect(warn).toHaveBeenCalledTimes(1);
      expect(String(warn.mock.calls[0][0])).toContain(`'${prefix}'`);
      expect(warn.mock.calls[0][1]).toMatchObject({ code: 'SWL_SHARED_PREFIX' });
      // What the warning is about: the narrow limiter denies on counts the wide one made.
      const app = express();
      app.get('/wide', wide, (_req, res) => {
        res.send('wide');
      });
      app.get('/narrow', narrow, (_req, res) => {
        res.send('narrow');
      });
      await request(app).get('/wide').expect(200);
      await request(app).get('/wide').expect(200);
      await request(app).get('/narrow').expect(429);
      // Another store, or another prefix, is fine.
      rateLimit({ store: new RedisStore({ client }), limit: 3, prefix, identify: () => 'client' });
      rateLimit({ store, limit: 3, prefix: `${prefix}-other`, identify: () => 'client' });
      expect(warn).toHaveBeenCalledTimes(1);
    } finally {
      warn.mockRestore();
    }
  });
});
