// Type tests of RedisStore over Valkey's clients (Valkey GLIDE and iovalkey), through the public entries only.
import { Decoder, GlideClient, GlideClusterClient } from '@valkey/valkey-glide';
import { Cluster, Redis } from 'iovalkey';
import { describe, expect, test } from 'tstyche';
import {
  createLimiter,
  type GlideClient as GlideClientPart,
  type GlideClusterClient as GlideClusterClientPart,
  RedisStore,
  type RedisStoreClient,
  type RedisStoreOptions,
} from '../../src/index';

describe('RedisStore over Valkey GLIDE', () => {
  const client = GlideClient.createClient({ addresses: [{ host: '127.0.0.1' }], requestTimeout: 500 });
  const cluster = GlideClusterClient.createClient({ addresses: [{ host: '127.0.0.1', port: 7000 }] });

  test('takes a GlideClient and a GlideClusterClient, whatever their default decoder', async () => {
    expect(new RedisStore({ client: await client })).type.toBe<RedisStore>();
    expect(new RedisStore({ client: await cluster })).type.toBe<RedisStore>();
    const bytes = await GlideClient.createClient({ addresses: [{ host: '127.0.0.1' }], defaultDecoder: Decoder.Bytes });
    expect(RedisStore).type.toBeConstructableWith({ client: bytes });
    expect(createLimiter).type.toBeCallableWith({ store: new RedisStore({ client: await client }), timeoutMs: 500 });
  });

  test('the structural client types are public, and part of the store client union', async () => {
    expect<GlideClientPart>().type.toBeAssignableFrom(await client);
    expect<GlideClusterClientPart>().type.toBeAssignableFrom(await cluster);
    expect<RedisStoreClient>().type.toBeAssignableFrom<GlideClientPart | GlideClusterClientPart>();
  });

  test('a client not yet created (its promise) is refused', () => {
    expect(RedisStore).type.not.toBeConstructableWith({ client });
  });
});

describe('RedisStore over iovalkey', () => {
  test('takes a Redis and a Cluster', () => {
    const client = new Redis({ enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    const cluster = new Cluster([{ host: '127.0.0.1', port: 7000 }]);
    expect(new RedisStore({ client })).type.toBe<RedisStore>();
    expect(new RedisStore({ client: cluster })).type.toBe<RedisStore>();
    expect<RedisStoreOptions['client']>().type.toBeAssignableFrom(client);
  });
});
