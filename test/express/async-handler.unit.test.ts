import express, { type NextFunction, type Request, type Response } from 'express';
import request from 'supertest';
import { rateLimit } from '../../src/express';
import { resolveIdentify } from '../../src/http/identify';

describe('Express: user callbacks that fail', () => {
  test("an async handler's rejection reaches Express's error handling", async () => {
    const app = express();
    app.use(
      rateLimit({
        limit: 1,
        window: '1m',
        identify: () => 'one',
        handler: async () => {
          throw new Error('handler failed');
        },
      }),
    );
    app.get('/', (_req, res) => {
      res.send('ok');
    });
    const errors: string[] = [];
    app.use((error: Error, _req: Request, res: Response, _next: NextFunction) => {
      errors.push(error.message);
      res.status(500).send('handled');
    });
    expect((await request(app).get('/')).status).toBe(200);
    const denied = await request(app).get('/');
    expect(denied.status).toBe(500);
    expect(denied.text).toBe('handled');
    expect(errors).toEqual(['handler failed']);
  });

  test('an identify function returning an object is an error, not one shared "[object Object]" key', async () => {
    const identify = resolveIdentify<object>(
      () => ({ id: 1 }) as never,
      () => undefined,
    );
    expect(() => identify({})).toThrow(/^identify: must return a string, a finite number or nothing/);
    const app = express();
    app.use(rateLimit({ identify: (() => ({ user: 'x' })) as never }));
    app.get('/', (_req, res) => {
      res.send('ok');
    });
    app.use((error: Error, _req: Request, res: Response, _next: NextFunction) => {
      res.status(500).send(error.message);
    });
    const response = await request(app).get('/');
    expect(response.status).toBe(500);
    expect(response.text).toMatch(/^identify:/);
  });
});
