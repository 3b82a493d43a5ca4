/**
 * Identifiers: unit tests of byIp / byUser / byApiKey / lists, then the same over real
 * Express (5 and 4) and Fastify servers counting in Redis, where the client address
 * comes from a real socket or, behind a trusted proxy, from X-Forwarded-For.
 */
import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import express5, { type Request } from 'express';
import Fastify from 'fastify';
import type { Redis } from 'ioredis';
import request from 'supertest';
import type { ExpressRateLimitOptions } from '../../src/express';
import { RedisStore, rateLimit } from '../../src/express';
import { rateLimitPlugin } from '../../src/fastify';
import { ANONYMOUS, byApiKey, byIp, byUser, normalizeIp, type RequestLike, resolveIdentify } from '../../src/http/identify';
import { keysMatching, redisClient, uniquePrefix } from '../helpers/redis';
import { captureWarnings } from '../helpers/warnings';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const express4 = require('express4') as typeof express5;

function req(ip: string | undefined, headers: RequestLike['headers'] = {}, remoteAddress?: string): RequestLike {
  return { ip, headers, socket: remoteAddress === undefined ? undefined : { remoteAddress } };
}

const sha = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 32);

describe('byIp (unit)', () => {
  const ip = byIp();

  test('IPv4 as is', () => {
    expect(ip(req('1.2.3.4'))).toBe('ip:1.2.3.4');
    expect(ip(req('203.0.113.255'))).toBe('ip:203.0.113.255');
  });

  test('IPv4-mapped IPv6 is unmapped, however it is written', () => {
    expect(ip(req('::ffff:1.2.3.4'))).toBe('ip:1.2.3.4');
    expect(ip(req('::FFFF:1.2.3.4'))).toBe('ip:1.2.3.4');
    expect(ip(req('::ffff:102:304'))).toBe('ip:1.2.3.4');
    expect(ip(req('0:0:0:0:0:ffff:0102:0304'))).toBe('ip:1.2.3.4');
    // Not mapped: ::ffff:0:0/96 only.
    expect(ip(req('::fffe:1.2.3.4'))).not.toBe('ip:1.2.3.4');
    expect(byIp({ ipv6Subnet: false })(req('::ffff:1.2.3.4'))).toBe('ip:1.2.3.4');
  });

  test('IPv6 is masked to /56 by default: addresses in one /56 share an identifier, another /56 does not', () => {
    const id = ip(req('2001:db8:abcd:1234::1'));
    expect(id).toBe('ip:2001:db8:abcd:1200::/56');
    expect(ip(req('2001:db8:abcd:12ff:ffff:ffff:ffff:ffff'))).toBe(id);
    expect(ip(req('2001:0DB8:ABCD:1200:0000:0000:0000:0000'))).toBe(id);
    expect(ip(req('2001:db8:abcd:1300::1'))).not.toBe(id);
    expect(ip(req('2001:db8:abcd:11ff::1'))).not.toBe(id);
  });

  test('ipv6Subnet: 64 keeps /64s apart that /56 would merge', () => {
    const by64 = byIp({ ipv6Subnet: 64 });
    expect(by64(req('2001:db8:abcd:1234::1'))).toBe('ip:2001:db8:abcd:1234::/64');
    expect(by64(req('2001:db8:abcd:1234:ffff::9'))).toBe('ip:2001:db8:abcd:1234::/64');
    expect(by64(req('2001:db8:abcd:1235::1'))).toBe('ip:2001:db8:abcd:1235::/64');
    expect(ip(req('2001:db8:abcd:1235::1'))).toBe(ip(req('2001:db8:abcd:1234::1')));
  });

  test('ipv6Subnet: other prefix lengths', () => {
    expect(byIp({ ipv6Subnet: 48 })(req('2001:db8:abcd:1234::1'))).toBe('ip:2001:db8:abcd::/48');
    expect(byIp({ ipv6Subnet: 1 })(req('ffff::1'))).toBe('ip:8000::/1');
    expect(byIp({ ipv6Subnet: 128 })(req('2001:db8::1'))).toBe('ip:2001:db8:0:0:0:0:0:1/128');
  });

  test('ipv6Subnet: false uses whole addresses, one spelling per address', () => {
    const whole = byIp({ ipv6Subnet: false });
    expect(whole(req('2001:db8::1'))).toBe('ip:2001:db8:0:0:0:0:0:1');
    expect(whole(req('2001:0db8:0:0:0:0:0:0001'))).toBe('ip:2001:db8:0:0:0:0:0:1');
    expect(whole(req('2001:db8::2'))).not.toBe(whole(req('2001:db8::1')));
  });

  test('a zone id is not part of the address', () => {
    expect(ip(req('fe80::1%eth0'))).toBe(ip(req('fe80::2')));
  });

  test('falls back to the socket address; nothing known means no identifier', () => {
    expect(ip(req(undefined, {}, '::ffff:10.0.0.1'))).toBe('ip:10.0.0.1');
    expect(ip(req(undefined))).toBeUndefined();
    expect(ip(req(''))).toBeUndefined();
  });

  test('never reads X-Forwarded-For itself', () => {
    expect(ip(req('10.0.0.1', { 'x-forwarded-for': '1.2.3.4' }))).toBe('ip:10.0.0.1');
  });

  test.each([0, 129, 56.5, -64, Number.NaN, '64', true])('invalid ipv6Subnet %p throws a TypeError naming it', (subnet) => {
    expect(() => byIp({ ipv6Subnet: subnet as never })).toThrow(TypeError);
    expect(() => byIp({ ipv6Subnet: subnet as never })).toThrow(/^ipv6Subnet: /);
  });

  test('unknown options throw', () => {
    expect(() => byIp({ subnet: 64 } as never)).toThrow(/^subnet: unknown option for byIp/);
  });

  test('normalizeIp leaves what is not an IP address alone', () => {
    expect(normalizeIp('not-an-ip', 56)).toBe('not-an-ip');
  });
});

describe('byUser, byApiKey, lists (unit)', () => {
  test('byUser: user:<id>; nothing for anonymous requests', () => {
    const user = byUser((r: { user?: { id?: string | number | null } }) => r.user?.id);
    expect(user({ user: { id: 42 } })).toBe('user:42');
    expect(user({ user: { id: 'alice' } })).toBe('user:alice');
    expect(user({})).toBeUndefined();
    expect(user({ user: { id: null } })).toBeUndefined();
    expect(user({ user: { id: '' } })).toBeUndefined();
    expect(() => byUser('id' as never)).toThrow(/^byUser: /);
  });

  test('byApiKey: a hash of the x-api-key header, never the key itself', () => {
    const key = byApiKey();
    const id = key(req('1.2.3.4', { 'x-api-key': 'sk_live_secret' }));
    expect(id).toBe(`key:${sha('sk_live_secret')}`);
    expect(id).not.toContain('sk_live_secret');
    expect(key(req('1.2.3.4', { 'x-api-key': 'sk_live_other' }))).not.toBe(id);
    expect(key(req('1.2.3.4', { 'x-api-key': ['sk_live_secret', 'ignored'] }))).toBe(id);
    expect(key(req('1.2.3.4'))).toBeUndefined();
    expect(key(req('1.2.3.4', { 'x-api-key': '' }))).toBeUndefined();
  });

  test('byApiKey: custom header (any case)', () => {
    const key = byApiKey({ header: 'X-Client-Token' });
    expect(key(req(undefined, { 'x-client-token': 'abc' }))).toBe(`key:${sha('abc')}`);
    expect(key(req(undefined, { 'x-api-key': 'abc' }))).toBeUndefined();
    expect(() => byApiKey({ header: '' })).toThrow(/^header: /);
    expect(() => byApiKey({ name: 'x' } as never)).toThrow(/^name: unknown option for byApiKey/);
  });

  test('lists: the first non-empty answer wins; nothing means anonymous', () => {
    const identify = resolveIdentify<RequestLike>([byApiKey(), byIp()], byIp());
    expect(identify(req('1.2.3.4', { 'x-api-key': 'k' }))).toBe(`key:${sha('k')}`);
    expect(identify(req('1.2.3.4'))).toBe('ip:1.2.3.4');
    expect(identify(req(undefined))).toBe(ANONYMOUS);
    expect(ANONYMOUS).toBe('anonymous');
  });

  test('plain functions: strings and numbers as they are, empty answers fall through', () => {
    const seen: string[] = [];
    const identify = resolveIdentify<RequestLike>(
      [
        () => {
          seen.push('first');
          return '';
        },
        () => null,
        (r) => (r.ip === 'n' ? 7 : undefined),
        () => 'tenant-a',
      ],
      byIp(),
    );
    expect(identify(req('n'))).toBe('7');
    expect(identify(req('x'))).toBe('tenant-a');
    expect(seen).toEqual(['first', 'first']);
    expect(resolveIdentify<RequestLike>(() => undefined, byIp())(req('1.2.3.4'))).toBe(ANONYMOUS);
    expect(resolveIdentify<RequestLike>(undefined, byIp())(req('1.2.3.4'))).toBe('ip:1.2.3.4');
  });

  test('bad identify options throw naming identify', () => {
    expect(() => resolveIdentify([], byIp())).toThrow(/^identify: /);
    expect(() => resolveIdentify(['ip'] as never, byIp())).toThrow(/^identify: /);
    expect(() => resolveIdentify('ip' as never, byIp())).toThrow(/^identify: /);
  });
});

describe('identifiers over HTTP', () => {
  let client: Redis;
  const servers: { close(): unknown }[] = [];
  const warnings = captureWarnings();
  beforeAll(() => {
    client = redisClient();
  });
  afterAll(async () => {
    await Promise.all(servers.map((server) => server.close()));
    await client.quit();
  });

  async function keysOf(prefix: string, pattern = `${prefix}:*`): Promise<string[]> {
    return (await keysMatching(client, pattern)).sort();
  }

  describe.each([
    ['Express 5', express5],
    ['Express 4', express4],
  ])('%s', (_name, express) => {
    function appWith(options: ExpressRateLimitOptions, trustProxy: boolean) {
      const middleware = rateLimit({ store: new RedisStore({ client }), limit: 1, window: '1m', prefix: uniquePrefix('id'), ...options });
      const app = express();
      app.set('trust proxy', trustProxy);
      app.use(middleware);
      app.get('/', (request: Request, res) => {
        res.send(request.ip);
      });
      return { app, middleware };
    }

    test('trust proxy on: X-Forwarded-For is honoured, each forwarded client has its own quota', async () => {
      const { app, middleware } = appWith({}, true);
      const first = await request(app).get('/').set('X-Forwarded-For', '203.0.113.7').expect(200);
      expect(first.text).toBe('203.0.113.7');
      await request(app).get('/').set('X-Forwarded-For', '198.51.100.9').expect(200);
      await request(app).get('/').set('X-Forwarded-For', '203.0.113.7').expect(429);
      expect(await keysOf(middleware.limiter.prefix)).toEqual(
        [middleware.limiter.keyFor('ip:198.51.100.9'), middleware.limiter.keyFor('ip:203.0.113.7')].sort(),
      );
      // 'trust proxy: true' trusts every hop: each byIp() warns, once (trust-all-proxies.unit.test.ts).
      expect(warnings.codes()).toEqual(['SWL_TRUST_ALL_PROXIES']);
    });

    test('trust proxy off: a spoofed X-Forwarded-For does not change the identifier', async () => {
      const { app, middleware } = appWith({}, false);
      await request(app).get('/').set('X-Forwarded-For', '203.0.113.7').expect(200);
      // A "different client" by its spoofed header: same socket address, same quota.
      await request(app).get('/').set('X-Forwarded-For', '198.51.100.9').expect(429);
      await request(app).get('/').expect(429);
      // supertest reaches the app over IPv4 loopback; a dual-stack listener reports ::ffff:127.0.0.1.
      expect(await keysOf(middleware.limiter.prefix)).toEqual([middleware.limiter.keyFor('ip:127.0.0.1')]);
      // X-Forwarded-For from the socket's own peer: each byIp() warns, once (untrusted-proxy.each-store.test.ts).
      expect(warnings.codes()).toEqual(['SWL_UNTRUSTED_FORWARDED']);
    });

    test('IPv6 clients rotating inside one /56 share a quota; another /56 has its own', async () => {
      const { app } = appWith({ limit: 2 }, true);
      await request(app).get('/').set('X-Forwarded-For', '2001:db8:abcd:1200::1').expect(200);
      await request(app).get('/').set('X-Forwarded-For', '2001:db8:abcd:12ab:dead:beef::7').expect(200);
      await request(app).get('/').set('X-Forwarded-For', '2001:db8:abcd:12ff:ffff:ffff:ffff:ffff').expect(429);
      await request(app).get('/').set('X-Forwarded-For', '2001:db8:abcd:1300::1').expect(200);
      expect(warnings.codes()).toEqual(['SWL_TRUST_ALL_PROXIES']);
    });

    test('ipv6Subnet 64 and false over HTTP', async () => {
      const by64 = appWith({ identify: byIp({ ipv6Subnet: 64 }) }, true);
      await request(by64.app).get('/').set('X-Forwarded-For', '2001:db8:abcd:1234::1').expect(200);
      await request(by64.app).get('/').set('X-Forwarded-For', '2001:db8:abcd:1234::2').expect(429);
      await request(by64.app).get('/').set('X-Forwarded-For', '2001:db8:abcd:1235::1').expect(200);
      const whole = appWith({ identify: byIp({ ipv6Subnet: false }) }, true);
      await request(whole.app).get('/').set('X-Forwarded-For', '2001:db8::1').expect(200);
      await request(whole.app).get('/').set('X-Forwarded-For', '2001:db8::2').expect(200);
      await request(whole.app).get('/').set('X-Forwarded-For', '2001:db8:0:0::1').expect(429);
      // Two apps under 'trust proxy: true', each with its own byIp(): each warns.
      expect(warnings.codes()).toEqual(['SWL_TRUST_ALL_PROXIES', 'SWL_TRUST_ALL_PROXIES']);
    });

    test('byApiKey: the raw key never appears in any Redis key', async () => {
      const secret = `sk_live_${uniquePrefix('secret')}`;
      const { app, middleware } = appWith({ identify: byApiKey(), limit: 2 }, false);
      await request(app).get('/').set('X-Api-Key', secret).expect(200);
      await request(app).get('/').set('X-Api-Key', `${secret}-2`).expect(200);
      const keys = await keysOf(middleware.limiter.prefix);
      expect(keys).toEqual(
        [middleware.limiter.keyFor(`key:${sha(secret)}`), middleware.limiter.keyFor(`key:${sha(`${secret}-2`)}`)].sort(),
      );
      // Nowhere in the whole database either.
      expect(await keysOf('', `*${secret}*`)).toEqual([]);
    });

    test('byApiKey with a custom header', async () => {
      const { app, middleware } = appWith({ identify: byApiKey({ header: 'X-Client-Token' }) }, false);
      await request(app).get('/').set('X-Client-Token', 'tok-1').expect(200);
      await request(app).get('/').set('X-Client-Token', 'tok-1').expect(429);
      await request(app).get('/').set('X-Client-Token', 'tok-2').expect(200);
      expect(await client.exists(middleware.limiter.keyFor(`key:${sha('tok-1')}`))).toBe(1);
    });

    test('[byApiKey(), byIp()]: a key when there is one, else the address', async () => {
      const { app, middleware } = appWith({ identify: [byApiKey(), byIp()] }, true);
      await request(app).get('/').set('X-Forwarded-For', '203.0.113.7').set('X-Api-Key', 'k1').expect(200);
      // The same address without a key is a different client.
      await request(app).get('/').set('X-Forwarded-For', '203.0.113.7').expect(200);
      await request(app).get('/').set('X-Forwarded-For', '198.51.100.1').set('X-Api-Key', 'k1').expect(429);
      expect(await keysOf(middleware.limiter.prefix)).toEqual(
        [middleware.limiter.keyFor('ip:203.0.113.7'), middleware.limiter.keyFor(`key:${sha('k1')}`)].sort(),
      );
      expect(warnings.codes()).toEqual(['SWL_TRUST_ALL_PROXIES']);
    });

    test('ip:1.2.3.4 and user:1.2.3.4 never collide', async () => {
      const identify = [byUser((r: Request) => r.headers['x-user'] as string | undefined), byIp()];
      const { app, middleware } = appWith({ identify }, true);
      await request(app).get('/').set('X-User', '1.2.3.4').expect(200);
      await request(app).get('/').set('X-Forwarded-For', '1.2.3.4').expect(200);
      await request(app).get('/').set('X-User', '1.2.3.4').expect(429);
      await request(app).get('/').set('X-Forwarded-For', '1.2.3.4').expect(429);
      expect(await keysOf(middleware.limiter.prefix)).toEqual(
        [middleware.limiter.keyFor('ip:1.2.3.4'), middleware.limiter.keyFor('user:1.2.3.4')].sort(),
      );
      expect(warnings.codes()).toEqual(['SWL_TRUST_ALL_PROXIES']);
    });

    test('byUser without a user: the shared anonymous quota', async () => {
      const { app, middleware } = appWith({ identify: byUser((r: Request) => r.headers['x-user'] as string | undefined) }, true);
      await request(app).get('/').set('X-Forwarded-For', '203.0.113.7').expect(200);
      await request(app).get('/').set('X-Forwarded-For', '198.51.100.1').expect(429);
      expect(await keysOf(middleware.limiter.prefix)).toEqual([middleware.limiter.keyFor('anonymous')]);
    });
  });

  describe('Fastify', () => {
    async function fastifyWith(trustProxy: boolean) {
      const app = Fastify({ trustProxy });
      servers.push(app);
      const prefix = uniquePrefix('idf');
      await app.register(rateLimitPlugin, { store: new RedisStore({ client }), limit: 1, window: '1m', prefix });
      app.get('/', async (r) => r.ip);
      await app.ready();
      return { app, prefix };
    }

    test('trustProxy off: a spoofed X-Forwarded-For shares the socket address quota', async () => {
      const { app, prefix } = await fastifyWith(false);
      await request(app.server).get('/').set('X-Forwarded-For', '203.0.113.7').expect(200);
      await request(app.server).get('/').set('X-Forwarded-For', '198.51.100.9').expect(429);
      expect(await keysOf(prefix)).toEqual([`${prefix}:ip:127.0.0.1`]);
      expect(warnings.codes()).toEqual(['SWL_UNTRUSTED_FORWARDED']);
    });

    test('trustProxy on: X-Forwarded-For is honoured, IPv6 masked to /56', async () => {
      const { app, prefix } = await fastifyWith(true);
      await request(app.server).get('/').set('X-Forwarded-For', '203.0.113.7').expect(200, '203.0.113.7');
      await request(app.server).get('/').set('X-Forwarded-For', '2001:db8:abcd:1234::1').expect(200);
      await request(app.server).get('/').set('X-Forwarded-For', '2001:db8:abcd:12ee::1').expect(429);
      expect(await keysOf(prefix)).toEqual([`${prefix}:ip:203.0.113.7`, `${prefix}:ip:2001:db8:abcd:1200::/56`].sort());
    });
  });

  describe('a dual-stack server', () => {
    async function ipv6LoopbackWorks(): Promise<boolean> {
      const probe = Fastify();
      try {
        await probe.listen({ host: '::1', port: 0 });
        return true;
      } catch {
        return false;
      } finally {
        await probe.close();
      }
    }

    test('IPv4 clients of a server listening on :: are counted by their IPv4 address, not as one IPv6 /56', async () => {
      if (!(await ipv6LoopbackWorks())) {
        // No IPv6 here: what the socket would report, at unit level.
        expect(byIp()(req('::ffff:127.0.0.1'))).toBe('ip:127.0.0.1');
        return;
      }
      const app = Fastify();
      servers.push(app);
      const prefix = uniquePrefix('dual');
      const seen: string[] = [];
      app.addHook('onRequest', async (r) => {
        seen.push(r.ip);
      });
      await app.register(rateLimitPlugin, { store: new RedisStore({ client }), limit: 1, window: '1m', prefix });
      app.get('/', async () => 'ok');
      await app.listen({ host: '::', port: 0 });
      const { port } = app.server.address() as AddressInfo;

      await request(`http://127.0.0.1:${port}`).get('/').expect(200);
      await request(`http://127.0.0.1:${port}`).get('/').expect(429);
      // An IPv6 client is someone else.
      await request(`http://[::1]:${port}`).get('/').expect(200);
      expect(seen).toEqual(['::ffff:127.0.0.1', '::ffff:127.0.0.1', '::1']);
      expect(await keysOf(prefix)).toEqual([`${prefix}:ip:0:0:0:0::/56`, `${prefix}:ip:127.0.0.1`].sort());
    });

    test('the same with Express', async () => {
      if (!(await ipv6LoopbackWorks())) return;
      const middleware = rateLimit({ store: new RedisStore({ client }), limit: 1, window: '1m', prefix: uniquePrefix('dualx') });
      const app = express5();
      app.use(middleware);
      app.get('/', (_r, res) => {
        res.send('ok');
      });
      const server = await new Promise<ReturnType<typeof app.listen>>((resolve) => {
        const listening = app.listen(0, '::', () => resolve(listening));
      });
      servers.push({ close: () => new Promise((resolve) => server.close(resolve)) });
      const { port } = server.address() as AddressInfo;
      await request(`http://127.0.0.1:${port}`).get('/').expect(200);
      await request(`http://127.0.0.1:${port}`).get('/').expect(429);
      expect(await client.exists(middleware.limiter.keyFor('ip:127.0.0.1'))).toBe(1);
    });
  });
});
