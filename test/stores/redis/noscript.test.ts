/**
 * NOSCRIPT recovery: after SCRIPT FLUSH (or a Redis restart) the next check reloads the
 * script by itself and succeeds, counting on from the same state, through every client library;
 * after FUNCTION FLUSH, the next check runs as a script and the library is loaded again.
 */
import { createHash } from 'node:crypto';
import type { Redis } from 'ioredis';
import { createLimiter, type LimiterOptions, RedisStore } from '../../../src';
import { ALGORITHM_NAMES, ALGORITHMS as SCRIPTS } from '../../../src/algorithms';
import type { AlgorithmName } from '../../../src/algorithms/types';
import { type RedisProcess, startRedis } from '../../../support/redis-server';
import {
  closeClient,
  isReady,
  manualClock,
  REDIS_CLIENTS,
  redisClient,
  redisLimiter,
  type StoreClient,
  uniquePrefix,
} from '../../helpers/redis';

const ALGORITHMS: readonly AlgorithmName[] = ALGORITHM_NAMES;
let admin: Redis;
beforeAll(() => {
  admin = redisClient();
});
afterAll(() => admin.quit());

function sha1(text: string): string {
  return createHash('sha1').update(text).digest('hex');
}

async function waitUntil(predicate: () => Promise<boolean>, what: string): Promise<void> {
  for (let waited = 0; !(await predicate()); waited += 10) {
    if (waited > 10_000) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe.each(REDIS_CLIENTS)('%s', (_name, kind) => {
  let client: StoreClient;
  beforeAll(async () => {
    client = await kind.standalone();
  });
  afterAll(() => closeClient(client));

  /** A limiter whose store runs scripts only (`functions: false`). */
  function scriptsLimiter(options: Omit<LimiterOptions, 'store' | 'prefix'>) {
    return createLimiter({ store: new RedisStore({ client, functions: false }), prefix: uniquePrefix('noscript'), ...options });
  }

  describe.each(ALGORITHMS)('%s after SCRIPT FLUSH', (algorithm) => {
    test('the next check succeeds and counts on', async () => {
      const clock = manualClock();
      const limiter = scriptsLimiter({ limit: 5, window: '1h', algorithm, clock: clock.now, denyCacheSize: 0 });
      expect((await limiter.check('a', { cost: 2 })).allowed).toBe(true);
      const sha = sha1(SCRIPTS[algorithm].check.lua);
      expect(await admin.script('EXISTS', sha)).toEqual([1]);
      await admin.script('FLUSH');
      expect(await admin.script('EXISTS', sha)).toEqual([0]);

      const after = await limiter.check('a', { cost: 2 });
      expect(after.allowed).toBe(true);
      expect(after.estimated).toBe(4);
      expect(await admin.script('EXISTS', sha)).toEqual([1]);
      expect((await limiter.check('a', { cost: 2 })).allowed).toBe(false);
    });

    test('many parallel checks right after a flush all succeed, and count exactly', async () => {
      const limiter = scriptsLimiter({ limit: 30, window: '1h', algorithm, denyCacheSize: 0 });
      await limiter.check('warm');
      await admin.script('FLUSH');
      const decisions = await Promise.all(Array.from({ length: 50 }, () => limiter.check('p')));
      expect(decisions.filter((decision) => decision.allowed)).toHaveLength(30);
      await admin.script('FLUSH');
      await expect(limiter.peek('p')).resolves.toMatchObject({ allowed: false });
    });
  });

  describe.each(ALGORITHMS)('%s after FUNCTION FLUSH', (algorithm) => {
    const { library } = SCRIPTS[algorithm];
    const loaded = async () => ((await admin.function('LIST', 'LIBRARYNAME', library.name)) as unknown[]).length === 1;

    test('the next check succeeds and counts on, and the library is loaded again', async () => {
      const clock = manualClock();
      const limiter = redisLimiter(client, 'nofunction', { limit: 5, window: '1h', algorithm, clock: clock.now, denyCacheSize: 0 });
      expect((await limiter.check('a', { cost: 2 })).allowed).toBe(true);
      await waitUntil(loaded, 'the library to be loaded');
      await admin.function('FLUSH');
      await admin.script('FLUSH');

      const after = await limiter.check('a', { cost: 2 });
      expect(after.allowed).toBe(true);
      expect(after.estimated).toBe(4);
      await waitUntil(loaded, 'the library to be loaded again');
      expect((await limiter.check('a', { cost: 2 })).allowed).toBe(false);
    });

    test('many parallel checks right after a flush all succeed, and count exactly', async () => {
      const limiter = redisLimiter(client, 'nofunction', { limit: 30, window: '1h', algorithm, denyCacheSize: 0 });
      await limiter.check('warm');
      await waitUntil(loaded, 'the library to be loaded');
      await admin.function('FLUSH');
      const decisions = await Promise.all(Array.from({ length: 50 }, () => limiter.check('p')));
      expect(decisions.filter((decision) => decision.allowed)).toHaveLength(30);
      await admin.function('FLUSH');
      await expect(limiter.peek('p')).resolves.toMatchObject({ allowed: false });
    });
  });

  describe('after a Redis restart (scripts and data gone)', () => {
    let server: RedisProcess;
    let restartClient: StoreClient;
    beforeAll(async () => {
      server = await startRedis();
      // Reconnect every 20 ms, so the test does not wait for a back-off.
      restartClient = await kind.standalone(server.url, kind.reconnectingFast);
    });
    afterAll(async () => {
      await closeClient(restartClient);
      await server.stop();
    });

    test('checks work again once the connection is back', async () => {
      const limiter = createLimiter({
        store: new RedisStore({ client: restartClient }),
        limit: 3,
        window: '1h',
        prefix: uniquePrefix('restart'),
        denyCacheSize: 0,
      });
      expect((await limiter.check('a')).allowed).toBe(true);
      await server.kill();
      await waitUntil(async () => !(await isReady(restartClient)), 'the client to see the connection closed');
      await server.restart();
      // The client reconnects; the first check on the new connection loads the script again.
      await waitUntil(() => isReady(restartClient), 'the client to reconnect');
      const decision = await limiter.check('a');
      expect(decision.allowed).toBe(true);
      expect(decision.estimated).toBe(1); // a fresh server: the old count is gone with it
    });
  });
});
