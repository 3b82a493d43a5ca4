/**
 * The script cache lost: `SCRIPT FLUSH` on a live server, and a full restart (SIGKILL,
 * start again empty on the same port). Proves that the next check, over real HTTP and
 * directly on the limiter, succeeds without any error reaching the user: 200 with
 * rate-limit headers, onError never called for SCRIPT FLUSH; after the restart, once the
 * client is connected again, the first check succeeds and counts from zero. With every
 * client configuration of redis-faults.ts.
 */
import { type AlgorithmName, createLimiter, RedisStore } from '../../src';
import { ALGORITHM_NAMES } from '../../src/algorithms';
import { expectCounted } from '../helpers/decisions';
import { type App, closeAgent, FRAMEWORKS, type Framework, get, startApp } from '../helpers/http-load';
import { watchEachTest } from '../helpers/process';
import {
  CLIENT_CONFIGS,
  type FaultClient,
  faultClientsOfEachTest,
  faultRedisOfTestFile,
  RECOMMENDED_CONFIGS,
  waitReady,
} from '../helpers/redis-faults';

const ALGORITHMS: readonly AlgorithmName[] = ALGORITHM_NAMES;
let tests = 0;
/** A prefix of its own for each test: they share one server. */
const prefix = (name: string): string => `${name}-${++tests}`;

const server = faultRedisOfTestFile();
afterAll(closeAgent);
const apps: App[] = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});
const readyClient = faultClientsOfEachTest(() => server.redis.url);
const { rejections } = watchEachTest();

/**
 * An app on `framework` allowing 10 requests an hour per `x-id` on `client`, closed after the
 * test; what reaches its onError lands in `errors`.
 */
async function limitedApp(framework: Framework, client: FaultClient, name: string, errors: unknown[]): Promise<App> {
  const app = await startApp(framework, {
    store: new RedisStore({ client }),
    limit: 10,
    window: '1h',
    prefix: prefix(name),
    identify: (request) => request.headers['x-id'] as string | undefined,
    onError: (error) => errors.push(error),
  });
  apps.push(app);
  return app;
}

describe.each(CLIENT_CONFIGS)('client: %s', (_configName, clientConfig) => {
  test.each(ALGORITHMS)('%s: SCRIPT FLUSH between two checks, and between two pipelined bursts', async (algorithm) => {
    const client = await readyClient(clientConfig);
    const limiter = createLimiter({
      store: new RedisStore({ client }),
      algorithm,
      limit: 100,
      window: '1h',
      prefix: prefix(`flush-${clientConfig.library}-${algorithm}`),
    });
    expect((await limiter.check('a')).remaining).toBe(99);
    expect(await server.admin.script('FLUSH')).toBe('OK');
    expect((await limiter.check('a')).remaining).toBe(98);
    // Many checks in flight when the cache is empty (one auto-pipeline with enableAutoPipelining).
    expect(await server.admin.script('FLUSH')).toBe('OK');
    const burst = await Promise.all(Array.from({ length: 20 }, () => limiter.check('a')));
    expect(burst.every((decision) => decision.allowed)).toBe(true);
    expectCounted(algorithm, (await limiter.peek('a', { cost: 0 })).estimated, 22);
    expect(rejections.reasons).toEqual([]);
  });
});

describe.each(FRAMEWORKS)('%s', (framework) => {
  test.each(RECOMMENDED_CONFIGS)(
    'SCRIPT FLUSH, client %s: the next request gets 200 with headers and onError is not called',
    async (_configName, clientConfig) => {
      const client = await readyClient(clientConfig);
      const errors: unknown[] = [];
      const app = await limitedApp(framework, client, `flush-http-${clientConfig.library}-${framework}`, errors);
      expect(await get(app.port, { 'x-id': 'a' })).toMatchObject({ status: 200, limited: true });
      await server.admin.script('FLUSH');
      const after = await Promise.all(Array.from({ length: 12 }, () => get(app.port, { 'x-id': 'a' })));
      // 9 left of 10: exactly 9 more pass, counted in the same key as before the flush.
      expect(after.filter((sample) => sample.status === 200 && sample.limited)).toHaveLength(9);
      expect(after.filter((sample) => sample.status === 429 && sample.limited)).toHaveLength(3);
      expect(errors).toEqual([]);
    },
  );

  test.each(CLIENT_CONFIGS)(
    'full restart, client: %s: once reconnected, the next request gets 200 with headers, counted from zero',
    async (_configName, clientConfig) => {
      const client = await readyClient(clientConfig);
      const errors: unknown[] = [];
      const app = await limitedApp(framework, client, `restart-http-${clientConfig.library}-${framework}`, errors);
      for (let i = 0; i < 5; i++) expect(await get(app.port, { 'x-id': 'a' })).toMatchObject({ status: 200, limited: true });
      await server.redis.kill();
      await server.redis.restart();
      await waitReady(client);
      errors.length = 0;
      const next = await get(app.port, { 'x-id': 'a' });
      expect(next).toMatchObject({ status: 200, limited: true });
      expect(errors).toEqual([]);
      const rest = await Promise.all(Array.from({ length: 11 }, () => get(app.port, { 'x-id': 'a' })));
      // Empty after the restart: 10 in all pass again, no error.
      expect(rest.filter((sample) => sample.status === 200 && sample.limited)).toHaveLength(9);
      expect(rest.filter((sample) => sample.status === 429)).toHaveLength(2);
      expect(errors).toEqual([]);
      expect(rejections.reasons).toEqual([]);
    },
  );
});
