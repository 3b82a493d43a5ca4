/**
 * Redis SIGKILLed under load, then restarted on the same port, behind a real Express or
 * Fastify server (20 concurrent keep-alive clients, timeoutMs 200), with five client
 * configurations (ioredis: the recommended `enableOfflineQueue: false, maxRetriesPerRequest: 1`,
 * its defaults, and the README's recommended + auto-pipelining; node-redis: the recommended
 * `disableOfflineQueue: true`, and its defaults), failing open and failing closed. Just before the kill, Redis is put to sleep (DEBUG SLEEP) and probe
 * requests are sent, so that checks are stuck in it, unanswered, when it dies.
 *
 * Proves: every request is answered (fail-open: 200 without rate-limit headers; closed:
 * 503), none waits longer than timeoutMs + 150 ms (measured per request), no unhandled
 * rejection, limiting resumes by itself once Redis is back (429s again), and no check the
 * limiter reported as failed is counted later: the probes' key stays empty, and each
 * client's count in the restarted Redis equals the requests it allowed after the kill.
 *
 * Then, on the limiter directly, the case where the client reconnects at once (ioredis within
 * its retry window, resending the commands that were unanswered when the connection
 * dropped): a check still pending fails at once (before timeoutMs), and none is counted.
 */
import { performance } from 'node:perf_hooks';
import { createLimiter, RedisStore } from '../../src';
import { closeAgent, FRAMEWORKS, get, load, type Sample, startApp } from '../helpers/http-load';
import { watchEachTest } from '../helpers/process';
import {
  CLIENT_CONFIGS,
  FAULT_TIMEOUT_MS,
  faultRedisOfEachTest,
  nextReady,
  sleep,
  slidingWindowCount,
  waitBoundOf,
  waitReady,
} from '../helpers/redis-faults';
import { figuresPrintedAfterAll } from '../helpers/report';

const TIMEOUT_MS = FAULT_TIMEOUT_MS;
/**
 * Allowed above a bound for the HTTP round trip, plus the longest event-loop stall measured in
 * the same test (monitorEventLoopDelay): the clients share the loop, on two busy cores.
 */
const MARGIN_MS = 150;
const LIMIT = 50;
const CONCURRENCY = 20;
const PROBES = 10;

const figures = figuresPrintedAfterAll(`Redis killed under load (timeoutMs ${TIMEOUT_MS})`);
afterAll(closeAgent);

type FailMode = 'open' | 'closed';

/** Whether a sample is a store failure answered per `failMode`. */
function failed(sample: Sample, failMode: FailMode): boolean {
  return failMode === 'open' ? sample.status === 200 && !sample.limited : sample.status === 503;
}

describe.each(CLIENT_CONFIGS)('Redis SIGKILLed and restarted under load, client: %s', (configName, clientConfig) => {
  const server = faultRedisOfEachTest(clientConfig);
  const { rejections, loopDelay } = watchEachTest();
  describe.each(FRAMEWORKS)('%s', (framework) => {
    test.each<FailMode>(['open', 'closed'])(
      'failMode %s: all answered within timeoutMs, nothing reported failed is counted, limiting resumes',
      async (failMode) => {
        const { redis, client, admin, inspect } = server;
        const errors: string[] = [];
        const prefix = `outage-${framework}-${failMode}`;
        let app: Awaited<ReturnType<typeof startApp>> | undefined;
        let traffic: ReturnType<typeof load> | undefined;
        try {
          await waitReady(client);
          app = await startApp(framework, {
            store: new RedisStore({ client }),
            limit: LIMIT,
            window: '1h',
            timeoutMs: TIMEOUT_MS,
            failMode,
            prefix,
            // Every request goes to Redis: a cached denial would hide the outage.
            denyCacheSize: 0,
            // The probes time out: with the breaker, limiting would resume up to maxOpenMs after
            // Redis is back, not at once (breaker.test.ts holds the breaker to that).
            breaker: false,
            identify: (request) => request.headers['x-id'] as string | undefined,
            onError: (error) => errors.push((error as Error).name),
          });
          traffic = load(app.port, CONCURRENCY, (index) => `client-${index}`);
          await sleep(700);

          // Make Redis stop answering, then send checks it will never answer: they fail at
          // timeoutMs, and are then killed with Redis while still unanswered.
          admin.call('DEBUG', 'SLEEP', '3').catch(() => undefined);
          await sleep(50);
          const probes = await Promise.all(Array.from({ length: PROBES }, () => get(app!.port, { 'x-id': 'probe' })));

          await redis.kill();
          const killedAt = performance.now();
          await sleep(1_000);
          // The moment the client is ready again: no decision can be answered before it.
          const ready = nextReady(client);
          await redis.restart();
          const readyAt = await ready;
          await waitReady(client);
          await sleep(1_500);
          traffic.stop();
          const samples = await traffic.done;
          // Whatever the client would resend on reconnect has been sent by now.
          await sleep(200);

          // The probes failed as configured, at timeoutMs (or GLIDE's requestTimeout, when shorter).
          for (const probe of probes) {
            expect(failed(probe, failMode)).toBe(true);
            expect(probe.ms).toBeGreaterThanOrEqual(waitBoundOf(clientConfig, TIMEOUT_MS) - 5);
            expect(probe.ms).toBeLessThanOrEqual(TIMEOUT_MS + MARGIN_MS + loopDelay.maxMs());
          }

          // Every request was answered, as configured, and none waited past the bound.
          const all = [...samples, ...probes];
          const statuses = new Set(all.map((sample) => sample.status));
          expect([...statuses].sort()).toEqual(failMode === 'open' ? [200, 429] : [200, 429, 503]);
          // A 429 always carries the rate-limit headers; so does every 200 that is not a fail-open pass.
          expect(all.filter((sample) => sample.status === 429 && !sample.limited)).toEqual([]);
          if (failMode === 'closed') expect(all.filter((sample) => sample.status === 200 && !sample.limited)).toEqual([]);
          const maxMs = Math.max(...all.map((sample) => sample.ms));
          expect(maxMs).toBeLessThanOrEqual(TIMEOUT_MS + MARGIN_MS + loopDelay.maxMs());
          const failures = all.filter((sample) => failed(sample, failMode));
          const during = samples.filter((sample) => sample.at > killedAt && sample.at < readyAt);
          expect(during.length).toBeGreaterThan(0);
          expect(during.every((sample) => failed(sample, failMode))).toBe(true);
          expect(errors).toContain('RateLimitTimeoutError');
          expect(errors).toContain('StoreUnavailableError');

          // Limiting resumed by itself: the end of the run is all decisions, 429s among them.
          const tail = samples.filter((sample) => sample.at > readyAt + 500);
          expect(tail.length).toBeGreaterThan(0);
          expect(tail.some((sample) => failed(sample, failMode))).toBe(false);
          expect(tail.some((sample) => sample.status === 429)).toBe(true);

          // Nothing reported as failed was counted later: the probes not at all, and each
          // client exactly as many times as the restarted Redis allowed it.
          expect(await slidingWindowCount(inspect, `${prefix}:probe`)).toBe(0);
          for (let index = 0; index < CONCURRENCY; index++) {
            const id = `client-${index}`;
            const allowedSinceKill = samples.filter(
              (sample) => sample.id === id && sample.at > killedAt && sample.status === 200 && sample.limited,
            ).length;
            expect({ id, counted: await slidingWindowCount(inspect, `${prefix}:${id}`) }).toEqual({ id, counted: allowedSinceKill });
          }
          expect(rejections.reasons).toEqual([]);

          const outageMax = Math.max(...during.map((sample) => sample.ms), ...probes.map((sample) => sample.ms));
          figures.push(
            `  ${framework}, ${configName}, failMode ${failMode}: ${all.length} requests, ${failures.length} failed ${failMode}, ` +
              `max latency ${maxMs.toFixed(0)} ms (during outage ${outageMax.toFixed(0)} ms), back to limiting ${(readyAt - killedAt).toFixed(0)} ms after the kill`,
          );
        } finally {
          traffic?.stop();
          await traffic?.done.catch(() => undefined);
          await app?.close();
        }
      },
    );
  });
});

describe.each(CLIENT_CONFIGS)('limiter on a client: %s: Redis killed and restarted at once', (_configName, clientConfig) => {
  const server = faultRedisOfEachTest(clientConfig);
  const { rejections } = watchEachTest();
  test('checks stuck in the killed Redis fail at once or at timeoutMs and are never counted, even when the client reconnects at once', async () => {
    const { redis, client, admin, inspect } = server;
    await waitReady(client);
    const limiter = createLimiter({
      store: new RedisStore({ client }),
      limit: 100,
      window: '1h',
      timeoutMs: TIMEOUT_MS,
      denyCacheSize: 0,
      prefix: 'quick',
      // Its ten timeouts would open the breaker, which would then answer the checks this test watches.
      breaker: false,
    });
    expect((await limiter.check('warm-up')).allowed).toBe(true);

    admin.call('DEBUG', 'SLEEP', '3').catch(() => undefined);
    await sleep(50);
    // Reported failed at timeoutMs while Redis sleeps...
    const timedOut = await Promise.allSettled(Array.from({ length: 10 }, () => limiter.check('timed-out')));
    expect(timedOut.map((result) => result.status === 'rejected' && (result.reason as Error).name)).toEqual(
      new Array(10).fill('RateLimitTimeoutError'),
    );
    // ...and one still waiting when Redis dies: it fails as soon as the connection closes.
    const pendingStarted = performance.now();
    const pending = limiter.check('pending').then(
      () => ({ name: 'allowed', ms: performance.now() - pendingStarted }),
      (error: Error) => ({ name: error.name, ms: performance.now() - pendingStarted }),
    );
    await sleep(50);
    await redis.kill();
    // Back before ioredis' first reconnection attempt (50 ms): the case where it resends.
    // node-redis never resends a written command: it rejects it when the connection drops.
    await redis.restart();
    await waitReady(client);
    await sleep(300);

    const failedPending = await pending;
    // StoreUnavailableError from the store; through auto-pipelining, ioredis' own
    // "Stream isn't writeable" when the pipeline is flushed onto the closed connection;
    // node-redis' own "Socket closed unexpectedly".
    expect(failedPending.name).not.toBe('allowed');
    expect(failedPending.ms).toBeLessThan(TIMEOUT_MS);
    expect(await slidingWindowCount(inspect, 'quick:timed-out')).toBe(0);
    expect(await slidingWindowCount(inspect, 'quick:pending')).toBe(0);
    // The restarted Redis counts from zero, and counts again.
    const next = await limiter.check('timed-out');
    expect(next.allowed).toBe(true);
    expect(next.remaining).toBe(99);
    expect(rejections.reasons).toEqual([]);
  });
});
