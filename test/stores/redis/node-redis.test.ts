/**
 * The node-redis adapter as a user meets it: which clients the store takes, replies read the
 * same whatever the client's protocol and type mapping, checks refused (not queued) while the
 * client is not connected, and clear errors for what it cannot take.
 */
import { createClient, createSentinel, RESP_TYPES } from 'redis';
import { createLimiter, RedisStore, StoreUnavailableError } from '../../../src';
import { redisUrl, uniquePrefix } from '../../helpers/redis';

const url = redisUrl;

test('RESP3 clients, and clients that map numbers to strings, decide as RESP2 ones do', async () => {
  const resp2 = createClient({ url: url() });
  const resp3 = createClient({ url: url(), RESP: 3 });
  await Promise.all([resp2.connect(), resp3.connect()]);
  const mapped = resp3.withTypeMapping({ [RESP_TYPES.NUMBER]: String });
  try {
    const prefix = uniquePrefix('resp');
    const seen = [];
    for (const [index, client] of [resp2, resp3, mapped].entries()) {
      const limiter = createLimiter({ store: new RedisStore({ client }), limit: 5, window: '1h', prefix, denyCacheSize: 0 });
      const allowed = await limiter.check(`id-${index}`, { cost: 3 });
      const denied = await limiter.check(`id-${index}`, { cost: 3 });
      seen.push([allowed.allowed, allowed.remaining, denied.allowed, denied.remaining, typeof denied.retryAfterMs]);
    }
    expect(seen).toEqual(new Array(3).fill([true, 2, false, 2, 'number']));
  } finally {
    resp2.destroy();
    resp3.destroy();
  }
});

test('a client whose connect() was not called, or closed, is refused at once with StoreUnavailableError; one connecting is waited for', async () => {
  const client = createClient({ url: url() });
  const store = new RedisStore({ client });
  const limiter = createLimiter({ store, limit: 5, window: '1h', prefix: uniquePrefix('closed'), denyCacheSize: 0 });
  await expect(limiter.check('a')).rejects.toThrow(StoreUnavailableError);
  await expect(limiter.check('a')).rejects.toMatchObject({
    code: 'SWL_STORE_UNAVAILABLE',
    message: expect.stringMatching(/^Redis client is closed: await client.connect\(\)/),
  });
  const connecting = client.connect();
  // Made before the first connection: it waits for it (test/stores/redis/first-connection.test.ts).
  expect(await limiter.check('a')).toMatchObject({ allowed: true, remaining: 4 });
  await connecting;
  expect(await limiter.check('a')).toMatchObject({ allowed: true, remaining: 3 });
  client.destroy();
  await expect(limiter.check('a')).rejects.toThrow(StoreUnavailableError);
});

test('a client older than node-redis 5 (no withAbortSignal) is refused with SWL_INVALID_STORE', () => {
  const legacy = { isOpen: true, isReady: true, sendCommand: () => Promise.resolve(), on: () => undefined };
  expect(() => new RedisStore({ client: legacy as never })).toThrow(expect.objectContaining({ code: 'SWL_INVALID_STORE' }));
  expect(() => new RedisStore({ client: legacy as never })).toThrow(/node-redis 5 or 6/);
});

test('a Sentinel client (createSentinel) is taken; not connected yet, its checks fail at once with SWL_STORE_UNAVAILABLE', async () => {
  const sentinel = createSentinel({ name: 'mymaster', sentinelRootNodes: [{ host: '127.0.0.1', port: 1 }] });
  const limiter = createLimiter({ store: new RedisStore({ client: sentinel }) });
  await expect(limiter.check('a')).rejects.toMatchObject({ code: 'SWL_STORE_UNAVAILABLE' });
});

test('the store keeps the client it was given', () => {
  const client = createClient({ url: url() });
  expect(new RedisStore({ client }).client).toBe(client);
});
