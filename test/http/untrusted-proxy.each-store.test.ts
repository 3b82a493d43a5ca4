/**
 * The `SWL_UNTRUSTED_FORWARDED` warning of `byIp()`: a request with `X-Forwarded-For` or
 * `Forwarded` while the framework's `ip` is the socket's own peer (no Express `trust proxy`,
 * no Fastify `trustProxy`) warns once per limiter; trusted proxies, `warnOnForwarded: false`
 * and requests without those headers do not. The header itself is never read: with the
 * proxy untrusted, every spoofed value counts against the socket's address. Through
 * Express 5, Express 4, the Fastify plugin's options and a Fastify route's
 * `config.rateLimit`, on RedisStore and MemoryStore.
 */
import { byIp } from '../../src/express';
import { manualClock, uniquePrefix } from '../helpers/redis';
import { storesOfTestFile } from '../helpers/stores';
import { counted, FRAMEWORK_ROWS, type Framework, type Setup, type TestOptions } from './frameworks';

const STORES = storesOfTestFile();

let emitWarning: jest.SpyInstance;
beforeEach(() => {
  emitWarning = jest.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
});
afterEach(() => {
  emitWarning.mockRestore();
});

/** The SWL_UNTRUSTED_FORWARDED warnings emitted so far: their messages. */
function forwardedWarnings(): string[] {
  return emitWarning.mock.calls
    .filter(([, options]) => (options as { code?: string } | undefined)?.code === 'SWL_UNTRUSTED_FORWARDED')
    .map(([message]) => String(message));
}

const XFF = (ip: string) => ({ 'x-forwarded-for': ip });

/** Hono's byIp() has its own proxy setting and warning: test/hono/identify.test.ts. */
const ROWS = FRAMEWORK_ROWS.filter(([name]) => !name.startsWith('Hono'));

describe.each(STORES)('on %s', (_storeName, makeStore) => {
  describe.each(ROWS)('%s', (frameworkName, framework: Framework) => {
    const fastify = frameworkName.startsWith('Fastify');
    const start = (options: TestOptions, setup: Partial<Setup> = {}) =>
      framework.start(
        { limit: 2, window: '1m', ...options },
        {
          store: makeStore(),
          clock: manualClock().now,
          prefix: uniquePrefix('proxy'),
          ...setup,
        },
      );

    test(`untrusted proxy (${fastify ? 'trustProxy: false' : "no 'trust proxy'"}) + X-Forwarded-For: one warning naming the setting, once per limiter`, async () => {
      const app = await start({}, { trustProxy: fastify ? false : undefined });
      expect((await app.send(XFF('203.0.113.9'))).status).toBe(200);
      const warnings = forwardedWarnings();
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toContain("Express's 'trust proxy'");
      expect(warnings[0]).toContain("Fastify's 'trustProxy'");
      expect(warnings[0]).toContain('(127.0.0.1)');
      expect(warnings[0]).toContain('warnOnForwarded: false');
      // A second such request of the same limiter: no more.
      expect((await app.send(XFF('203.0.113.10'))).status).toBe(200);
      expect(forwardedWarnings()).toHaveLength(1);
      // Another limiter (another app) warns for itself, once, whatever the first said.
      const other = await start({}, { trustProxy: fastify ? false : undefined });
      expect((await other.send(XFF('203.0.113.11'))).status).toBe(200);
      expect((await other.send(XFF('203.0.113.12'))).status).toBe(200);
      expect(forwardedWarnings()).toHaveLength(2);
      expect(emitWarning).toHaveBeenCalledTimes(2);
    });

    test('the Forwarded header warns too', async () => {
      const app = await start({});
      expect((await app.send({ forwarded: 'for=203.0.113.9;proto=https' })).status).toBe(200);
      expect(forwardedWarnings()).toHaveLength(1);
    });

    test(`trusted proxy (${fastify ? 'trustProxy: true' : "app.set('trust proxy', true)"}): no warning`, async () => {
      const app = await start({}, { trustProxy: true });
      expect((await app.send(XFF('203.0.113.9'))).status).toBe(200);
      expect((await app.send(XFF('203.0.113.10'))).status).toBe(200);
      expect(forwardedWarnings()).toEqual([]);
    });

    test('byIp({ warnOnForwarded: false }): no warning', async () => {
      const app = await start({ identify: byIp({ warnOnForwarded: false }) });
      expect((await app.send(XFF('203.0.113.9'))).status).toBe(200);
      expect((await app.send({ forwarded: 'for=203.0.113.9' })).status).toBe(200);
      expect(forwardedWarnings()).toEqual([]);
    });

    test('no forwarded header: no warning', async () => {
      const app = await start({});
      expect((await app.send()).status).toBe(200);
      expect((await app.send({ 'x-real-ip': '203.0.113.9' })).status).toBe(200);
      expect(forwardedWarnings()).toEqual([]);
    });

    test('untrusted: the socket address is used, so spoofed X-Forwarded-For values share one quota', async () => {
      const app = await start({});
      const seen: number[] = [];
      for (const ip of ['198.51.100.1', '198.51.100.2', '198.51.100.3']) seen.push((await app.send(XFF(ip))).status);
      expect(seen).toEqual([200, 200, 429]);
      expect(await counted(app, 'ip:127.0.0.1')).toBe(2);
      expect(await counted(app, 'ip:198.51.100.1')).toBe(0);
    });

    test('trusted: each forwarded client has its own quota', async () => {
      const app = await start({}, { trustProxy: true });
      const seen: number[] = [];
      for (const ip of ['198.51.100.1', '198.51.100.2', '198.51.100.3']) seen.push((await app.send(XFF(ip))).status);
      expect(seen).toEqual([200, 200, 200]);
      expect(await counted(app, 'ip:198.51.100.1')).toBe(1);
      expect(await counted(app, 'ip:127.0.0.1')).toBe(0);
    });
  });
});
