/**
 * Requests in progress (`concurrency`) through the HTTP adapters: a slot is taken at the check
 * and given back once, when the response is over (sent, or the connection closed first).
 * In-process apps of every adapter on MemoryStore and RedisStore; and, on Redis, app servers
 * in two real processes sharing one bound, and a process SIGKILLed while holding slots.
 */
import http from 'node:http';
import { createLimiter, RedisStore } from '../../src';
import { type AppProcess, startAppProcess } from '../helpers/app-process';
import { redisClient, redisUrl, uniquePrefix } from '../helpers/redis';
import { onRedis, storesOfTestFile } from '../helpers/stores';
import { type App, FRAMEWORK_ROWS, type Route, START } from './frameworks';

const STORES = storesOfTestFile();
const delay = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A route that answers only when told to, or never (its client goes away first). */
function heldRoute(): { route: Route; started: () => Promise<void>; finish: () => void } {
  let markStarted: () => void = () => undefined;
  let started = new Promise<void>((resolve) => {
    markStarted = resolve;
  });
  const waiting: (() => void)[] = [];
  return {
    route: {
      handle: async (_request, raw) => {
        markStarted();
        await new Promise<void>((resolve) => {
          waiting.push(resolve);
          raw.once('close', resolve);
        });
        return { body: 'done' };
      },
    },
    started: async () => {
      await started;
      started = new Promise<void>((resolve) => {
        markStarted = resolve;
      });
    },
    finish: () => {
      for (const resolve of waiting.splice(0)) resolve();
    },
  };
}

/** A GET that can be abandoned: the socket is destroyed mid-response. */
function openRequest(port: number): { response: Promise<http.IncomingMessage | undefined>; abandon(): void } {
  const req = http.get({ host: '127.0.0.1', port, path: '/', agent: false });
  const response = new Promise<http.IncomingMessage | undefined>((resolve) => {
    req.on('response', resolve);
    req.on('error', () => resolve(undefined));
  });
  return { response, abandon: () => req.destroy() };
}

/**
 * Sends requests to the held route until one is served (the route then finishes it), for at most
 * 2 s: the status of the last, and so 200 unless the slot never came back.
 */
async function servedSoon(app: App, held: ReturnType<typeof heldRoute>): Promise<number> {
  const deadline = Date.now() + 2_000;
  for (;;) {
    const next = app.send();
    const started = held.started().then(() => 'started' as const);
    if ((await Promise.race([next, started])) === 'started') held.finish();
    const { status } = await next;
    if (status !== 429 || Date.now() > deadline) return status;
    await delay(5);
  }
}

describe.each(STORES)('on %s', (_storeName, makeStore) => {
  describe.each(FRAMEWORK_ROWS)('%s', (_frameworkName, framework) => {
    /** An app on a new store allowing one request in progress at a time, on the route `held` holds. */
    const oneSlotApp = (held: ReturnType<typeof heldRoute>, name: string): Promise<App> =>
      framework.start({ concurrency: 1 }, { store: makeStore(), clock: () => Date.now(), prefix: uniquePrefix(name), route: held.route });

    test('a slot is held while the response is in progress and given back when it is sent', async () => {
      const held = heldRoute();
      const app = await oneSlotApp(held, 'inflight');
      const first = openRequest(app.port);
      await held.started();
      const refused = await app.send();
      expect(refused.status).toBe(429);
      expect(refused.headers['retry-after']).toBeUndefined();
      // No rate tiers: no rate headers either.
      expect(refused.headers['x-ratelimit-limit']).toBeUndefined();
      expect(refused.body).toEqual({ error: 'Too Many Requests', retryAfter: null });
      held.finish();
      expect((await first.response)?.statusCode).toBe(200);
      // The slot is given back just after the response went out: the next request finds it free
      // once the release has reached the store (bounded wait).
      for (let i = 0; i < 3; i++) expect(await servedSoon(app, held)).toBe(200);
      expect(app.hits()).toBe(4);
    });

    test('a client that goes away mid-response gives its slot back', async () => {
      const held = heldRoute();
      const app = await oneSlotApp(held, 'gone');
      const first = openRequest(app.port);
      await held.started();
      expect((await app.send()).status).toBe(429);
      first.abandon();
      const status = await servedSoon(app, held);
      expect(status).toBe(200);
    });

    test('a refusal by the bound has its own status; the rate headers are those of the tiers, with no Retry-After', async () => {
      const held = heldRoute();
      const app = await framework.start(
        { concurrency: 1, concurrencyStatusCode: 503, limit: 10, window: '1m' },
        { store: makeStore(), clock: () => START, prefix: uniquePrefix('status'), route: held.route },
      );
      const first = openRequest(app.port);
      await held.started();
      const refused = await app.send();
      expect(refused.status).toBe(503);
      expect(refused.headers['retry-after']).toBeUndefined();
      // The refused request counted in no tier: 9 of 10 left, as after the first.
      expect(refused.headers['x-ratelimit-remaining']).toBe('9');
      held.finish();
      await first.response;
      // Refused by the rate tier instead: the usual 429, with its exact Retry-After.
      const limitedApp = await framework.start(
        { concurrency: 5, limit: 1, window: '1m' },
        { store: makeStore(), clock: () => START, prefix: uniquePrefix('rate') },
      );
      expect((await limitedApp.send()).status).toBe(200);
      const rateRefused = await limitedApp.send();
      expect(rateRefused.status).toBe(429);
      // The sliding window carries the one counted into the next window: 60 s + 60 s.
      expect(rateRefused.headers['retry-after']).toBe('120');
    });
  });
});

onRedis.describe('across processes, on Redis', () => {
  const processes: AppProcess[] = [];
  afterEach(async () => {
    await Promise.all(processes.splice(0).map((child) => child.kill()));
  });

  test('ten slow requests over two app processes (Express and Fastify) with concurrency 3: never more than three in progress', async () => {
    const prefix = uniquePrefix('two-processes');
    const options = { concurrency: 3 };
    const apps = await Promise.all(
      (['express', 'fastify'] as const).map((kind) => startAppProcess({ kind, redisUrl: redisUrl(), prefix, options })),
    );
    processes.push(...apps);
    const served: { pid: number; start: number; end: number }[] = [];
    let refusals = 0;
    await Promise.all(
      Array.from({ length: 10 }, async (_, i) => {
        const port = apps[i % 2].value;
        for (;;) {
          const response = await fetch(`http://127.0.0.1:${port}/slow?ms=250`);
          if (response.status === 200) {
            served.push((await response.json()) as { pid: number; start: number; end: number });
            return;
          }
          expect(response.status).toBe(429);
          expect(response.headers.get('retry-after')).toBeNull();
          refusals++;
          await delay(20);
        }
      }),
    );
    expect(served).toHaveLength(10);
    expect(new Set(served.map((request) => request.pid)).size).toBe(2);
    expect(refusals).toBeGreaterThanOrEqual(7);
    // The most requests in progress at once, from when each handler began and finished.
    const events = served.flatMap((request) => [
      [request.start, 1],
      [request.end, -1],
    ]);
    events.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    let inProgress = 0;
    let most = 0;
    for (const [, change] of events) {
      inProgress += change;
      most = Math.max(most, inProgress);
    }
    expect(most).toBe(3);
  }, 30_000);

  test('slots held by a process that was SIGKILLed come back after leaseMs, in the store clock', async () => {
    const prefix = uniquePrefix('killed');
    const options = { concurrency: 2, leaseMs: 1_500 };
    const holder = await startAppProcess({ kind: 'hold', redisUrl: redisUrl(), prefix, options, identifier: 'u', count: 2 });
    processes.push(holder);
    await holder.kill();
    const client = redisClient();
    try {
      const limiter = createLimiter({ store: new RedisStore({ client }), prefix, ...options });
      expect(await limiter.check('u')).toMatchObject({ allowed: false, concurrency: { inProgress: 2, refused: true } });
      let decision = await limiter.check('u');
      while (!decision.allowed && Date.now() < holder.value + 5_000) {
        await delay(20);
        decision = await limiter.check('u');
      }
      const backAfter = Date.now() - holder.value;
      expect(decision.allowed).toBe(true);
      // Not before the leases' expiry (taken after `holder.value`), and soon after it.
      expect(backAfter).toBeGreaterThanOrEqual(1_500);
      expect(backAfter).toBeLessThan(1_500 + 2_000);
      expect(decision.concurrency).toMatchObject({ limit: 2, refused: false });
      // This lease, and the holder's second one when it was taken a few milliseconds after its first
      // and the poll fell between their expiries.
      expect([1, 2]).toContain(decision.concurrency?.inProgress);
    } finally {
      await client.quit();
    }
  }, 30_000);
});
