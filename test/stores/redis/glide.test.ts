/**
 * The Valkey GLIDE adapter as a user meets it: which clients the store takes, replies read the
 * same whatever the client's decoder and protocol, Redis's error replies reported with Redis's own
 * first word (GLIDE words them its own way), and a lost connection: checks fail at once until GLIDE
 * has reconnected, which counts as a connection made (the breaker's cue). Against real redis-servers.
 */
import type { GlideClient } from '@valkey/valkey-glide';
import { createLimiter, RedisStore, StoreError } from '../../../src';
import { glideFailure } from '../../../src/stores/redis/glide';
import { type RedisProcess, startRedis } from '../../../support/redis-server';
import {
  addressOf,
  closeClient,
  GLIDE_REQUEST_TIMEOUT_MS,
  glide,
  REDIS_CLIENTS,
  redisClient,
  redisUrl,
  type StoreClient,
  uniquePrefix,
} from '../../helpers/redis';
import { disconnect, quietClient, sleep, waitFor } from '../../helpers/redis-faults';
import { rejectionOf } from '../../helpers/thrown';

const GLIDE = REDIS_CLIENTS.find(([name]) => name === 'glide')![1];
const clients: GlideClient[] = [];
/** A GLIDE client of `url` (default: the run's server), closed after the file's tests. */
async function glideClient(options: object = {}, url = redisUrl()): Promise<GlideClient> {
  const client = await glide().GlideClient.createClient({
    addresses: [addressOf(url)],
    requestTimeout: GLIDE_REQUEST_TIMEOUT_MS,
    ...options,
  });
  clients.push(client);
  return client;
}
afterAll(() => {
  for (const client of clients) client.close();
});

test('the store takes GlideClient and GlideClusterClient instances, and keeps the client it was given', async () => {
  const client = await glideClient();
  expect(new RedisStore({ client }).client).toBe(client);
  expect(new RedisStore({ client }).sharded).toBe(false);
  const cluster = (await GLIDE.cluster()) as StoreClient;
  try {
    expect(new RedisStore({ client: cluster }).client).toBe(cluster);
    expect(new RedisStore({ client: cluster }).sharded).toBe(true);
  } finally {
    await closeClient(cluster);
  }
});

test('a client whose default decoder is Bytes, and a RESP2 client, decide as the default one does', async () => {
  const { Decoder, ProtocolVersion } = glide();
  const prefix = uniquePrefix('glide-decode');
  const seen = [];
  for (const [index, options] of [{}, { defaultDecoder: Decoder.Bytes }, { protocol: ProtocolVersion.RESP2 }].entries()) {
    const client = await glideClient(options);
    const limiter = createLimiter({ store: new RedisStore({ client }), limit: 5, window: '1h', prefix, denyCacheSize: 0 });
    const allowed = await limiter.check(`id-${index}`, { cost: 3 });
    const denied = await limiter.check(`id-${index}`, { cost: 3 });
    // Several checks of one turn: a batch, answered as text.
    const batch = await Promise.all([1, 2, 3].map(() => limiter.check(`batch-${index}`)));
    seen.push([
      allowed.allowed,
      allowed.remaining,
      denied.allowed,
      denied.remaining,
      typeof denied.retryAfterMs,
      batch.map((d) => d.remaining),
    ]);
  }
  expect(seen).toEqual(new Array(3).fill([true, 2, false, 2, 'number', [4, 3, 2]]));
});

test("Redis's error reply reaches the caller as a StoreError with Redis's first word, GLIDE's error as cause", async () => {
  const client = await glideClient();
  const admin = redisClient();
  try {
    const limiter = createLimiter({ store: new RedisStore({ client }), limit: 5, window: '1h', prefix: uniquePrefix('glide-wrong') });
    // A hash where the limiter keeps a string: the script's GET fails with WRONGTYPE.
    await admin.hset(limiter.keyFor('a'), 'field', '1');
    const error = await rejectionOf(() => limiter.check('a'));
    expect(error).toBeInstanceOf(StoreError);
    expect(error).toMatchObject({ code: 'SWL_STORE_ERROR', reply: 'WRONGTYPE' });
    expect(((error as StoreError).cause as Error).name).toBe('RequestError');
  } finally {
    admin.disconnect();
  }
});

test.each([
  [
    "An error was signalled by the server: - ReadOnly: You can't write against a read only replica.",
    'READONLY',
    "READONLY You can't write against a read only replica.",
  ],
  [
    'An error was signalled by the server: - BusyLoadingError: Redis is loading the dataset in memory',
    'LOADING',
    'LOADING Redis is loading the dataset in memory',
  ],
  [
    'An error was signalled by the server: - NoScriptError: No matching script. Please use EVAL.',
    'NOSCRIPT',
    'NOSCRIPT No matching script. Please use EVAL.',
  ],
  ['An error was signalled by the server: - ResponseError: boom', 'ERR', 'ERR boom'],
  [
    'An error was signalled by the server: - TryAgain: Multiple keys request during rehashing of slot',
    'TRYAGAIN',
    'TRYAGAIN Multiple keys request during rehashing of slot',
  ],
  ['An error was signalled by the server:- ClusterDown', 'CLUSTERDOWN', 'CLUSTERDOWN'],
  ["OOM: command not allowed when used memory > 'maxmemory'.", 'OOM', "OOM command not allowed when used memory > 'maxmemory'."],
  [
    'WRONGTYPE: Operation against a key holding the wrong kind of value',
    'WRONGTYPE',
    'WRONGTYPE Operation against a key holding the wrong kind of value',
  ],
])('GLIDE\'s RequestError "%s" is a StoreError with reply %s', (message, reply, text) => {
  const { RequestError } = glide();
  const error = glideFailure(new RequestError(message));
  expect(error).toBeInstanceOf(StoreError);
  expect(error).toMatchObject({ code: 'SWL_STORE_ERROR', reply, message: `Redis answered with an error: ${text}` });
});

test("GLIDE's own failures: a timeout is SWL_TIMEOUT, a lost connection, a closed client or a full queue SWL_STORE_UNAVAILABLE", () => {
  const { TimeoutError, ConnectionError, ClosingError, RequestError } = glide();
  expect(glideFailure(new TimeoutError('timed out'))).toMatchObject({ code: 'SWL_TIMEOUT', name: 'RateLimitTimeoutError' });
  for (const error of [
    new ConnectionError('Received connection error `Broken pipe (os error 32)`. Will attempt to reconnect'),
    new ClosingError('Unable to execute requests; the client is closed. Please create a new client.'),
    new RequestError('Reached maximum inflight requests- ClientError'),
  ]) {
    expect(glideFailure(error)).toMatchObject({ code: 'SWL_STORE_UNAVAILABLE', cause: error });
  }
});

test("the Decoder value the adapter asks replies in is GLIDE's Decoder.String", () => {
  // src/stores/redis/glide.ts passes it as a number, without importing GLIDE.
  expect(glide().Decoder.String).toBe(1);
});

test('a closed client: checks fail at once with SWL_STORE_UNAVAILABLE', async () => {
  const client = await glideClient();
  const limiter = createLimiter({ store: new RedisStore({ client }), prefix: uniquePrefix('glide-closed') });
  expect((await limiter.check('a')).allowed).toBe(true);
  client.close();
  await expect(limiter.check('a')).rejects.toMatchObject({ code: 'SWL_STORE_UNAVAILABLE' });
});

describe('a lost connection', () => {
  let server: RedisProcess;
  beforeAll(async () => {
    server = await startRedis(['--enable-debug-command', 'yes']);
  });
  afterAll(() => server.stop());

  test('checks fail at once while GLIDE reconnects, and limiting resumes, a connection made, once it has', async () => {
    // Reconnection attempts every 20 ms or so.
    const client = await glideClient({ connectionBackoff: { numberOfRetries: 1, factor: 20, exponentBase: 1 } }, server.url);
    const store = new RedisStore({ client });
    const limiter = createLimiter({
      store,
      limit: 100,
      window: '1h',
      timeoutMs: 300,
      denyCacheSize: 0,
      prefix: uniquePrefix('glide-lost'),
    });
    expect((await limiter.check('a')).allowed).toBe(true);
    // No reconnection: its connection just ends with the server.
    const admin = quietClient(server.url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
    try {
      await admin.ping();
      // A check in flight when Redis dies: GLIDE fails it with a ConnectionError, never sends it again.
      admin.call('DEBUG', 'SLEEP', '2').catch(() => undefined);
      await sleep(50);
      const inFlight = limiter.check('a').then(
        () => 'allowed',
        (error: { code?: string }) => error.code,
      );
      await sleep(50);
      await server.kill();
      expect(await inFlight).toBe('SWL_STORE_UNAVAILABLE');
      // Refused at once: not handed to GLIDE, which would hold it until it has reconnected.
      const started = Date.now();
      await expect(limiter.check('a')).rejects.toMatchObject({
        code: 'SWL_STORE_UNAVAILABLE',
        message: 'the Redis connection was lost: GLIDE is reconnecting',
      });
      expect(Date.now() - started).toBeLessThan(50);
      expect(store.connectionsMade()).toBe(0);
      await server.restart();
      // What the limiter's breaker reads: a new connection ends its wait.
      await waitFor(() => store.connectionsMade() === 1, 5_000, 'GLIDE to reconnect');
      // A fresh server: counted from zero, and the check in flight at the kill never sent again.
      expect(await limiter.check('a')).toMatchObject({ allowed: true, remaining: 99 });
    } finally {
      disconnect(admin);
    }
  });
});
