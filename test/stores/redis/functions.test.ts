/**
 * A server that refuses `FUNCTION LOAD`, as Redis 6 or a managed service that renames or forbids
 * the command does: through every client library, checks run as scripts, count exactly, and the
 * load is tried once, not again a second later. On a redis-server of its own, started with `FUNCTION` renamed away.
 */
import { Redis } from 'ioredis';
import { createLimiter, RedisStore } from '../../../src';
import { type RedisProcess, startRedis } from '../../../support/redis-server';
import { closeClient, REDIS_CLIENTS, type StoreClient, uniquePrefix } from '../../helpers/redis';

let server: RedisProcess;
let admin: Redis;
beforeAll(async () => {
  server = await startRedis(['--rename-command', 'FUNCTION', '']);
  admin = new Redis(server.url);
});
afterAll(async () => {
  await admin.quit();
  await server.stop();
});

/** Calls of each command so far, from `INFO commandstats`, and the error replies given, by first word. */
async function stats(): Promise<{ calls: Record<string, number>; errors: Record<string, number> }> {
  const calls: Record<string, number> = {};
  for (const [, name, count] of (await admin.info('commandstats')).matchAll(/cmdstat_([a-z|]+):calls=(\d+)/g)) calls[name] = Number(count);
  const errors: Record<string, number> = {};
  for (const [, word, count] of (await admin.info('errorstats')).matchAll(/errorstat_(\w+):count=(\d+)/g)) errors[word] = Number(count);
  return { calls, errors };
}

const clients = new Map<string, StoreClient>();
const limiters = new Map<string, ReturnType<typeof createLimiter>>();
beforeAll(async () => {
  for (const [name, kind] of REDIS_CLIENTS) {
    const client = await kind.standalone(server.url);
    clients.set(name, client);
    limiters.set(name, createLimiter({ store: new RedisStore({ client }), limit: 10, window: '1h', prefix: uniquePrefix('refused') }));
  }
});
afterAll(async () => {
  for (const client of clients.values()) await closeClient(client);
});

test.each(REDIS_CLIENTS)('%s: checks run as scripts, count exactly, and the load is refused once', async (name) => {
  const limiter = limiters.get(name)!;
  await admin.config('RESETSTAT');
  for (let i = 0; i < 3; i++) expect((await limiter.check('a')).remaining).toBe(9 - i);
  const parallel = await Promise.all(Array.from({ length: 12 }, () => limiter.check('a')));
  expect(parallel.filter((decision) => decision.allowed)).toHaveLength(7);
  const { calls, errors } = await stats();
  expect(calls.fcall).toBeUndefined();
  expect(calls.evalsha).toBeGreaterThanOrEqual(4);
  // The refused FUNCTION LOAD: Redis's error for an unknown command (NOSCRIPT answers aside).
  expect(errors.ERR).toBe(1);
});

test('a second later (when a load that failed otherwise would be tried again), no client tries again', async () => {
  await admin.config('RESETSTAT');
  await new Promise((resolve) => setTimeout(resolve, 1_100));
  for (const limiter of limiters.values()) expect((await limiter.check('b')).allowed).toBe(true);
  const { calls, errors } = await stats();
  expect(calls.evalsha).toBe(REDIS_CLIENTS.length);
  expect(errors.ERR).toBeUndefined();
});
