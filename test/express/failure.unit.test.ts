/**
 * The failure policy of the Express middleware with a RedisStore whose client points at
 * a port nothing listens on: fail open by default (the request passes, onError hears of
 * it), 503 with failMode 'closed', and never a wait longer than timeoutMs.
 */
import express5, { type Request } from 'express';
import { Redis, type RedisOptions } from 'ioredis';
import request from 'supertest';
import { RateLimitTimeoutError, StoreUnavailableError } from '../../src/errors';
import { RedisStore, rateLimit } from '../../src/express';
import { freePort } from '../../support/redis-server';
import { uniquePrefix } from '../helpers/redis';
import { rejectionOf } from '../helpers/thrown';
import { captureWarnings } from '../helpers/warnings';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const express4 = require('express4') as typeof express5;

const TIMEOUT_MS = 150;
/** Date.now() in the tests of SWL_STORE_FAILING's pace: only moves forward, across both Express versions. */
let now = 1_800_000_000_000;
/** Scheduling slack on a loaded 2-core machine; still far below ioredis' own retry delays. */
const MARGIN_MS = 350;

const clients: Redis[] = [];
afterAll(() => {
  for (const client of clients) client.disconnect();
});

async function deadClient(options: RedisOptions): Promise<Redis> {
  // disconnectTimeout only shortens the timer ioredis 6 arms on disconnect for a refused
  // stream, so jest can exit promptly; it plays no part while the client is in use.
  const client = new Redis({ host: '127.0.0.1', port: await freePort(), disconnectTimeout: 10, ...options });
  client.on('error', () => {}); // connection refused, over and over: expected here
  clients.push(client);
  return client;
}

const clientKinds: [string, RedisOptions, (error: unknown) => void][] = [
  // Still making its first connection: the check waits for it, up to timeoutMs, then times out.
  [
    'enableOfflineQueue: false',
    { enableOfflineQueue: false },
    (error) => {
      expect(error).toBeInstanceOf(RateLimitTimeoutError);
      expect(error).toMatchObject({ code: 'SWL_TIMEOUT' });
    },
  ],
  // Not connecting until a command or connect() comes (lazyConnect), and queueing nothing:
  // ioredis says "Stream isn't writeable", which the store reports as any unreachable Redis.
  [
    'enableOfflineQueue: false + lazyConnect',
    { enableOfflineQueue: false, lazyConnect: true },
    (error) => {
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect(error).toMatchObject({
        code: 'SWL_STORE_UNAVAILABLE',
        cause: expect.objectContaining({ message: expect.stringMatching(/writeable/) }),
      });
    },
  ],
  // ioredis defaults queue the command while the first connection is attempted; the store fails
  // it when that attempt closes (it would otherwise be sent on a later attempt, however late).
  ['ioredis defaults + lazyConnect', { lazyConnect: true }, (error) => expect(error).toBeInstanceOf(StoreUnavailableError)],
];

describe.each([
  ['Express 5', express5],
  ['Express 4', express4],
])('%s with Redis down', (_name, express) => {
  describe.each(clientKinds)('client with %s', (_kind, clientOptions, checkError) => {
    async function appWith(failMode?: 'open' | 'closed') {
      const onError = jest.fn<void, [unknown, Request]>();
      const middleware = rateLimit({
        store: new RedisStore({ client: await deadClient(clientOptions) }),
        limit: 1,
        window: '1m',
        prefix: uniquePrefix('down'),
        timeoutMs: TIMEOUT_MS,
        failMode,
        onError,
      });
      const app = express();
      app.use(middleware);
      const hits: string[] = [];
      app.get('/', (req, res) => {
        hits.push(req.path);
        res.send('served');
      });
      return { app, onError, hits };
    }

    test('fails open by default: every request passes without headers, onError is called, no long wait', async () => {
      const { app, onError, hits } = await appWith();
      // limit is 1: were anything counted, the second request would be denied.
      for (let i = 0; i < 2; i++) {
        const started = Date.now();
        const response = await request(app).get('/').expect(200, 'served');
        expect(Date.now() - started).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
        expect(response.headers['x-ratelimit-limit']).toBeUndefined();
      }
      expect(hits).toHaveLength(2);
      expect(onError).toHaveBeenCalledTimes(2);
      checkError(onError.mock.calls[0][0]);
      expect(onError.mock.calls[0][1].path).toBe('/');
    });

    test("failMode 'closed' answers 503 without running the route, within timeoutMs", async () => {
      const { app, onError, hits } = await appWith('closed');
      const started = Date.now();
      const response = await request(app).get('/').expect(503);
      expect(Date.now() - started).toBeLessThan(TIMEOUT_MS + MARGIN_MS);
      expect(response.body).toEqual({ error: 'Service Unavailable' });
      expect(hits).toEqual([]);
      expect(onError).toHaveBeenCalledTimes(1);
      checkError(onError.mock.calls[0][0]);
    });
  });

  test('an onError hook that throws does not turn the outage into a failed request', async () => {
    const middleware = rateLimit({
      store: new RedisStore({ client: await deadClient({ enableOfflineQueue: false, lazyConnect: true }) }),
      prefix: uniquePrefix('down'),
      onError: () => {
        throw new Error('metrics broke');
      },
    });
    const app = express();
    app.use(middleware);
    app.get('/', (_req, res) => {
      res.send('served');
    });
    await request(app).get('/').expect(200, 'served');
  });

  describe('with no onError', () => {
    const warnings = captureWarnings();
    beforeEach(() => {
      jest.spyOn(Date, 'now').mockImplementation(() => now);
    });
    afterEach(() => jest.restoreAllMocks());

    test('failing open is never silent: a coded warning on the first failure, then at most once a minute', async () => {
      const app = express();
      app.use(
        rateLimit({
          store: new RedisStore({ client: await deadClient({ enableOfflineQueue: false, lazyConnect: true }) }),
          prefix: uniquePrefix('down'),
        }),
      );
      app.get('/', (_req, res) => {
        res.send('served');
      });
      const served = async (times: number) => {
        for (let i = 0; i < times; i++) await request(app).get('/').expect(200, 'served');
      };
      await served(3);
      const first = warnings.list;
      expect(first.map((warning) => warning.code)).toEqual(['SWL_STORE_FAILING']);
      expect(first[0].message).toMatch(/StoreUnavailableError.*let through unlimited \(failMode: 'open'\).*Pass onError/);
      now += 59_000;
      await served(2);
      expect(warnings.codes()).toEqual(['SWL_STORE_FAILING']);
      now += 1_000;
      await served(1);
      expect(warnings.codes()).toEqual(['SWL_STORE_FAILING', 'SWL_STORE_FAILING']);
      now += 120_000; // a minute (and more) later, still failing
    });

    test("failMode 'closed' says the requests are refused", async () => {
      now += 60_000;
      const app = express();
      app.use(
        rateLimit({
          store: new RedisStore({ client: await deadClient({ enableOfflineQueue: false, lazyConnect: true }) }),
          prefix: uniquePrefix('down'),
          failMode: 'closed',
        }),
      );
      await request(app).get('/').expect(503);
      expect(warnings.list.map((warning) => warning.message)).toEqual([expect.stringMatching(/refused with 503/)]);
      now += 60_000;
    });
  });
});

describe('RedisStore given a client that never connected', () => {
  test('the client passed without braces is recognised: pass { client }', async () => {
    const client = await deadClient({ enableOfflineQueue: false, lazyConnect: true });
    expect(() => new RedisStore(client as never)).toThrow(
      expect.objectContaining({ code: 'SWL_INVALID_OPTIONS', message: expect.stringMatching(/pass \{ client \}/) }),
    );
  });

  test('node-redis, never connected: a coded StoreUnavailableError, at once', async () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { createClient } = require('redis') as typeof import('redis');
    const client = createClient({ url: `redis://127.0.0.1:${await freePort()}` });
    const store = new RedisStore({ client });
    const middleware = rateLimit({ store, prefix: uniquePrefix('down'), onError: () => {} });
    const error = await rejectionOf(() => middleware.limiter.check('user:1'));
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(error).toMatchObject({ code: 'SWL_STORE_UNAVAILABLE' });
  });
});
