/**
 * `RatewardenThrottlerStorage` under @nestjs/throttler's own guard, in real NestJS 11 apps built
 * with @nestjs/testing, on @nestjs/platform-express and @nestjs/platform-fastify, counting in the
 * run's standalone Redis and in its three-master cluster: the global guard, `@Throttle`
 * overrides, `@SkipThrottle`, named throttlers, limits that are functions of the context,
 * `blockDuration`, and the 429 with an exact `Retry-After`. Time is the storage's manual clock.
 * (NestJS 12 is ES modules only, which Jest cannot load: the tarball test runs it in Node.)
 */
import 'reflect-metadata';
import { Controller, Get, type INestApplication, Module, type Type } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { SkipThrottle, Throttle, ThrottlerGuard, ThrottlerModule, type ThrottlerModuleOptions } from '@nestjs/throttler';
import type { Cluster, Redis } from 'ioredis';
import request from 'supertest';
import { RedisStore } from '../../src';
import { RatewardenThrottlerStorage } from '../../src/nestjs';
import { clusterClient, manualClock, redisClient, uniquePrefix } from '../helpers/redis';

/** The start of a minute: every window of these tests starts here. */
const START = 1_800_000_000_000;

@Controller()
class AppController {
  @Get('/')
  root() {
    return 'ok';
  }

  @Throttle({ default: { limit: 1, ttl: 5_000 } })
  @Get('/strict')
  strict() {
    return 'strict';
  }

  @SkipThrottle()
  @Get('/free')
  free() {
    return 'free';
  }
}

@Controller()
class NamedController {
  @Get('/')
  root() {
    return 'ok';
  }

  @Throttle({ short: { limit: 1, ttl: 1_000 } })
  @Get('/one-per-second')
  strict() {
    return 'strict';
  }

  @SkipThrottle({ long: true })
  @Get('/short-only')
  shortOnly() {
    return 'short only';
  }
}

let standalone: Redis;
let cluster: Cluster;
beforeAll(() => {
  standalone = redisClient();
  cluster = clusterClient();
});
afterAll(async () => {
  await Promise.all([standalone.quit(), cluster.quit()]);
});

const STORES: [string, () => RedisStore][] = [
  ['RedisStore (standalone)', () => new RedisStore({ client: standalone })],
  ['RedisStore (cluster)', () => new RedisStore({ client: cluster })],
];

const PLATFORMS: [string, () => ExpressAdapter | FastifyAdapter][] = [
  ['@nestjs/platform-express', () => new ExpressAdapter()],
  ['@nestjs/platform-fastify', () => new FastifyAdapter()],
];

const apps: INestApplication[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close()));
});

describe.each(STORES)('on %s', (_storeName, makeStore) => {
  describe.each(PLATFORMS)('%s', (platform, makeAdapter) => {
    let clock: ReturnType<typeof manualClock>;
    let storage: RatewardenThrottlerStorage;
    beforeEach(() => {
      clock = manualClock(START);
      // The sliding window counter, and a block's end keeping the counts: the figures below are theirs.
      storage = new RatewardenThrottlerStorage({
        store: makeStore(),
        clock: clock.now,
        prefix: uniquePrefix('nest'),
        algorithm: 'sliding-window',
        afterBlock: 'keep',
      });
    });

    /** A Nest app with the throttler module, `storage`, the global guard and `controller`; a supertest agent on it. */
    async function start(options: Omit<Exclude<ThrottlerModuleOptions, unknown[]>, 'storage'>, controller: Type = AppController) {
      @Module({
        imports: [ThrottlerModule.forRoot({ ...options, storage })],
        controllers: [controller],
        providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
      })
      class AppModule {}
      const moduleRef = await Test.createTestingModule({ imports: [AppModule] }).compile();
      const app = moduleRef.createNestApplication(makeAdapter(), { logger: false });
      apps.push(app);
      await app.init();
      if (platform.endsWith('fastify')) await (app.getHttpAdapter().getInstance() as { ready(): Promise<unknown> }).ready();
      return request(app.getHttpServer());
    }

    test('the global guard: limit per ttl, X-RateLimit headers, then a 429 whose Retry-After is exact', async () => {
      const agent = await start({ throttlers: [{ limit: 2, ttl: 10_000, blockDuration: 0 }] });
      const first = await agent.get('/');
      expect(first.status).toBe(200);
      expect(first.headers['x-ratelimit-limit']).toBe('2');
      expect(first.headers['x-ratelimit-remaining']).toBe('1');
      expect((await agent.get('/')).headers['x-ratelimit-remaining']).toBe('0');
      const denied = await agent.get('/');
      expect(denied.status).toBe(429);
      // Two counts at the start of a 10 s window weigh 2 x (1 - t/10 s) in the next: room for one at t = 5 s.
      expect(denied.headers['retry-after']).toBe('15');
      clock.set(START + 14_999);
      const stillDenied = await agent.get('/');
      expect(stillDenied.status).toBe(429);
      expect(stillDenied.headers['retry-after']).toBe('1');
      clock.set(START + 15_000);
      expect((await agent.get('/')).status).toBe(200);
    });

    test("blockDuration, the guard's default of ttl: a denial blocks for that long, exactly", async () => {
      const agent = await start({ throttlers: [{ limit: 1, ttl: 1_000 }] });
      expect((await agent.get('/')).status).toBe(200);
      // Half a window on, the count of the first still weighs 0.5: denied, and blocked for 1 s.
      clock.advance(1_500);
      const denied = await agent.get('/');
      expect(denied.status).toBe(429);
      expect(denied.headers['retry-after']).toBe('1');
      clock.advance(999);
      expect((await agent.get('/')).status).toBe(429);
      clock.advance(1);
      expect((await agent.get('/')).status).toBe(200);
    });

    test('an explicit blockDuration is the blockFor of the check', async () => {
      const agent = await start({ throttlers: [{ limit: 1, ttl: 1_000, blockDuration: 30_000 }] });
      await agent.get('/');
      expect((await agent.get('/')).headers['retry-after']).toBe('30');
      clock.advance(29_000);
      const late = await agent.get('/');
      expect(late.status).toBe(429);
      expect(late.headers['retry-after']).toBe('1');
      clock.advance(1_000);
      expect((await agent.get('/')).status).toBe(200);
    });

    test('@Throttle overrides the limit and ttl of a route, in its own count; @SkipThrottle is never limited', async () => {
      const agent = await start({ throttlers: [{ limit: 100, ttl: 60_000, blockDuration: 0 }] });
      expect((await agent.get('/strict')).headers['x-ratelimit-limit']).toBe('1');
      const denied = await agent.get('/strict');
      expect(denied.status).toBe(429);
      // One count at the start of a 5 s window: room again once it weighs nothing, at the end of the next.
      expect(denied.headers['retry-after']).toBe('10');
      expect((await agent.get('/')).headers['x-ratelimit-remaining']).toBe('99');
      for (let i = 0; i < 5; i++) {
        const free = await agent.get('/free');
        expect(free.status).toBe(200);
        expect(free.headers['x-ratelimit-limit']).toBeUndefined();
      }
    });

    test('limit and ttl as functions of the context reach the check unchanged', async () => {
      const plan = (context: Parameters<ThrottlerGuard['canActivate']>[0]) =>
        context.switchToHttp().getRequest<{ headers: Record<string, string> }>().headers['x-plan'];
      const agent = await start({
        throttlers: [
          {
            limit: (context) => (plan(context) === 'pro' ? 3 : 1),
            ttl: (context) => (plan(context) === 'pro' ? 60_000 : 2_000),
            blockDuration: 0,
            getTracker: (req) => (req as { headers: Record<string, string> }).headers['x-plan'] ?? 'none',
          },
        ],
      });
      const pro = [];
      for (let i = 0; i < 4; i++) pro.push((await agent.get('/').set('x-plan', 'pro')).status);
      expect(pro).toEqual([200, 200, 200, 429]);
      expect((await agent.get('/')).headers['x-ratelimit-limit']).toBe('1');
      const free = await agent.get('/');
      expect(free.status).toBe(429);
      // One count at the start of a 2 s window: 4 s.
      expect(free.headers['retry-after']).toBe('4');
    });

    test('named throttlers: each counts with its own limit and ttl, and a denial names its throttler', async () => {
      const agent = await start(
        {
          throttlers: [
            { name: 'short', limit: 2, ttl: 1_000, blockDuration: 0 },
            { name: 'long', limit: 3, ttl: 60_000, blockDuration: 0 },
          ],
        },
        NamedController,
      );
      const first = await agent.get('/');
      expect(first.headers['x-ratelimit-limit-short']).toBe('2');
      expect(first.headers['x-ratelimit-limit-long']).toBe('3');
      expect((await agent.get('/')).status).toBe(200);
      const short = await agent.get('/');
      expect(short.status).toBe(429);
      // The guard names the header after the throttler.
      expect(short.headers['retry-after-short']).toBe('2');
      expect(short.headers['retry-after']).toBeUndefined();
      clock.advance(2_000);
      expect((await agent.get('/')).status).toBe(200);
      clock.advance(2_000);
      const long = await agent.get('/');
      expect(long.status).toBe(429);
      // Three counts in the first 60 s window weigh 3 x (1 - t/60 s) in the next: room for one at t = 20 s.
      expect(long.headers['retry-after-long']).toBe('76');

      expect((await agent.get('/one-per-second')).status).toBe(200);
      expect((await agent.get('/one-per-second')).headers['retry-after-short']).toBe('2');
      // Skipping `long` leaves the route to `short` alone: four requests, past long's limit, all allowed.
      for (let i = 0; i < 4; i++) {
        clock.advance(2_000);
        const response = await agent.get('/short-only');
        expect(response.status).toBe(200);
        expect(response.headers['x-ratelimit-limit-long']).toBeUndefined();
      }
    });
  });
});
