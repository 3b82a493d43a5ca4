/**
 * Hostile input over real HTTP, to Express and Fastify servers limiting into a real
 * Redis (limit 3 per hour, so a 4th and 5th request must be refused):
 *
 * - identifiers taken from a header by a custom identify, carrying `{`, `}`, `:`, `*`,
 *   CR, LF and NUL (percent-encoded in the header, decoded by identify, since HTTP forbids
 *   raw CR/LF in a header value), 10 kB values, and raw non-UTF-8 bytes sent over a plain
 *   TCP socket; a raw LF inside a header (the server must refuse the request, not crash);
 * - requests without the header (they fall back to the client IP), and with it empty;
 * - a spoofed X-Forwarded-For with trust proxy off, which must not change the IP used;
 * - IPv6 addresses rotated inside one /56, as the request IP: through X-Forwarded-For
 *   from a trusted loopback proxy (Fastify `inject({ remoteAddress })` cannot run under
 *   this Jest setup: light-my-request's `cookie` is ESM-only), and from a real socket on
 *   ::1 when the host has IPv6 loopback.
 *
 * Proves, for each: no crash (every request is answered, no unhandled rejection, the
 * servers still answer afterwards), nobody escapes its limit (exactly 3 of 5 pass, with
 * rate-limit headers on all 5), distinct inputs do not share a quota by accident, and no
 * key is created outside the limiter's prefix (every key in Redis, by SCAN, starts with
 * one of the prefixes used).
 */
import { createServer } from 'node:net';
import { byIp, RedisStore } from '../../src';
import { type App, closeAgent, FRAMEWORKS, type Framework, get, rawRequest, startApp } from '../helpers/http-load';
import { watchUnhandledRejections } from '../helpers/process';
import { quietClient, type RedisProcess, scanAll, startFaultRedis, waitReady } from '../helpers/redis-faults';
import { captureWarnings } from '../helpers/warnings';

const LIMIT = 3;
const TRIES = 5;

let redis: RedisProcess;
let client: ReturnType<typeof quietClient>;
let rejections: ReturnType<typeof watchUnhandledRejections>;
const apps: App[] = [];
const prefixes = new Set<string>();

beforeAll(async () => {
  redis = await startFaultRedis();
  client = quietClient(redis.url, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  await waitReady(client);
  rejections = watchUnhandledRejections();
});
afterAll(async () => {
  try {
    // After every test: no key outside the prefixes, every server still answers, no unhandled rejection.
    const keys = await scanAll(client);
    expect(keys.length).toBeGreaterThan(0);
    const outside = keys.filter((key) => ![...prefixes].some((prefix) => key.startsWith(`${prefix}:`)));
    expect(outside).toEqual([]);
    for (const app of apps) {
      // 429 for the apps identifying by IP (this client's quota is used up), 200 for the others.
      const sample = await get(app.port, { 'x-id': 'still-alive' }, '/', app.host);
      expect(sample.limited && [200, 429].includes(sample.status)).toBe(true);
    }
    expect(rejections.reasons).toEqual([]);
  } finally {
    rejections.stop();
    for (const app of apps) await app.close();
    closeAgent();
    client.disconnect();
    await redis.stop();
  }
});

/** `%XX` escapes decoded; input that is not valid percent-encoded UTF-8 is used as it is. */
function decode(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

/** The identify of the header apps: the decoded `x-id` header, else the client IP. */
const byHeader = (request: { headers: Record<string, string | string[] | undefined> }): string | undefined => {
  const value = request.headers['x-id'];
  return typeof value === 'string' && value !== '' ? decode(value) : undefined;
};

async function app(
  framework: Framework,
  name: string,
  options: Parameters<typeof startApp>[1] = {},
  settings: Parameters<typeof startApp>[2] = {},
): Promise<App> {
  const prefix = `bad-${framework}-${name}`;
  prefixes.add(prefix);
  const started = await startApp(
    framework,
    { store: new RedisStore({ client }), limit: LIMIT, window: '1h', prefix, ...options },
    settings,
  );
  apps.push(started);
  return started;
}

/** Sends TRIES requests one after the other; returns their statuses, all of which must carry headers. */
async function statuses(port: number, headers: Record<string, string>, host?: string): Promise<number[]> {
  const result: number[] = [];
  for (let i = 0; i < TRIES; i++) {
    const sample = await get(port, headers, '/', host);
    expect(sample.limited).toBe(true);
    result.push(sample.status);
  }
  return result;
}

const LIMITED = [...new Array(LIMIT).fill(200), ...new Array(TRIES - LIMIT).fill(429)];

// Shared by the frameworks' tests: SWL_UNTRUSTED_FORWARDED is once per process, whichever framework has it first.
const warnings = captureWarnings();

describe.each(FRAMEWORKS)('%s', (framework) => {
  test('identifiers with braces, colons, stars, CR, LF, NUL and 10 kB: each limited on its own, exactly', async () => {
    const { port } = await app(framework, 'header', { identify: [byHeader, byIp()] });
    const long = 'x'.repeat(10_000);
    const identifiers = [
      'a{b}c',
      '{}',
      '{user-1}',
      'a:b:c',
      ':',
      '*',
      'bad-*',
      `bad-${framework}-other:stolen`,
      'line1%0Aline2',
      'cr%0D%0Alf',
      'nul%00byte',
      '%F0%9F%94%A5 unicode',
      '%ZZ not an escape',
      `${long}-1`,
      // Same first 128 characters as the previous one: must not share its quota.
      `${long}-2`,
    ];
    for (const id of identifiers) {
      expect({ id: id.slice(0, 40), statuses: await statuses(port, { 'x-id': id }) }).toEqual({ id: id.slice(0, 40), statuses: LIMITED });
    }
    // The same identifiers again: still refused, each one.
    for (const id of identifiers) expect((await get(port, { 'x-id': id })).status).toBe(429);
    // One key per identifier, each `${prefix}:${identifier}`, the 10 kB ones hashed to a short one.
    const prefix = `bad-${framework}-header`;
    const keys = (await scanAll(client)).filter((key) => key.startsWith(`${prefix}:`));
    expect(keys).toHaveLength(identifiers.length);
    expect(keys).toContain(`${prefix}:a{b}c`);
    expect(keys).toContain(`${prefix}:line1\nline2`);
    expect(keys).toContain(`${prefix}:nul\0byte`);
    expect(keys.filter((key) => key.startsWith(`${prefix}:sha256:`))).toHaveLength(2);
    expect(Math.max(...keys.map((key) => key.length))).toBeLessThanOrEqual(prefix.length + 1 + 128);
  });

  test('raw non-UTF-8 bytes in the header over a TCP socket: limited per byte sequence, exactly', async () => {
    const { port } = await app(framework, 'bytes', { identify: [byHeader, byIp()] });
    const sequences = [Buffer.from([0xff, 0xfe, 0xfd]), Buffer.from([0xc3, 0x28]), Buffer.from([0x80, 0x81, 0x7b, 0x7d])];
    for (const bytes of sequences) {
      const head = Buffer.concat([Buffer.from('GET / HTTP/1.1\r\nHost: localhost\r\nX-Id: '), bytes]);
      const codes: number[] = [];
      for (let i = 0; i < TRIES; i++) codes.push(await rawRequest(port, head));
      expect({ bytes: bytes.toString('hex'), codes }).toEqual({ bytes: bytes.toString('hex'), codes: LIMITED });
    }
  });

  test('a raw LF or NUL inside a header value is refused by the HTTP parser, nothing crashes, nothing is counted', async () => {
    const { port } = await app(framework, 'raw-lf', { identify: [byHeader, byIp()] });
    for (const bytes of [Buffer.from('evil\nX-Other: 1'), Buffer.from('nul\0byte'), Buffer.from('\rcr')]) {
      const status = await rawRequest(port, Buffer.concat([Buffer.from('GET / HTTP/1.1\r\nHost: localhost\r\nX-Id: '), bytes]));
      expect(status === 400 || status === 0).toBe(true);
    }
    expect((await get(port, { 'x-id': 'after' })).status).toBe(200);
    expect((await scanAll(client)).filter((key) => key.startsWith(`bad-${framework}-raw-lf:`))).toEqual([`bad-${framework}-raw-lf:after`]);
  });

  test('missing or empty header: falls back to the client IP, whose quota is shared', async () => {
    const { port } = await app(framework, 'missing', { identify: [byHeader, byIp()] });
    const codes: number[] = [];
    for (let i = 0; i < TRIES; i++) codes.push((await get(port, i % 2 === 0 ? {} : { 'x-id': '' })).status);
    expect(codes).toEqual(LIMITED);
    expect(await client.exists(`bad-${framework}-missing:ip:127.0.0.1`)).toBe(1);
  });

  test('spoofed X-Forwarded-For with trust proxy off: the socket address is used, the quota is not escaped', async () => {
    const { port } = await app(framework, 'spoof');
    const codes: number[] = [];
    for (let i = 0; i < TRIES; i++) {
      codes.push((await get(port, { 'x-forwarded-for': `203.0.113.${i}, 2001:db8::${i}`, 'x-real-ip': `198.51.100.${i}` })).status);
    }
    expect(codes).toEqual(LIMITED);
    const keys = (await scanAll(client)).filter((key) => key.startsWith(`bad-${framework}-spoof:`));
    expect(keys).toEqual([`bad-${framework}-spoof:ip:127.0.0.1`]);
    // X-Forwarded-For from the socket's own peer: byIp() warns, once per process.
    expect(warnings.codes()).toEqual(['SWL_UNTRUSTED_FORWARDED']);
  });

  test('IPv6 addresses rotated inside one /56 (X-Forwarded-For from a trusted loopback proxy) share one quota', async () => {
    const { port } = await app(framework, 'v6', {}, { trustProxy: framework === 'express' ? 'loopback' : '127.0.0.1' });
    const inside = [
      '2001:db8:abcd:1200::1',
      '2001:db8:abcd:12ff:ffff:ffff:ffff:ffff',
      '2001:db8:abcd:1234:5678::9',
      '2001:DB8:ABCD:1201::',
      '2001:db8:abcd:1299::42',
    ];
    const codes: number[] = [];
    for (const address of inside) codes.push((await get(port, { 'x-forwarded-for': address })).status);
    expect(codes).toEqual(LIMITED);
    // The next /56 is someone else.
    expect((await get(port, { 'x-forwarded-for': '2001:db8:abcd:1300::1' })).status).toBe(200);
    const keys = (await scanAll(client)).filter((key) => key.startsWith(`bad-${framework}-v6:`)).sort();
    expect(keys).toEqual([`bad-${framework}-v6:ip:2001:db8:abcd:1200::/56`, `bad-${framework}-v6:ip:2001:db8:abcd:1300::/56`]);
  });
});

test('a real socket on ::1 (when the host has IPv6 loopback): limited exactly', async () => {
  const hasV6 = await new Promise<boolean>((resolve) => {
    const probe = createServer();
    probe.once('error', () => resolve(false));
    probe.listen(0, '::1', () => probe.close(() => resolve(true)));
  });
  if (!hasV6) {
    console.log('No IPv6 loopback on this host: the ::1 socket case was not run.');
    return;
  }
  for (const framework of FRAMEWORKS) {
    const { port } = await app(framework, 'loopback6', {}, { host: '::1' });
    expect(await statuses(port, {}, '::1')).toEqual(LIMITED);
    expect(await client.exists(`bad-${framework}-loopback6:ip:0:0:0:0::/56`)).toBe(1);
  }
});
