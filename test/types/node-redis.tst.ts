// Type tests of RedisStore over node-redis (the `redis` package), through the public entries only.
import { createClient, createCluster, createSentinel, RESP_TYPES } from 'redis';
import { describe, expect, test } from 'tstyche';
import { RedisStore as ExpressRedisStore } from '../../src/express';
import { RedisStore as FastifyRedisStore } from '../../src/fastify';
import {
  createLimiter,
  type NodeRedisClient,
  type NodeRedisCluster,
  RedisStore,
  type RedisStoreClient,
  type RedisStoreOptions,
  type Store,
} from '../../src/index';

describe('RedisStore over node-redis', () => {
  const client = createClient({ url: 'redis://127.0.0.1:6379', disableOfflineQueue: true });
  const cluster = createCluster({ rootNodes: [{ url: 'redis://127.0.0.1:7000' }], defaults: { disableOfflineQueue: true } });

  test('takes a createClient() client and a createCluster() cluster', () => {
    expect(new RedisStore({ client })).type.toBe<RedisStore>();
    expect(new RedisStore({ client: cluster })).type.toBe<RedisStore>();
    const sentinel = createSentinel({ name: 'mymaster', sentinelRootNodes: [{ host: '127.0.0.1', port: 26379 }] });
    expect(new RedisStore({ client: sentinel })).type.toBe<RedisStore>();
    expect(new RedisStore({ client })).type.toBeAssignableTo<Store>();
    expect(RedisStore).type.toBeConstructableWith({ client: createClient() });
    expect(RedisStore).type.toBeConstructableWith({ client: createCluster({ rootNodes: [] }) });
    expect<RedisStoreOptions['client']>().type.toBeAssignableFrom(client);
    expect<RedisStoreOptions['client']>().type.toBeAssignableFrom(cluster);
    expect(createLimiter).type.toBeCallableWith({ store: new RedisStore({ client }) });
  });

  test('takes clients with RESP3 and a type mapping too', () => {
    const resp3 = createClient({ RESP: 3 });
    const mapped = createClient({ RESP: 3 }).withTypeMapping({ [RESP_TYPES.NUMBER]: String });
    expect(RedisStore).type.toBeConstructableWith({ client: resp3 });
    expect(RedisStore).type.toBeConstructableWith({ client: mapped });
    expect(RedisStore).type.toBeConstructableWith({ client: createCluster({ rootNodes: [], RESP: 3 }) });
  });

  test('the structural client types are public, and the store client is their union with ioredis', () => {
    expect<NodeRedisClient>().type.toBeAssignableFrom(client);
    expect<NodeRedisCluster>().type.toBeAssignableFrom(cluster);
    expect<RedisStoreClient>().type.toBeAssignableFrom<NodeRedisClient | NodeRedisCluster>();
    expect<RedisStoreOptions['client']>().type.toBe<RedisStoreClient>();
  });

  test('the Express and Fastify entries export the same RedisStore', () => {
    expect(ExpressRedisStore).type.toBeConstructableWith({ client });
    expect(FastifyRedisStore).type.toBeConstructableWith({ client: cluster });
  });

  test('something that is not a client is refused', () => {
    expect(RedisStore).type.not.toBeConstructableWith({ client: { sendCommand: () => Promise.resolve() } });
    // @ts-expect-error Type 'string' is not assignable to type
    new RedisStore({ client: 'redis://127.0.0.1:6379' });
  });
});
