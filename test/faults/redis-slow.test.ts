/**
 * Redis alive but not answering: `DEBUG SLEEP 1` sent from a separate connection blocks
 * the server for a second. Proves that checks give up at timeoutMs (measured) with a
 * RateLimitTimeoutError, that the adapters then fail open (200 without rate-limit
 * headers) or closed (503) as configured, that decisions come back after the sleep, and that a
 * check held back behind the call in flight leaves after 10 ms, unless its caller has had the
 * timeout by then;
 * on every client configuration of redis-faults.ts, and over HTTP with each library's recommended one.
 */
import { performance } from 'node:perf_hooks';
import { createLimiter, type Limiter, RedisStore } from '../../src';
import { closeAgent, FRAMEWORKS, get, startApp } from '../helpers/http-load';
import { watchEachTest } from '../helpers/process';
import {
  CLIENT_CONFIGS,
  FAULT_TIMEOUT_MS,
  faultClientsOfEachTest,
  faultRedisOfTestFile,
  RECOMMENDED_CONFIGS,
  sleep,
  waitBoundOf,
} from '../helpers/redis-faults';
import { figuresPrintedAfterAll } from '../helpers/report';

const TIMEOUT_MS = FAULT_TIMEOUT_MS;
/**
 * Allowed above a bound for the HTTP round trip, plus the longest event-loop stall measured in
 * the same test (monitorEventLoopDelay): the clients share the loop, on two busy cores.
 */
const MARGIN_MS = 150;

const server = faultRedisOfTestFile();
const figures = figuresPrintedAfterAll(`Redis sleeping 1 s (timeoutMs ${TIMEOUT_MS})`);
afterAll(closeAgent);
const readyClient = faultClientsOfEachTest(() => server.redis.url);
const { rejections, loopDelay } = watchEachTest();

/** Blocks Redis for a second; `awake` resolves when it answers again. */
async function sleepRedis(): Promise<{ awake: Promise<unknown> }> {
  const awake = server.admin.call('DEBUG', 'SLEEP', '1');
  // Let the DEBUG reach Redis before anything else does.
  await sleep(20);
  return { awake };
}

describe.each(CLIENT_CONFIGS)('limiter on a client: %s', (configName, clientConfig) => {
  test('every check started while Redis sleeps rejects with RateLimitTimeoutError at timeoutMs', async () => {
    const client = await readyClient(clientConfig);
    const limiter = createLimiter({
      store: new RedisStore({ client }),
      limit: 1000,
      window: '1m',
      timeoutMs: TIMEOUT_MS,
      prefix: `slow-${configName.split(' ').slice(0, 2).join('-')}`,
    });
    expect((await limiter.check('a')).allowed).toBe(true);
    const { awake } = await sleepRedis();
    const outcomes = await Promise.all(
      Array.from({ length: 50 }, (_, i) => {
        const started = performance.now();
        return limiter.check(`id-${i % 5}`).then(
          () => ({ name: 'answered', ms: performance.now() - started }),
          (error: Error) => ({ name: error.name, ms: performance.now() - started }),
        );
      }),
    );
    expect(new Set(outcomes.map((outcome) => outcome.name))).toEqual(new Set(['RateLimitTimeoutError']));
    const times = outcomes.map((outcome) => outcome.ms);
    // Node timers may fire up to a millisecond early; GLIDE's requestTimeout may come first.
    expect(Math.min(...times)).toBeGreaterThanOrEqual(waitBoundOf(clientConfig, TIMEOUT_MS) - 5);
    expect(Math.max(...times)).toBeLessThanOrEqual(TIMEOUT_MS + MARGIN_MS + loopDelay.maxMs());
    await awake;
    expect((await limiter.check('a')).allowed).toBe(true);
    expect(rejections.reasons).toEqual([]);
    // Not asserted, reported: a check already written to Redis cannot be taken back, so
    // the ones that timed out still run (and count) when Redis wakes up.
    let countedLate = 0;
    for (let i = 0; i < 5; i++) countedLate += (await limiter.peek(`id-${i}`, { cost: 0 })).estimated;
    figures.push(
      `  limiter, ${configName}: 50 checks timed out after ${Math.min(...times).toFixed(0)}-${Math.max(...times).toFixed(0)} ms; ` +
        `${countedLate} of them counted when Redis woke up`,
    );
  });
});

describe.each(CLIENT_CONFIGS)('a check held behind a call Redis does not answer, %s', (configName, clientConfig) => {
  test('waits for it 10 ms at most, and is never sent once its caller has had the timeout', async () => {
    const client = await readyClient(clientConfig);
    const prefix = `held-${configName.split(' ').slice(0, 2).join('-')}`;
    // Each on a store of its own: a store holds back only checks behind its own calls. Named by
    // the timeout of the limiter that counts into its keys.
    const limiterOf = (timeoutMs: number, keysOf = timeoutMs) =>
      createLimiter({ store: new RedisStore({ client }), limit: 1000, window: '1m', timeoutMs, prefix: `${prefix}-${keysOf}` });
    const shortLived = limiterOf(5);
    const usual = limiterOf(TIMEOUT_MS);
    // Loads the script for both (a check of shortLived may not be answered within 5 ms on a busy machine).
    await usual.check('warm-up');
    const { awake } = await sleepRedis();
    // On each store, the first check leaves at once and waits in Redis; the second waits for its answer.
    const outcomes = await Promise.allSettled([
      shortLived.check('sent'),
      shortLived.check('held'),
      usual.check('sent'),
      usual.check('held'),
    ]);
    expect(outcomes.map((outcome) => (outcome.status === 'rejected' ? (outcome.reason as Error).name : 'answered'))).toEqual(
      new Array(4).fill('RateLimitTimeoutError'),
    );
    await awake;
    const counted = async (limiter: Limiter, identifier: string) => (await limiter.peek(identifier, { cost: 0 })).estimated;
    // Timed out at 5 ms, before it had waited 10: never sent. (Read with the usual timeout: a peek
    // may take more than 5 ms on a busy machine.)
    const shortLivedCounts = limiterOf(TIMEOUT_MS, 5);
    expect([await counted(shortLivedCounts, 'sent'), await counted(shortLivedCounts, 'held')]).toEqual([1, 0]);
    // Sent after 10 ms, and counted when Redis woke up, like every check written to it.
    expect([await counted(usual, 'sent'), await counted(usual, 'held')]).toEqual([1, 1]);
    expect(rejections.reasons).toEqual([]);
  });
});

describe.each(RECOMMENDED_CONFIGS)('client: %s', (configName, clientConfig) => {
  describe.each(FRAMEWORKS)('%s', (framework) => {
    test.each(['open', 'closed'] as const)(
      'failMode %s: requests during the sleep are answered at timeoutMs as configured',
      async (failMode) => {
        const client = await readyClient(clientConfig);
        const errors: string[] = [];
        const app = await startApp(framework, {
          store: new RedisStore({ client }),
          limit: 1000,
          window: '1m',
          timeoutMs: TIMEOUT_MS,
          failMode,
          prefix: `slow-${clientConfig.library}-${framework}-${failMode}`,
          identify: (request) => request.headers['x-id'] as string | undefined,
          onError: (error) => errors.push((error as Error).name),
        });
        try {
          const before = await get(app.port, { 'x-id': 'a' });
          expect(before).toMatchObject({ status: 200, limited: true });

          const { awake } = await sleepRedis();
          const during = await Promise.all(Array.from({ length: 20 }, (_, i) => get(app.port, { 'x-id': `id-${i}` })));
          for (const sample of during) {
            expect({ status: sample.status, limited: sample.limited }).toEqual({ status: failMode === 'open' ? 200 : 503, limited: false });
          }
          const times = during.map((sample) => sample.ms);
          // Node timers may fire up to a millisecond early; GLIDE's requestTimeout may come first.
          expect(Math.min(...times)).toBeGreaterThanOrEqual(waitBoundOf(clientConfig, TIMEOUT_MS) - 5);
          expect(Math.max(...times)).toBeLessThanOrEqual(TIMEOUT_MS + MARGIN_MS + loopDelay.maxMs());
          expect(errors).toEqual(new Array(20).fill('RateLimitTimeoutError'));

          await awake;
          expect(await get(app.port, { 'x-id': 'a' })).toMatchObject({ status: 200, limited: true });
          expect(rejections.reasons).toEqual([]);
          figures.push(
            `  ${framework}, ${configName}, failMode ${failMode}: 20 requests answered ${failMode === 'open' ? '200' : '503'} after ${Math.min(...times).toFixed(0)}-${Math.max(...times).toFixed(0)} ms`,
          );
        } finally {
          await app.close();
        }
      },
    );
  });
});
