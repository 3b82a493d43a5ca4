/**
 * `req.rateLimit` on real Express 5 and Express 4 apps: the decision is read and written through
 * an accessor on Express's request prototype, never added to the request itself (which would give
 * each request a hidden class of its own), and reads the same wherever the request goes.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import express5, { type NextFunction, type Request, type Response } from 'express';
import request from 'supertest';
import { type Decision, rateLimit } from '../../src/express';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const express4 = require('express4') as typeof express5;

function limiter(limit = 5) {
  return rateLimit({ limit, window: '1m', identify: () => 'client' });
}

describe.each([
  ['Express 5', express5],
  ['Express 4', express4],
])('%s', (_name, express) => {
  test('the route reads the decision; the request has no own rateLimit property', async () => {
    const seen: { remaining: number | undefined; own: boolean; inChain: boolean }[] = [];
    const app = express();
    app.use(limiter());
    app.get('/', (req: Request, res: Response) => {
      seen.push({ remaining: req.rateLimit?.remaining, own: Object.hasOwn(req, 'rateLimit'), inChain: 'rateLimit' in req });
      res.send('ok');
    });
    await request(app).get('/').expect(200);
    await request(app).get('/').expect(200);
    expect(seen).toEqual([
      { remaining: 4, own: false, inChain: true },
      { remaining: 3, own: false, inChain: true },
    ]);
  });

  test('a request no limiter decided reads undefined', async () => {
    const app = express();
    const limited = limiter();
    const seen: (Decision | undefined)[] = [];
    app.get('/limited', limited, (_req: Request, res: Response) => {
      res.send('ok');
    });
    app.get('/free', (req: Request, res: Response) => {
      seen.push(req.rateLimit);
      res.send('ok');
    });
    await request(app).get('/limited').expect(200);
    await request(app).get('/free').expect(200);
    expect(seen).toEqual([undefined]);
  });

  test('the last limiter passed is the one read, and an assignment by the app reads back', async () => {
    const app = express();
    const seen: unknown[] = [];
    app.use(limiter(5), limiter(3));
    app.get('/', (req: Request, _res: Response, next: NextFunction) => {
      seen.push(req.rateLimit?.limit);
      req.rateLimit = undefined;
      seen.push(req.rateLimit);
      next();
    });
    app.get('/', (req: Request, res: Response) => {
      seen.push(req.rateLimit);
      res.send('ok');
    });
    await request(app).get('/').expect(200);
    expect(seen).toEqual([3, undefined, undefined]);
  });

  test('an own rateLimit set before the limiter (as another library would) is replaced by the decision', async () => {
    const app = express();
    const seen: unknown[] = [];
    app.use((req: Request, _res: Response, next: NextFunction) => {
      Object.defineProperty(req, 'rateLimit', { value: 'theirs', writable: true, enumerable: true, configurable: true });
      next();
    });
    app.use(limiter());
    app.get('/', (req: Request, res: Response) => {
      seen.push(req.rateLimit?.remaining);
      res.send('ok');
    });
    await request(app).get('/').expect(200);
    expect(seen).toEqual([4]);
  });

  test('a mounted sub-app, which gives the request its own prototype, and the app after it read the same decision', async () => {
    const app = express();
    const sub = express();
    const seen: [string, number | undefined][] = [];
    sub.use(limiter());
    sub.use((req: Request, _res: Response, next: NextFunction) => {
      seen.push(['sub', req.rateLimit?.remaining]);
      next();
    });
    app.use('/api', sub);
    app.use((req: Request, res: Response) => {
      seen.push(['app', req.rateLimit?.remaining]);
      res.send('ok');
    });
    await request(app).get('/api/x').expect(200);
    expect(seen).toEqual([
      ['sub', 4],
      ['app', 4],
    ]);
  });
});

test('a request Express did not make (a bare Node server) gets the decision as its own property', async () => {
  const middleware = limiter();
  const seen: unknown[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    middleware(req as Request, res as Response, (error?: unknown) => {
      seen.push(error ?? (req as Request).rateLimit?.remaining, Object.hasOwn(req, 'rateLimit'));
      res.end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = server.address() as AddressInfo;
    await request(`http://127.0.0.1:${port}`).get('/').expect(200);
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
  expect(seen).toEqual([4, true]);
});
