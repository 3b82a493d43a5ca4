/**
 * The failure policy of the Express middleware with a RedisStore whose client points at
 * a port nothing listens on: fail open by default (the request passes, onError hears of
 * it), 503 with failMode 'closed', and never a wait longer than timeoutMs.
 */
import express5, { type Request } from 'express';
import { Redis, type RedisOptions } from 'ioredis';
import request from 'supertest';
import { StoreUnavailableError } from '../../src/errors';
import { RedisStore, rateLimit } from '../../src/express';
import { freePort } from '../../support/redis-server';
import { uniquePrefix } from '../helpers/redis';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const express4 = require('express4') as typeof express5;

const TIMEOUT_MS = 150;
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
  // Rejects at once: nothing is queued while disconnected.
  ['enableOfflineQueue: false', { enableOfflineQueue: false }, (error) => expect(error).toBeInstanceOf(Error)],
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
      store: new RedisStore({ client: await deadClient({ enableOfflineQueue: false }) }),
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
});
