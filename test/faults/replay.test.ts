/**
 * Redis SIGKILLed under steady load, the way HTTP traffic loads a limiter: new checks start in
 * every event-loop turn, so a batch gathered in one turn is written in the next, possibly onto a
 * socket that has just ended. Killed twice per client configuration (those of redis-faults.ts,
 * library defaults included), restarted empty, and counted.
 *
 * Proves: every failure carries a code (`SWL_STORE_UNAVAILABLE` with the client's own error as
 * `cause`, or `SWL_TIMEOUT`), never a client's raw error; and nothing a client kept while Redis
 * was down lands in the restarted server: its count equals exactly the checks it allowed. The
 * exception is GLIDE with a `requestTimeout` as long as the limiter's `timeoutMs` or longer (its
 * default, 250 ms against 200): its clock starts when a check reaches its core, after the
 * limiter's, so a check it sends on reconnecting after the limiter gave up may be counted, and
 * its reply dropped (docs/valkey.md). Then what the restarted server counted beyond what it
 * allowed is at most the checks that failed with `SWL_TIMEOUT`. With the margin docs/valkey.md
 * recommends (`requestTimeout` 50 ms shorter), GLIDE must replay nothing either.
 */
import { createLimiter, RedisStore } from '../../src';
import { watchEachTest } from '../helpers/process';
import {
  CLIENT_CONFIGS,
  FAULT_TIMEOUT_MS,
  faultRedisOfEachTest,
  glideRequestTimeoutOf,
  sleep,
  slidingWindowCount,
  waitReady,
} from '../helpers/redis-faults';
import { figuresPrintedAfterAll } from '../helpers/report';

const KILLS = 2;
const TIMEOUT_MS = FAULT_TIMEOUT_MS;
const PER_TURN = 3;
/**
 * At most this many checks pending, as a server's connections bound what it has in flight. A
 * client that takes more time per command than a turn of this loop (GLIDE) would otherwise fall
 * ever further behind: its checks time out while Redis still counts them, which is a slow client,
 * not what this test measures.
 */
const MAX_PENDING = 200;

const figures = figuresPrintedAfterAll(`Steady load, Redis killed and restarted empty ${KILLS} times`);

describe.each(CLIENT_CONFIGS)('client: %s', (configName, clientConfig) => {
  const server = faultRedisOfEachTest(clientConfig);
  const { rejections } = watchEachTest();
  test('every failure is coded, and the restarted Redis counts exactly what it allowed', async () => {
    const { redis, client, inspect } = server;
    const codes = new Map<string, number>();
    const uncoded: unknown[] = [];
    const replayed: number[] = [];
    const timedOut: number[] = [];
    // GLIDE holds a command its requestTimeout from when the command reaches its core.
    const holdsPastTimeout = (glideRequestTimeoutOf(clientConfig) ?? 0) >= TIMEOUT_MS;
    await waitReady(client);
    const limiter = createLimiter({
      store: new RedisStore({ client }),
      limit: 1_000_000,
      window: '1h',
      timeoutMs: TIMEOUT_MS,
      denyCacheSize: 0,
      prefix: 'replay',
      // Every check goes to the client, as without a breaker: the replay is what is measured.
      breaker: false,
    });
    for (let kill = 0; kill < KILLS; kill++) {
      const key = `round-${kill}`;
      let running = true;
      let killedAt = Infinity;
      let allowedAfterKill = 0;
      let timeouts = 0;
      const pending = new Set<Promise<void>>();
      const turn = (): void => {
        if (!running) return;
        for (let i = 0; i < PER_TURN && pending.size < MAX_PENDING; i++) {
          const check = limiter.check(key).then(
            (decision) => {
              // Decided by the restarted server (its TIME is this machine's clock).
              if (decision.allowed && decision.now > killedAt) allowedAfterKill++;
            },
            (error: unknown) => {
              const code = (error as { code?: unknown }).code;
              if (code !== 'SWL_STORE_UNAVAILABLE' && code !== 'SWL_TIMEOUT') uncoded.push(error);
              if (code === 'SWL_TIMEOUT') timeouts++;
              codes.set(String(code), (codes.get(String(code)) ?? 0) + 1);
            },
          );
          pending.add(check);
          check.then(() => pending.delete(check));
        }
        setImmediate(turn);
      };
      turn();
      await sleep(300);
      await redis.kill();
      killedAt = Date.now();
      await sleep(400);
      await redis.restart();
      await waitReady(client);
      await sleep(150);
      running = false;
      await Promise.all(pending);
      // Whatever a client would send on reconnecting has been sent by now.
      await sleep(300);
      const counted = await slidingWindowCount(inspect, `replay:${key}`);
      expect(allowedAfterKill).toBeGreaterThan(0);
      replayed.push(counted - allowedAfterKill);
      timedOut.push(timeouts);
    }
    expect(uncoded).toEqual([]);
    expect(codes.get('SWL_STORE_UNAVAILABLE')).toBeGreaterThan(0);
    if (holdsPastTimeout) {
      for (let kill = 0; kill < KILLS; kill++) {
        expect(replayed[kill]).toBeGreaterThanOrEqual(0);
        expect(replayed[kill]).toBeLessThanOrEqual(timedOut[kill]);
      }
    } else expect(replayed).toEqual(new Array(KILLS).fill(0));
    expect(rejections.reasons).toEqual([]);
    figures.push(
      `  ${configName}: failures ${JSON.stringify(Object.fromEntries(codes))}, replayed per kill ${replayed.join(', ')} (timed out ${timedOut.join(', ')})`,
    );
  });
});
