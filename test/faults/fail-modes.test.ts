/**
 * What a store failure costs, per `failMode`, on servers the test starts:
 *
 * - A slow Redis (DEBUG SLEEP) answering 40 checks late, after each timed out: with `'closed'`
 *   (answered 503) none stays counted (the late counts are given back); with `'open'` (served)
 *   all 40 stay counted, which is right. GLIDE drops a reply after its `requestTimeout`: with it,
 *   the 40 stay counted whatever the fail mode.
 * - `failMode: 'local'` across a SIGKILL and an empty restart, in both frameworks: a per-process
 *   limit holds while Redis is down (with headers and 429s), Redis decides again once it is
 *   back, and the local counts are dropped, not merged (a second outage starts from zero).
 */
import { RedisStore } from '../../src';
import { ALGORITHMS } from '../../src/algorithms';
import { closeAgent, FRAMEWORKS, get, startApp } from '../helpers/http-load';
import { watchEachTest } from '../helpers/process';
import { faultRedisOfEachTest, RECOMMENDED_CONFIGS, sleep, slidingWindowCount, waitFor, waitReady } from '../helpers/redis-faults';

afterAll(closeAgent);

describe.each(RECOMMENDED_CONFIGS)('%s', (_name, config) => {
  const server = faultRedisOfEachTest(config);
  const { rejections } = watchEachTest();
  // GLIDE drops a reply that comes after its requestTimeout (the limiter's timeoutMs, or a little
  // more): the store never sees the late counts, and cannot give them back.
  test.each([
    ['closed', 503, config.library === 'glide' ? 40 : 0],
    ['open', 200, 40],
  ] as const)(
    'failMode %s: checks that timed out against a sleeping Redis and were counted late: %s, %s stay counted',
    async (failMode, status, kept) => {
      const { client, admin, inspect } = server;
      const app = await startApp('express', {
        store: new RedisStore({ client }),
        limit: 100,
        window: '1h',
        timeoutMs: 100,
        failMode,
        prefix: `late-${failMode}`,
        // Every one of the 40 checks reaches the sleeping Redis, as in the probe that found this.
        breaker: false,
        denyCacheSize: 0,
        identify: () => 'user',
        onError: () => undefined,
      });
      try {
        await waitReady(client);
        if (config.library === 'glide') {
          // GLIDE drops a reply that comes after its requestTimeout: a NOSCRIPT answered late is
          // followed by no EVAL, and nothing would be counted. With the scripts loaded, Redis runs
          // the checks when it wakes, as it does for the other clients.
          const { check } = ALGORITHMS['sliding-window'];
          for (const lua of [check.lua, check.batchLua]) await admin.script('LOAD', lua);
        }
        const slept = admin.call('DEBUG', 'SLEEP', '1');
        await sleep(50);
        const answers = await Promise.all(Array.from({ length: 40 }, () => get(app.port)));
        expect(answers.map((answer) => answer.status)).toEqual(new Array(40).fill(status));
        await slept;
        // The late replies, and the refunds they call for, have been through by now.
        await sleep(300);
        expect(await slidingWindowCount(inspect, `late-${failMode}:user`)).toBe(kept);
        expect(rejections.reasons).toEqual([]);
      } finally {
        await app.close();
      }
    },
  );
});

describe.each(FRAMEWORKS)('%s, failMode local', (framework) => {
  // '%s:' and the test's name make the name each test had as a row of test.each.
  describe.each(RECOMMENDED_CONFIGS)('%s:', (_name, config) => {
    const server = faultRedisOfEachTest(config);
    const { rejections } = watchEachTest();
    test('a local limit while Redis is down, Redis again once back, local counts dropped', async () => {
      const { redis, client, inspect } = server;
      const errors: string[] = [];
      const app = await startApp(framework, {
        store: new RedisStore({ client }),
        limit: 5,
        window: '1h',
        timeoutMs: 200,
        failMode: 'local',
        prefix: 'local',
        breaker: { failures: 1, openMs: 50, maxOpenMs: 100 },
        identify: (request) => request.headers['x-id'] as string,
        onError: (error) => errors.push((error as { code: string }).code),
      });
      const send = async (id: string, count: number) => {
        const answers = [];
        for (let i = 0; i < count; i++) answers.push(await get(app.port, { 'x-id': id }));
        return answers;
      };
      try {
        await waitReady(client);
        // Counted in Redis: 3 of 5.
        expect((await send('a', 3)).map((answer) => answer.status)).toEqual([200, 200, 200]);

        await redis.kill();
        // This process alone decides: 5 of 5 allowed, every answer with its headers, then 429s.
        const outage = await send('a', 7);
        expect(outage.map((answer) => answer.status)).toEqual([200, 200, 200, 200, 200, 429, 429]);
        expect(outage.every((answer) => answer.limited)).toBe(true);
        expect(errors.length).toBeGreaterThanOrEqual(7);
        if (config.library === 'glide') {
          // GLIDE either holds a check while it reconnects (the check waits timeoutMs, and the
          // breaker then answers the next ones) or, when it has already seen the connection fail,
          // refuses it at once: which one depends on whether its reconnect attempt beat the
          // request. Every failure is one of those outage codes.
          const outageCodes = ['SWL_TIMEOUT', 'SWL_STORE_UNAVAILABLE', 'SWL_CIRCUIT_OPEN'];
          expect(errors.filter((code) => !outageCodes.includes(code))).toEqual([]);
        } else expect(errors.every((code) => code === 'SWL_STORE_UNAVAILABLE')).toBe(true);
        // 'c' uses its whole local quota.
        expect((await send('c', 6)).map((answer) => answer.status)).toEqual([200, 200, 200, 200, 200, 429]);

        await redis.restart();
        await waitReady(client);
        // Within a probe interval, Redis decides again: the restarted server counted nothing, and
        // the 5 local counts are not merged into it.
        await waitFor(
          async () => (await get(app.port, { 'x-id': 'b' })).status === 200 && (await slidingWindowCount(inspect, 'local:b')) > 0,
          2_000,
          'Redis to decide again',
        );
        const back = await send('a', 6);
        expect(back.map((answer) => answer.status)).toEqual([200, 200, 200, 200, 200, 429]);
        expect(await slidingWindowCount(inspect, 'local:a')).toBe(5);

        // A second outage starts the local counts from zero: 'c', refused locally in the first
        // outage and never seen by Redis, has its whole quota again.
        await redis.kill();
        expect((await send('c', 6)).map((answer) => answer.status)).toEqual([200, 200, 200, 200, 200, 429]);
        expect(rejections.reasons).toEqual([]);
      } finally {
        await app.close();
      }
    });
  });
});
