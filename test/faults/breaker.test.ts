/**
 * The circuit breaker on a Redis that stops answering under load (DEBUG SLEEP 2: the connection
 * stays up, every check waits), behind Express with 20 concurrent keep-alive clients, timeoutMs
 * 200, failing open. Run with the breaker (failures 5, openMs 100, maxOpenMs 400) and without.
 *
 * Proves: with the breaker, once the first checks have failed, requests during the outage are
 * answered at once (median under a quarter of timeoutMs, a few ms on an idle machine; only the probes wait for timeoutMs) where without it each
 * waits the full timeoutMs; and limiting resumes within one probe interval (maxOpenMs) of Redis
 * answering again.
 */
import { performance } from 'node:perf_hooks';
import { RedisStore } from '../../src';
import { closeAgent, load, startApp } from '../helpers/http-load';
import { watchEachTest } from '../helpers/process';
import { FAULT_TIMEOUT_MS, faultRedisOfEachTest, RECOMMENDED_CONFIGS, sleep, waitBoundOf, waitReady } from '../helpers/redis-faults';
import { figuresPrintedAfterAll } from '../helpers/report';

const TIMEOUT_MS = FAULT_TIMEOUT_MS;
const BREAKER = { failures: 5, openMs: 100, maxOpenMs: 400 };
/**
 * Allowed above a bound for the HTTP round trip, plus the longest event-loop stall measured in
 * the same test (monitorEventLoopDelay): the clients share the loop, on two busy cores.
 */
const MARGIN_MS = 150;

const figures = figuresPrintedAfterAll(`Redis asleep for 2 s under load (timeoutMs ${TIMEOUT_MS}, breaker ${JSON.stringify(BREAKER)})`);
afterAll(closeAgent);

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))];
}

describe.each(RECOMMENDED_CONFIGS)('%s', (configName, config) => {
  const server = faultRedisOfEachTest(config);
  const { rejections, loopDelay } = watchEachTest();
  test.each([
    ['on', BREAKER],
    ['off', false],
  ] as const)('breaker %s', async (label, breaker) => {
    const { client, admin } = server;
    const codes = new Set<string>();
    const app = await startApp('express', {
      store: new RedisStore({ client }),
      limit: 1_000_000,
      window: '1h',
      timeoutMs: TIMEOUT_MS,
      breaker,
      identify: (request) => request.headers['x-id'] as string,
      onError: (error) => codes.add((error as { code: string }).code),
    });
    try {
      await waitReady(client);
      const traffic = load(app.port, 20, (index) => `client-${index}`);
      await sleep(500);
      const asleepAt = performance.now();
      await admin.call('DEBUG', 'SLEEP', '2');
      const awakeAt = performance.now();
      await sleep(1_000);
      traffic.stop();
      const samples = await traffic.done;

      // Started once the first checks had time to fail, answered before Redis woke.
      const during = samples.filter((sample) => sample.at - sample.ms > asleepAt + 2 * TIMEOUT_MS && sample.at < awakeAt);
      expect(during.length).toBeGreaterThan(0);
      const latencies = during.map((sample) => sample.ms);
      // The limiter's timeoutMs, or GLIDE's requestTimeout when that comes first.
      const waitBound = waitBoundOf(config, TIMEOUT_MS);
      const waited = latencies.filter((ms) => ms >= waitBound - 5).length;
      const median = percentile(latencies, 50);
      // The first answer the restarted store decided (with its headers), after it woke.
      const resumed = samples.find((sample) => sample.at > awakeAt && sample.limited);
      const resumedAfter = resumed === undefined ? Infinity : resumed.at - awakeAt;
      figures.push(
        `  ${configName}, breaker ${label}: ${during.length} requests during the outage, median ${median.toFixed(1)} ms, ` +
          `p99 ${percentile(latencies, 99).toFixed(1)} ms, ${waited} waited timeoutMs; limiting resumed ${resumedAfter.toFixed(0)} ms after Redis woke`,
      );
      if (breaker === false) {
        expect(median).toBeGreaterThanOrEqual(waitBound - 5);
        expect(resumedAfter).toBeLessThan(MARGIN_MS + loopDelay.maxMs());
      } else {
        // Near zero against timeoutMs: a quarter of it leaves room for a loaded machine.
        expect(median).toBeLessThan(TIMEOUT_MS / 4);
        // Only the probes (one per interval: 100, 200, 400, 400... ms) wait.
        expect(waited).toBeLessThanOrEqual(10);
        expect(codes).toContain('SWL_CIRCUIT_OPEN');
        expect(resumedAfter).toBeLessThan(BREAKER.maxOpenMs + MARGIN_MS + loopDelay.maxMs());
      }
      expect(rejections.reasons).toEqual([]);
    } finally {
      await app.close();
    }
  });
});
