/**
 * `RatewardenThrottlerStorage`, with its defaults, under @nestjs/throttler's own guard, in real
 * NestJS 11 apps built with @nestjs/testing on @nestjs/platform-express and
 * @nestjs/platform-fastify, counting in a MemoryStore, the run's standalone Redis and its
 * three-master cluster: what the throttler's README promises holds when only the storage changes.
 * The global guard and its headers, each hit lasting `ttl`, `blockDuration` (and the guard's
 * default of `ttl`) with the key starting afresh when a block ends, `@Throttle` and
 * `@SkipThrottle`, several named throttlers, values as functions of the context, `errorMessage`
 * and `ignoreUserAgents`. Time is the storage's manual clock. (NestJS 12 is ES modules only, which
 * Jest cannot load: the tarball test runs it in Node.)
 */
import 'reflect-metadata';
import { Controller, Get, type INestApplication, Module, type Type } from '@nestjs/common';
import { APP_GUARD } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { Test } from '@nestjs/testing';
import { SkipThrottle, Throttle, ThrottlerGuard, ThrottlerModule, type ThrottlerModuleOptions } from '@nestjs/throttler';
import request from 'supertest';
import { RatewardenThrottlerStorage, type RatewardenThrottlerStorageOptions } from '../../src/nestjs';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { storesWithClusterOfTestFile } from '../helpers/stores';

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

  @Throttle({ default: { limit: 2, ttl: 60_000, blockDuration: 30_000 } })
  @Get('/login')
  login() {
    return 'login';
  }

  @SkipThrottle()
  @Get('/free')
  free() {
    return 'free';
  }
}

/** The routes of the README's three named throttlers, `short`, `default` and `long`. */
@Controller()
class NamedController {
  @Get('/')
  root() {
    return 'ok';
  }

  @Throttle({ short: { limit: 3, ttl: 1_000 } })
  @Get('/bursty')
  bursty() {
    return 'bursty';
  }

  @SkipThrottle({ short: true })
  @Get('/no-short')
  noShort() {
    return 'no short';
  }

  @SkipThrottle({ default: true, long: true })
  @Get('/short-only')
  shortOnly() {
    return 'short only';
  }
}

const NAMED = [
  { name: 'short', limit: 1, ttl: 1_000 },
  { name: 'default', limit: 2, ttl: 5_000 },
  { name: 'long', limit: 5, ttl: 60_000 },
];

const PLATFORMS: [string, () => ExpressAdapter | FastifyAdapter][] = [
  ['@nestjs/platform-express', () => new ExpressAdapter()],
  ['@nestjs/platform-fastify', () => new FastifyAdapter()],
];

const STORES = storesWithClusterOfTestFile();

const apps: INestApplication[] = [];
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close()));
});

describe.each(STORES)('on $name', (kind) => {
  describe.each(PLATFORMS)('%s', (platform, makeAdapter) => {
    let clock: ReturnType<typeof manualClock>;
    beforeEach(() => {
      clock = manualClock(START);
    });
    const at = (ms: number) => clock.set(START + ms);

    /** A Nest app with the throttler module, the storage, the global guard and `controller`; a supertest agent on it. */
    async function start(
      options: Omit<Exclude<ThrottlerModuleOptions, unknown[]>, 'storage'>,
      controller: Type = AppController,
      storageOptions: RatewardenThrottlerStorageOptions = {},
    ) {
      const storage = new RatewardenThrottlerStorage({
        store: kind.make(),
        clock: clock.now,
        prefix: uniquePrefix('nest'),
        ...storageOptions,
      });
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

    test('the global guard: limit per ttl, each hit lasting ttl, X-RateLimit headers, then a 429 whose Retry-After is exact', async () => {
      const agent = await start({ throttlers: [{ limit: 2, ttl: 10_000, blockDuration: 0 }] });
      const first = await agent.get('/');
      expect(first.status).toBe(200);
      expect(first.headers).toMatchObject({ 'x-ratelimit-limit': '2', 'x-ratelimit-remaining': '1', 'x-ratelimit-reset': '10' });
      at(4_000);
      // The reset is when quota next comes back: the first hit leaves at 10 s.
      expect((await agent.get('/')).headers).toMatchObject({ 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '6' });
      const denied = await agent.get('/');
      expect(denied.status).toBe(429);
      expect(denied.headers['retry-after']).toBe('6');
      at(9_999);
      expect((await agent.get('/')).headers['retry-after']).toBe('1');
      at(10_000);
      // The first hit has lasted its 10 s; the second lasts until 14 s.
      const through = await agent.get('/');
      expect(through.status).toBe(200);
      expect(through.headers).toMatchObject({ 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '4' });
      expect((await agent.get('/')).headers['retry-after']).toBe('4');
    });

    test("blockDuration, by default the throttler's ttl: a denial blocks for that long, then the client starts afresh", async () => {
      const agent = await start({ throttlers: [{ limit: 1, ttl: 1_000 }] });
      expect((await agent.get('/')).status).toBe(200);
      const denied = await agent.get('/');
      expect(denied.status).toBe(429);
      expect(denied.headers['retry-after']).toBe('1');
      at(999);
      expect((await agent.get('/')).status).toBe(429);
      at(1_000);
      expect((await agent.get('/')).status).toBe(200);
    });

    test('an explicit blockDuration longer than the ttl left: refused for exactly that long, then the whole limit is back', async () => {
      const agent = await start({ throttlers: [{ limit: 100, ttl: 60_000, blockDuration: 0 }] });
      for (let i = 0; i < 2; i++) expect((await agent.get('/login')).status).toBe(200);
      const denied = await agent.get('/login');
      expect(denied.status).toBe(429);
      expect(denied.headers['retry-after']).toBe('30');
      at(29_000);
      const late = await agent.get('/login');
      expect(late.status).toBe(429);
      expect(late.headers['retry-after']).toBe('1');
      at(30_000);
      // Both hits would last until 60 s: the block's end forgot them, as the throttler's own storage does.
      const back = await agent.get('/login');
      expect(back.status).toBe(200);
      expect(back.headers['x-ratelimit-remaining']).toBe('1');
      expect((await agent.get('/login')).status).toBe(200);
      expect((await agent.get('/login')).headers['retry-after']).toBe('30');
    });

    test('@Throttle overrides the limit and ttl of a route, in its own count; @SkipThrottle is never limited', async () => {
      const agent = await start({ throttlers: [{ limit: 100, ttl: 60_000 }] });
      expect((await agent.get('/strict')).headers['x-ratelimit-limit']).toBe('1');
      const denied = await agent.get('/strict');
      expect(denied.status).toBe(429);
      // blockDuration defaults to the route's ttl.
      expect(denied.headers['retry-after']).toBe('5');
      expect((await agent.get('/')).headers['x-ratelimit-remaining']).toBe('99');
      for (let i = 0; i < 5; i++) {
        const free = await agent.get('/free');
        expect(free.status).toBe(200);
        expect(free.headers['x-ratelimit-limit']).toBeUndefined();
      }
    });

    test('named throttlers: each counts with its own limit and ttl, its headers carry its name, and a denial names its throttler', async () => {
      const agent = await start({ throttlers: NAMED.map((throttler) => ({ ...throttler, blockDuration: 0 })) }, NamedController);
      const first = await agent.get('/');
      expect(first.headers).toMatchObject({
        'x-ratelimit-limit-short': '1',
        'x-ratelimit-remaining-short': '0',
        'x-ratelimit-limit': '2',
        'x-ratelimit-remaining': '1',
        'x-ratelimit-limit-long': '5',
        'x-ratelimit-remaining-long': '4',
      });
      const short = await agent.get('/');
      expect(short.status).toBe(429);
      expect(short.headers['retry-after-short']).toBe('1');
      expect(short.headers['retry-after']).toBeUndefined();
      at(1_000);
      expect((await agent.get('/')).headers['x-ratelimit-remaining']).toBe('0');
      at(2_000);
      // Two hits within 5 s: the default throttler refuses, and is the one named.
      const byDefault = await agent.get('/');
      expect(byDefault.status).toBe(429);
      expect(byDefault.headers['retry-after']).toBe('3');
      at(5_000);
      // Each hit lasts its own 5 s: the one of 0 s has left, the one of 1 s still counts.
      expect((await agent.get('/')).headers).toMatchObject({ 'x-ratelimit-remaining': '0', 'x-ratelimit-remaining-long': '2' });
      at(6_000);
      expect((await agent.get('/')).headers).toMatchObject({ 'x-ratelimit-remaining': '0', 'x-ratelimit-remaining-long': '1' });
      at(11_000);
      expect((await agent.get('/')).headers).toMatchObject({ 'x-ratelimit-remaining': '1', 'x-ratelimit-remaining-long': '0' });
      at(12_000);
      const byLong = await agent.get('/');
      expect(byLong.status).toBe(429);
      // The first hit of the long throttler leaves at 60 s.
      expect(byLong.headers['retry-after-long']).toBe('48');
    });

    test('@Throttle and @SkipThrottle by throttler name: overriding or skipping one leaves the others as they are', async () => {
      const agent = await start({ throttlers: NAMED.map((throttler) => ({ ...throttler, blockDuration: 0 })) }, NamedController);
      const bursty = [];
      for (let i = 0; i < 4; i++) bursty.push(await agent.get('/bursty'));
      // The short throttler allows 3 here, but the default one allows 2 in 5 s.
      expect(bursty.map((response) => response.status)).toEqual([200, 200, 429, 429]);
      expect(bursty[0].headers['x-ratelimit-limit-short']).toBe('3');
      expect(bursty[2].headers['retry-after']).toBe('5');
      // No short throttler on this route: two at once pass, the default throttler refuses the third.
      const noShort = [];
      for (let i = 0; i < 3; i++) noShort.push(await agent.get('/no-short'));
      expect(noShort.map((response) => response.status)).toEqual([200, 200, 429]);
      expect(noShort[0].headers['x-ratelimit-limit-short']).toBeUndefined();
      // Only the short throttler: one a second, however many seconds.
      for (let i = 0; i < 7; i++) {
        at(20_000 + i * 1_000);
        const response = await agent.get('/short-only');
        expect(response.status).toBe(200);
        expect(response.headers['x-ratelimit-limit']).toBeUndefined();
        expect(response.headers['x-ratelimit-limit-long']).toBeUndefined();
      }
    });

    test('limit, ttl and blockDuration as functions of the context reach the storage as the guard resolves them', async () => {
      const plan = (context: Parameters<ThrottlerGuard['canActivate']>[0]) =>
        context.switchToHttp().getRequest<{ headers: Record<string, string> }>().headers['x-plan'];
      const agent = await start({
        throttlers: [
          {
            limit: (context) => (plan(context) === 'pro' ? 3 : 1),
            ttl: (context) => (plan(context) === 'pro' ? 60_000 : 2_000),
            blockDuration: (context) => (plan(context) === 'pro' ? 0 : 7_000),
            getTracker: (req) => (req as { headers: Record<string, string> }).headers['x-plan'] ?? 'none',
          },
        ],
      });
      const pro = [];
      for (let i = 0; i < 4; i++) pro.push(await agent.get('/').set('x-plan', 'pro'));
      expect(pro.map((response) => response.status)).toEqual([200, 200, 200, 429]);
      expect(pro[3].headers['retry-after']).toBe('60');
      expect((await agent.get('/')).headers['x-ratelimit-limit']).toBe('1');
      const free = await agent.get('/');
      expect(free.status).toBe(429);
      expect(free.headers['retry-after']).toBe('7');
    });

    test('errorMessage sees the tracker and totalHits past the limit; ignoreUserAgents are never limited', async () => {
      const agent = await start({
        throttlers: [{ limit: 2, ttl: 60_000 }],
        errorMessage: (_context, detail) => `${detail.tracker} made ${detail.totalHits} of ${detail.limit}`,
        getTracker: () => 'client-1',
        ignoreUserAgents: [/monitor/],
      });
      for (let i = 0; i < 2; i++) await agent.get('/');
      const denied = await agent.get('/');
      expect(denied.status).toBe(429);
      expect(JSON.stringify(denied.body)).toContain('client-1 made 3 of 2');
      for (let i = 0; i < 3; i++) {
        const monitor = await agent.get('/').set('user-agent', 'uptime-monitor/1.0');
        expect(monitor.status).toBe(200);
        expect(monitor.headers['x-ratelimit-limit']).toBeUndefined();
      }
    });

    test("algorithm: 'sliding-window', one option away: a hit also weighs into the next window", async () => {
      const agent = await start({ throttlers: [{ limit: 1, ttl: 1_000, blockDuration: 0 }] }, AppController, {
        algorithm: 'sliding-window',
      });
      expect((await agent.get('/')).status).toBe(200);
      at(1_000);
      // The default storage, and this one by default, let this request through.
      const denied = await agent.get('/');
      expect(denied.status).toBe(429);
      expect(denied.headers['retry-after']).toBe('1');
      at(2_000);
      expect((await agent.get('/')).status).toBe(200);
    });
  });
});
