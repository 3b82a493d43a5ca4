/**
 * Keys: every key a limiter writes is `${prefix}:...`; overlong identifiers are hashed
 * into a short key; odd identifiers (braces, colons, globs, newlines, non-UTF-8) stay
 * under the prefix and keep their own counters.
 */
import type { Redis } from 'ioredis';
import { createLimiter } from '../../src';
import { ALGORITHM_NAMES } from '../../src/algorithms';
import type { AlgorithmName } from '../../src/algorithms/types';
import { keyBytesMatching, keysUnder, manualClock, redisClient, redisLimiter, uniquePrefix } from '../helpers/redis';
import { onRedis, storesOfTestFile, withoutRedis } from '../helpers/stores';

let client: Redis;
onRedis.beforeAll(() => {
  client = redisClient();
});
onRedis.afterAll(() => client.quit());

const ODD_IDENTIFIERS = [
  'user{42}',
  '{',
  '}',
  '}{',
  '{}',
  'a:b:c',
  ':',
  '*',
  'user*',
  '?[a-z]',
  'line\nbreak',
  '\r\n',
  ' ',
  '',
  'caf\u00e9',
  '\u00ff\u00fe latin1 bytes of a non-UTF-8 header',
  '\ud83d\ude00',
  'lone \ud800 high surrogate',
  'lone \udc00 low surrogate',
  '\udfff',
  '\u0000nul',
];
const ALGORITHMS: readonly AlgorithmName[] = ALGORITHM_NAMES;

withoutRedis.describe('keyFor', () => {
  test('an identifier up to 128 characters is kept as is, under the prefix', () => {
    const limiter = createLimiter({ prefix: 'api' });
    expect(limiter.keyFor('user:42')).toBe('api:user:42');
    expect(limiter.keyFor('x'.repeat(128))).toBe(`api:${'x'.repeat(128)}`);
  });

  test('an overlong identifier is hashed into a short key under the prefix', () => {
    const limiter = createLimiter({ prefix: 'api' });
    const long = 'x'.repeat(129);
    const key = limiter.keyFor(long);
    expect(key).toMatch(/^api:sha256:[A-Za-z0-9_-]{43}$/);
    expect(limiter.keyFor('y'.repeat(100_000))).toMatch(/^api:sha256:[A-Za-z0-9_-]{43}$/);
    // Deterministic, and distinct for distinct identifiers, including ones differing only at the end.
    expect(limiter.keyFor(long)).toBe(key);
    expect(limiter.keyFor(`${'x'.repeat(128)}y`)).not.toBe(key);
    expect(createLimiter({ prefix: 'other' }).keyFor(long)).toBe(`other:${key.slice('api:'.length)}`);
  });

  test('each identifier gets its own key in any order of asking, the same key asked twice in a row, and a non-string still throws', () => {
    const limiter = createLimiter({ prefix: 'api' });
    const sequence = ['a', 'a', 'b', '', '', 'a', 'x'.repeat(129), 'x'.repeat(129), 'lone \ud800', 'lone \ud800', 'b'];
    const fresh = createLimiter({ prefix: 'api' });
    for (const identifier of sequence) {
      // A fresh limiter per identifier has nothing remembered from an earlier call.
      expect(limiter.keyFor(identifier)).toBe(createLimiter({ prefix: 'api' }).keyFor(identifier));
    }
    expect(limiter.keyFor('')).toBe('api:');
    expect(fresh.keyFor('')).toBe('api:');
    for (const bad of [undefined, null, 42]) {
      expect(() => limiter.keyFor(bad as unknown as string)).toThrow(/identifier: must be a string/);
      expect(() => fresh.keyFor(bad as unknown as string)).toThrow(/identifier: must be a string/);
    }
  });
});

onRedis.describe.each(ALGORITHMS)('%s keys in Redis', (algorithm) => {
  test('an overlong identifier gets its own short key under the prefix, with its own counter', async () => {
    const clock = manualClock();
    const limiter = redisLimiter(client, 'long', { algorithm, limit: 2, window: '1m', clock: clock.now, denyCacheSize: 0 });
    const { prefix } = limiter;
    const a = `${'a'.repeat(5_000)}1`;
    const b = `${'a'.repeat(5_000)}2`;
    expect((await limiter.check(a)).allowed).toBe(true);
    expect((await limiter.check(a)).allowed).toBe(true);
    expect((await limiter.check(a)).allowed).toBe(false);
    expect((await limiter.check(b)).allowed).toBe(true);
    const keys = (await keysUnder(client, prefix)).sort();
    expect(keys).toEqual([limiter.keyFor(a), limiter.keyFor(b)].sort());
    for (const key of keys) expect(key.length).toBeLessThan(prefix.length + 60);
    await limiter.reset(a);
    expect(await client.exists(limiter.keyFor(a))).toBe(0);
    expect((await limiter.check(a)).allowed).toBe(true);
  });

  test('odd identifiers each get one key under the prefix and independent counters', async () => {
    const clock = manualClock();
    const limiter = redisLimiter(client, 'odd', { algorithm, limit: 1, window: '1m', clock: clock.now, denyCacheSize: 0 });
    const { prefix } = limiter;
    for (const id of ODD_IDENTIFIERS) {
      expect((await limiter.check(id)).allowed).toBe(true);
    }
    // Each identifier has used its limit of 1, and only its own: none shares a counter.
    for (const id of ODD_IDENTIFIERS) {
      expect((await limiter.peek(id)).allowed).toBe(false);
    }
    const keys = await keyBytesMatching(client, `${prefix}:*`);
    expect(keys).toHaveLength(ODD_IDENTIFIERS.length);
    const prefixBytes = Buffer.from(`${prefix}:`);
    for (const key of keys) expect(key.subarray(0, prefixBytes.length).equals(prefixBytes)).toBe(true);
    // A glob-looking identifier only touches its own key.
    await limiter.reset('*');
    expect(await keyBytesMatching(client, `${prefix}:*`)).toHaveLength(ODD_IDENTIFIERS.length - 1);
    expect((await limiter.peek('user*')).allowed).toBe(false);
    expect((await limiter.peek('*')).allowed).toBe(true);
  });
});

describe.each(storesOfTestFile(() => client))('identifiers that are not well-formed UTF-16 on %s', (_name, makeStore) => {
  test('distinct lone surrogates do not share a counter', async () => {
    const limiter = createLimiter({ store: makeStore(), limit: 1, window: '1m', prefix: uniquePrefix('utf'), denyCacheSize: 0 });
    const ids = ['\ud800', '\udc00', '\udfff', 'x\ud800', 'x\udbff'];
    for (const id of ids) expect((await limiter.check(id)).allowed).toBe(true);
    const keys = new Set(ids.map((id) => limiter.keyFor(id)));
    expect(keys.size).toBe(ids.length);
    for (const key of keys) expect(key.startsWith(`${limiter.prefix}:`)).toBe(true);
  });
});
