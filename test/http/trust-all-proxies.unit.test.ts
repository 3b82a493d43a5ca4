/**
 * The `SWL_TRUST_ALL_PROXIES` warning of `byIp()`, on real Express and Fastify servers: a setting
 * that trusts every hop (Express `trust proxy: true`, Fastify `trustProxy: true`) lets any client
 * choose its IP with `X-Forwarded-For`, and with it a fresh quota per request. Warned once per
 * limiter, naming the fix; a hop count, `warnOnForwarded: false` and no proxy setting do not warn.
 */
import type { AddressInfo } from 'node:net';

import express from 'express';
import Fastify from 'fastify';
import * as expressAdapter from '../../src/express';
import * as fastifyAdapter from '../../src/fastify';

let emitWarning: jest.SpyInstance;
beforeEach(() => {
  emitWarning = jest.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
});
afterEach(() => emitWarning.mockRestore());

function trustAllWarnings(): string[] {
  return emitWarning.mock.calls
    .filter(([, options]) => (options as { code?: string } | undefined)?.code === 'SWL_TRUST_ALL_PROXIES')
    .map(([message]) => String(message));
}

interface Server {
  get(forwardedFor?: string): Promise<number>;
  close(): Promise<void>;
}

async function expressServer(trustProxy: boolean | number, quiet = false): Promise<Server> {
  const adapter = expressAdapter;
  const options = quiet ? { identify: adapter.byIp({ warnOnForwarded: false }) } : {};
  const app = express();
  app.set('trust proxy', trustProxy);
  app.use(adapter.rateLimit({ limit: 1, window: '1m', ...options }));
  app.get('/', (_request, response) => {
    response.send('ok');
  });
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    get: (forwardedFor) =>
      fetch(`http://127.0.0.1:${port}/`, { headers: forwardedFor ? { 'x-forwarded-for': forwardedFor } : {} }).then((r) => r.status),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function fastifyServer(trustProxy: boolean | string): Promise<Server> {
  const adapter = fastifyAdapter;
  const app = Fastify({ trustProxy });
  await app.register(adapter.rateLimitPlugin, { limit: 1, window: '1m' });
  app.get('/', async () => 'ok');
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as AddressInfo;
  return {
    get: (forwardedFor) =>
      fetch(`http://127.0.0.1:${port}/`, { headers: forwardedFor ? { 'x-forwarded-for': forwardedFor } : {} }).then((r) => r.status),
    close: () => app.close(),
  };
}

test("Express 'trust proxy: true' warns on the first request, once, naming the fix; each spoofed IP gets a fresh quota", async () => {
  const server = await expressServer(true);
  try {
    expect(await server.get()).toBe(200);
    // Why it matters: a client choosing a new X-Forwarded-For per request is never limited.
    expect(await server.get('203.0.113.1')).toBe(200);
    expect(await server.get('203.0.113.2')).toBe(200);
    expect(await server.get('203.0.113.2')).toBe(429);
    const warnings = trustAllWarnings();
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/number of proxies in front of the app \(such as 1\) or to their addresses/);
  } finally {
    await server.close();
  }
});

test("Fastify 'trustProxy: true' warns once, at the first request whose ip is the leftmost of several X-Forwarded-For entries", async () => {
  const server = await fastifyServer(true);
  try {
    expect(await server.get('198.51.100.7')).toBe(200);
    expect(trustAllWarnings()).toEqual([]);
    expect(await server.get('203.0.113.9, 198.51.100.7')).toBe(200);
    expect(await server.get('203.0.113.10, 198.51.100.7')).toBe(200);
    expect(trustAllWarnings()).toHaveLength(1);
    expect(trustAllWarnings()[0]).toMatch(/leftmost X-Forwarded-For entry/);
  } finally {
    await server.close();
  }
});

test.each([
  ['Express, a hop count', () => expressServer(1)],
  ['Fastify, the proxy address', () => fastifyServer('127.0.0.1')],
  ['Express, trust proxy true with warnOnForwarded: false', () => expressServer(true, true)],
])('%s: no warning, and a spoofed leftmost entry changes nothing', async (_name, start) => {
  const server = await start();
  try {
    expect(await server.get('203.0.113.1, 198.51.100.7')).toBe(200);
    expect(await server.get('203.0.113.2, 198.51.100.7')).toBe(_name.includes('warnOnForwarded') ? 200 : 429);
    expect(trustAllWarnings()).toEqual([]);
  } finally {
    await server.close();
  }
});
