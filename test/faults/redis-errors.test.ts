/**
 * Redis answering with an error, on servers the test starts: a read-only replica (READONLY), memory
 * full under `noeviction` (OOM), and a restart reading its data (LOADING, slowed with the
 * `key-load-delay` debug setting). With each library, on the limiter and behind Express.
 *
 * Proves: each reaches the caller as a `StoreError` with the stable code `SWL_STORE_ERROR`, Redis's
 * first word in `reply` and the client's error as `cause`; an HTTP limiter hands that to `onError`
 * and answers by `failMode`.
 */
import { createLimiter, type Limiter, RedisStore, StoreError } from '../../src';
import { closeAgent, get, startApp } from '../helpers/http-load';
import {
  type ClientConfig,
  disconnect,
  type FaultClient,
  faultClient,
  faultServersOfEachTest,
  quietClient,
  RECOMMENDED_CONFIGS,
  sleep,
  waitReady,
} from '../helpers/redis-faults';
import { rejectionOf } from '../helpers/thrown';

const server = faultServersOfEachTest();
afterAll(closeAgent);

function limiterOn(client: FaultClient): Limiter {
  return createLimiter({ store: new RedisStore({ client }), limit: 10, window: '1m', timeoutMs: 1_000, denyCacheSize: 0 });
}

/** How GLIDE words each reply in its own error (it reads Redis's first word into a kind of its own). */
const GLIDE_WORDING: Record<string, RegExp> = {
  READONLY: /^An error was signalled by the server: - ReadOnly: /,
  OOM: /^OOM: /,
};

/** The client's own error is kept as `cause`: Redis's reply as it came, or as GLIDE words it. */
function expectCause(error: unknown, config: ClientConfig, reply: string): void {
  const cause = (error as StoreError).cause as Error;
  if (config.library === 'glide') expect(cause.message).toMatch(GLIDE_WORDING[reply]);
  else expect(cause.message).toMatch(new RegExp(`^${reply}`));
}

describe.each(RECOMMENDED_CONFIGS)('%s', (_name, config: ClientConfig) => {
  test('READONLY: a client pointed at a replica gets SWL_STORE_ERROR, reply READONLY, cause kept', async () => {
    const primary = await server();
    const replica = await server();
    const admin = quietClient(replica.url);
    const client = await faultClient(replica.url, config);
    try {
      await admin.call('REPLICAOF', '127.0.0.1', String(primary.port));
      await waitReady(client);
      const error = await rejectionOf(() => limiterOn(client).check('user'));
      expect(error).toBeInstanceOf(StoreError);
      expect(error).toMatchObject({ code: 'SWL_STORE_ERROR', reply: 'READONLY', name: 'StoreError' });
      expectCause(error, config, 'READONLY');

      // Behind Express: onError hears the code, failMode: 'closed' answers 503.
      const heard: unknown[] = [];
      const app = await startApp('express', {
        store: new RedisStore({ client }),
        limit: 10,
        failMode: 'closed',
        onError: (failure) => heard.push(failure),
      });
      try {
        expect((await get(app.port)).status).toBe(503);
        expect(heard).toMatchObject([{ code: 'SWL_STORE_ERROR', reply: 'READONLY' }]);
      } finally {
        await app.close();
      }
    } finally {
      disconnect(client);
      admin.disconnect();
    }
  });

  test('OOM: memory full under noeviction gets SWL_STORE_ERROR, reply OOM', async () => {
    const redis = await server(['--maxmemory-policy', 'noeviction']);
    const admin = quietClient(redis.url);
    const client = await faultClient(redis.url, config);
    try {
      await waitReady(client);
      // Any use is now above the bound: every write is refused.
      await admin.config('SET', 'maxmemory', '1');
      const error = await rejectionOf(() => limiterOn(client).check('user'));
      expect(error).toBeInstanceOf(StoreError);
      expect(error).toMatchObject({ code: 'SWL_STORE_ERROR', reply: 'OOM' });
      expectCause(error, config, 'OOM');
      await admin.config('SET', 'maxmemory', '0');
      expect((await limiterOn(client).check('user')).allowed).toBe(true);
    } finally {
      disconnect(client);
      admin.disconnect();
    }
  });

  test('LOADING: a restart still reading its data gets SWL_STORE_ERROR, reply LOADING (GLIDE: timeouts)', async () => {
    // 20,000 keys at 100 µs each: about 2 s of loading, served between chunks of 1 KB.
    const redis = await server(['--key-load-delay', '100', '--loading-process-events-interval-bytes', '1024']);
    const admin = quietClient(redis.url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
    // ioredis (and iovalkey) waits for the end of loading before it says ready (its ready
    // check): without that check it sends commands as node-redis does.
    const ioredisLike = config.library === 'ioredis' || config.library === 'iovalkey';
    const client = await faultClient(
      redis.url,
      ioredisLike ? { ...config, options: { ...config.options, enableReadyCheck: false } } : config,
    );
    try {
      await waitReady(client);
      await admin.call('DEBUG', 'POPULATE', '20000');
      await admin.call('SAVE');
      admin.disconnect();
      await redis.kill();
      await redis.restart();
      const limiter = limiterOn(client);
      let error: unknown;
      const codes = new Set<unknown>();
      const deadline = Date.now() + 1_500;
      while (Date.now() < deadline) {
        error = await limiter.check('user').then(
          () => undefined,
          (failure: unknown) => failure,
        );
        codes.add((error as { code?: unknown } | undefined)?.code);
        if (error instanceof StoreError) break;
        await sleep(20);
      }
      if (config.library === 'glide') {
        // GLIDE does not connect to a server that is loading (its handshake is answered LOADING):
        // it holds each check until its requestTimeout, and the breaker opens.
        expect([...codes].sort()).toEqual(['SWL_CIRCUIT_OPEN', 'SWL_TIMEOUT']);
        return;
      }
      expect(error).toMatchObject({ code: 'SWL_STORE_ERROR', reply: 'LOADING' });
      expectCause(error, config, 'LOADING');
    } finally {
      disconnect(client);
      admin.disconnect();
    }
  });
});
