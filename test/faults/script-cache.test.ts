/**
 * The script cache lost: `SCRIPT FLUSH` on a live server, and a full restart (SIGKILL,
 * start again empty on the same port). Proves that the next check, over real HTTP and
 * directly on the limiter, succeeds without any error reaching the user: 200 with
 * rate-limit headers, onError never called for SCRIPT FLUSH; after the restart, once the
 * client is connected again, the first check succeeds and counts from zero. With every
 * ioredis and node-redis client configuration.
 */
import { type AlgorithmName, createLimiter, RedisStore } from '../../src';
import { ALGORITHM_NAMES } from '../../src/algorithms';
import { expectCounted } from '../helpers/decisions';
import { closeAgent, FRAMEWORKS, get, startApp } from '../helpers/http-load';
import { watchUnhandledRejections } from '../helpers/process';
import {
  CLIENT_CONFIGS,
  disconnect,
  faultClient,
  quietClient,
  RECOMMENDED_CONFIGS,
  type RedisProcess,
  startFaultRedis,
  waitReady,
} from '../helpers/redis-faults';

const ALGORITHMS: readonly AlgorithmName[] = ALGORITHM_NAMES;
let tests = 0;
/** A prefix of its own for each test: they share one server. */
const prefix = (name: string): string => `${name}-${++tests}`;

let redis: RedisProcess;
let admin: ReturnType<typeof quietClient>;

beforeAll(async () => {
  redis = await startFaultRedis();
  admin = quietClient(redis.url);
  await waitReady(admin);
});
afterAll(async () => {
  closeAgent();
  admin.disconnect();
  await redis.stop();
});

describe.each(CLIENT_CONFIGS)('client: %s', (_configName, clientConfig) => {
  test.each(ALGORITHMS)('%s: SCRIPT FLUSH between two checks, and between two pipelined bursts', async (algorithm) => {
    const client = faultClient(redis.url, clientConfig);
    const rejections = watchUnhandledRejections();
    try {
      await waitReady(client);
      const limiter = createLimiter({
        store: new RedisStore({ client }),
        algorithm,
        limit: 100,
        window: '1h',
        prefix: prefix(`flush-${clientConfig.library}-${algorithm}`),
      });
      expect((await limiter.check('a')).remaining).toBe(99);
      expect(await admin.script('FLUSH')).toBe('OK');
      expect((await limiter.check('a')).remaining).toBe(98);
      // Many checks in flight when the cache is empty (one auto-pipeline with enableAutoPipelining).
      expect(await admin.script('FLUSH')).toBe('OK');
      const burst = await Promise.all(Array.from({ length: 20 }, () => limiter.check('a')));
      expect(burst.every((decision) => decision.allowed)).toBe(true);
      expectCounted(algorithm, (await limiter.peek('a', { cost: 0 })).estimated, 22);
      expect(rejections.reasons).toEqual([]);
    } finally {
      rejections.stop();
      disconnect(client);
    }
  });
});

describe.each(FRAMEWORKS)('%s', (framework) => {
  test.each(RECOMMENDED_CONFIGS)(
    'SCRIPT FLUSH, client %s: the next request gets 200 with headers and onError is not called',
    async (_configName, clientConfig) => {
      const client = faultClient(redis.url, clientConfig);
      const errors: unknown[] = [];
      let app: Awaited<ReturnType<typeof startApp>> | undefined;
      try {
        await waitReady(client);
        app = await startApp(framework, {
          store: new RedisStore({ client }),
          limit: 10,
          window: '1h',
          prefix: prefix(`flush-http-${clientConfig.library}-${framework}`),
          identify: (request) => request.headers['x-id'] as string | undefined,
          onError: (error) => errors.push(error),
        });
        expect(await get(app.port, { 'x-id': 'a' })).toMatchObject({ status: 200, limited: true });
        await admin.script('FLUSH');
        const after = await Promise.all(Array.from({ length: 12 }, () => get(app!.port, { 'x-id': 'a' })));
        // 9 left of 10: exactly 9 more pass, counted in the same key as before the flush.
        expect(after.filter((sample) => sample.status === 200 && sample.limited)).toHaveLength(9);
        expect(after.filter((sample) => sample.status === 429 && sample.limited)).toHaveLength(3);
        expect(errors).toEqual([]);
      } finally {
        await app?.close();
        disconnect(client);
      }
    },
  );

  test.each(CLIENT_CONFIGS)(
    'full restart, client: %s: once reconnected, the next request gets 200 with headers, counted from zero',
    async (_configName, clientConfig) => {
      const client = faultClient(redis.url, clientConfig);
      const errors: unknown[] = [];
      const rejections = watchUnhandledRejections();
      let app: Awaited<ReturnType<typeof startApp>> | undefined;
      try {
        await waitReady(client);
        app = await startApp(framework, {
          store: new RedisStore({ client }),
          limit: 10,
          window: '1h',
          prefix: prefix(`restart-http-${clientConfig.library}-${framework}`),
          identify: (request) => request.headers['x-id'] as string | undefined,
          onError: (error) => errors.push(error),
        });
        for (let i = 0; i < 5; i++) expect(await get(app.port, { 'x-id': 'a' })).toMatchObject({ status: 200, limited: true });
        await redis.kill();
        await redis.restart();
        await waitReady(client);
        errors.length = 0;
        const next = await get(app.port, { 'x-id': 'a' });
        expect(next).toMatchObject({ status: 200, limited: true });
        expect(errors).toEqual([]);
        const rest = await Promise.all(Array.from({ length: 11 }, () => get(app!.port, { 'x-id': 'a' })));
        // Empty after the restart: 10 in all pass again, no error.
        expect(rest.filter((sample) => sample.status === 200 && sample.limited)).toHaveLength(9);
        expect(rest.filter((sample) => sample.status === 429)).toHaveLength(2);
        expect(errors).toEqual([]);
        expect(rejections.reasons).toEqual([]);
      } finally {
        await app?.close();
        rejections.stop();
        disconnect(client);
      }
    },
  );
});
