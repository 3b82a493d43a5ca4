// The runtime suite's scenarios, run by test/runtimes/runtimes.test.ts under Bun (`bun
// suite.mjs`), Deno (`deno run suite.mjs`) and Node, against the built package (dist/, as
// users get it) and a redis-server the test started. JavaScript, not TypeScript: each runtime
// runs it as it is, with no compiler of ours between. Deno runs it with the permissions
// docs/runtimes.md names: --allow-net --allow-env.
//
// For each Redis client (ioredis, node-redis), the core limiter and an app of each framework
// (Express, Hono served by the runtime's own server, Koa) are checked for: the rate-limit headers
// and the client's address; a 429 with an exact Retry-After; exact counts under 200 concurrent
// checks; every check answered within timeoutMs while Redis is killed; and exact counts again
// once it is back. The test kills and restarts Redis when asked, through its control server
// (argv: the Redis URL, the control URL). What was seen is printed as one line of JSON, and the
// test holds it to what it should be: this file only observes.
import http from 'node:http';
import process from 'node:process';
import Router from '@koa/router';
import express from 'express';
import { Hono } from 'hono';
import { Redis } from 'ioredis';
import Koa from 'koa';
import { createClient } from 'redis';
import { rateLimit as expressRateLimit } from '../../dist/express.mjs';
import { byIp as honoByIp, rateLimit as honoRateLimit } from '../../dist/hono.mjs';
import { createLimiter, RedisStore } from '../../dist/index.mjs';
import { rateLimit as koaRateLimit } from '../../dist/koa.mjs';

const [redisUrl, controlUrl] = process.argv.slice(-2);
const TIMEOUT_MS = 250;
/** The start of a minute: the limit-3 scenarios' counts all fall at the start of a window. */
const NOW = 1_800_000_000_000;
const clock = () => NOW;
const runtime = typeof globalThis.Bun !== 'undefined' ? 'bun' : typeof globalThis.Deno !== 'undefined' ? 'deno' : 'node';

const troubles = { unhandledRejections: [], uncaughtExceptions: [] };
process.on('unhandledRejection', (reason) => troubles.unhandledRejections.push(String(reason?.stack ?? reason)));
process.on('uncaughtException', (error) => troubles.uncaughtExceptions.push(String(error?.stack ?? error)));

const CLIENTS = {
  ioredis: async () => {
    const client = new Redis(redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
    client.on('error', () => {});
    await new Promise((resolve, reject) => {
      client.once('ready', resolve);
      setTimeout(() => reject(new Error('ioredis: not ready in 5 s')), 5_000);
    });
    return { client, close: () => client.disconnect() };
  },
  'node-redis': async () => {
    const client = createClient({ url: redisUrl, disableOfflineQueue: true });
    client.on('error', () => {});
    await client.connect();
    return { client, close: () => client.destroy() };
  },
};

/** The options every limiter shares: the store, the fixed clock, a bounded wait. */
function limiterOptions(store, prefix) {
  return { store, clock, timeoutMs: TIMEOUT_MS, prefix };
}

/** Store failures reported to the middleware's onError, by the prefix of its limiter. */
const storeFailures = {};

/** The options of an app's middleware: a limiter's, 503 while Redis fails, and the failures counted. */
function shared(store, prefix) {
  storeFailures[prefix] = 0;
  return { ...limiterOptions(store, prefix), failMode: 'closed', onError: () => storeFailures[prefix]++ };
}

/** Listens on a free loopback port with Node's http server (Express and Koa run on it everywhere). */
async function nodeServer(handler) {
  const server = http.createServer(handler);
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: server.address().port, close: () => closeNodeServer(server) };
}

/** Closes a Node http server, its idle keep-alive connections (of this process's own fetch) included. */
function closeNodeServer(server) {
  return new Promise((resolve) => {
    server.close(resolve);
    server.closeAllConnections();
  });
}

/** Serves a fetch handler with the runtime's own server: Bun.serve, Deno.serve, or @hono/node-server on Node. */
async function fetchServer(fetch) {
  if (runtime === 'bun') {
    const server = globalThis.Bun.serve({ fetch, port: 0, hostname: '127.0.0.1' });
    return { port: server.port, close: () => server.stop(true) };
  }
  if (runtime === 'deno') {
    const server = globalThis.Deno.serve({ port: 0, hostname: '127.0.0.1', onListen() {} }, fetch);
    return { port: server.addr.port, close: () => server.shutdown() };
  }
  const { serve } = await import('@hono/node-server');
  const server = await new Promise((resolve) => {
    const started = serve({ fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(started));
  });
  return { port: server.address().port, close: () => closeNodeServer(server) };
}

/**
 * The apps: each has `/ip` (limit 3 per client IP, one proxy trusted the framework's way, the
 * answer naming the identifier) and `/load` (limit 100 per `x-id` header).
 */
const FRAMEWORKS = {
  async express(store, prefix) {
    const app = express();
    app.set('trust proxy', 1);
    app.get('/ip', expressRateLimit({ ...shared(store, `${prefix}:ip`), limit: 3, window: '1m' }), (req, res) => {
      res.json({ identifier: req.rateLimit?.identifier });
    });
    const load = expressRateLimit({
      ...shared(store, `${prefix}:load`),
      limit: 100,
      window: '1m',
      identify: (req) => `id:${req.headers['x-id']}`,
    });
    app.get('/load', load, (_req, res) => {
      res.send('ok');
    });
    return { server: await nodeServer(app), load: load.limiter };
  },
  async hono(store, prefix) {
    const app = new Hono();
    const ip = honoRateLimit({ ...shared(store, `${prefix}:ip`), limit: 3, window: '1m', identify: honoByIp({ trustProxy: 1 }) });
    app.get('/ip', ip, (c) => c.json({ identifier: c.get('rateLimit')?.identifier }));
    const load = honoRateLimit({
      ...shared(store, `${prefix}:load`),
      limit: 100,
      window: '1m',
      identify: (c) => `id:${c.req.header('x-id')}`,
    });
    app.get('/load', load, (c) => c.text('ok'));
    return { server: await fetchServer(app.fetch), load: load.limiter };
  },
  async koa(store, prefix) {
    const app = new Koa({ proxy: true, maxIpsCount: 1 });
    const router = new Router();
    router.get('/ip', koaRateLimit({ ...shared(store, `${prefix}:ip`), limit: 3, window: '1m' }), (ctx) => {
      ctx.body = { identifier: ctx.state.rateLimit?.identifier };
    });
    const load = koaRateLimit({ ...shared(store, `${prefix}:load`), limit: 100, window: '1m', identify: (ctx) => `id:${ctx.get('x-id')}` });
    router.get('/load', load, (ctx) => {
      ctx.body = 'ok';
    });
    app.use(router.routes());
    return { server: await nodeServer(app.callback()), load: load.limiter };
  },
};

async function get(port, path, headers = {}) {
  const started = performance.now();
  const response = await fetch(`http://127.0.0.1:${port}${path}`, { headers });
  const body = await response.text();
  return {
    status: response.status,
    ms: Math.round(performance.now() - started),
    body,
    limit: response.headers.get('x-ratelimit-limit'),
    remaining: response.headers.get('x-ratelimit-remaining'),
    reset: response.headers.get('x-ratelimit-reset'),
    retryAfter: response.headers.get('retry-after'),
    contentType: response.headers.get('content-type'),
  };
}

/** How many of `statuses` had each status: `{ 200: 100, 429: 100 }`. */
function tally(statuses) {
  const counts = {};
  for (const status of statuses) counts[status] = (counts[status] ?? 0) + 1;
  return counts;
}

async function control(action) {
  const response = await fetch(`${controlUrl}/${action}`, { method: 'POST' });
  if (!response.ok) throw new Error(`control ${action}: ${response.status} ${await response.text()}`);
}

/** Retries `attempt` (which answers true once the store answers again) every 100 ms, for up to 20 s; the time it took. */
async function untilRecovered(attempt) {
  const started = performance.now();
  while (performance.now() - started < 20_000) {
    if (await attempt()) return Math.round(performance.now() - started);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return null;
}

/** A check of the core limiter: its decision's fields, or its failure's code, and how long it took. */
async function coreCheck(limiter, identifier) {
  const started = performance.now();
  try {
    const decision = await limiter.check(identifier);
    return { allowed: decision.allowed, retryAfterMs: decision.retryAfterMs, ms: Math.round(performance.now() - started) };
  } catch (error) {
    return { code: error.code ?? String(error), ms: Math.round(performance.now() - started) };
  }
}

const report = {
  runtime,
  timeoutMs: TIMEOUT_MS,
  version: runtime === 'bun' ? globalThis.Bun.version : runtime === 'deno' ? globalThis.Deno.version.deno : process.versions.node,
  cells: {},
};
const setups = [];
for (const [clientName, connect] of Object.entries(CLIENTS)) {
  try {
    const { client, close } = await connect();
    const store = new RedisStore({ client });
    const core = createLimiter({ ...limiterOptions(store, `${clientName}:core`), limit: 3, window: '1m' });
    const coreLoad = createLimiter({ ...limiterOptions(store, `${clientName}:core-load`), limit: 100, window: '1m' });
    const apps = {};
    for (const [frameworkName, start] of Object.entries(FRAMEWORKS))
      apps[frameworkName] = await start(store, `${clientName}:${frameworkName}`);
    setups.push({ clientName, close, core, coreLoad, apps });
  } catch (error) {
    report.cells[clientName] = { setupError: String(error?.stack ?? error) };
  }
}

// Before the outage: headers, the client's address, a 429 with an exact Retry-After, 200 concurrent checks.
for (const { clientName, core, coreLoad, apps } of setups) {
  const cells = {};
  report.cells[clientName] = cells;
  const checks = [];
  for (let i = 0; i < 4; i++) checks.push(await coreCheck(core, 'user:1'));
  const burst = await Promise.all(Array.from({ length: 200 }, () => coreLoad.check('burst')));
  cells.core = {
    checks,
    burst: tally(burst.map((decision) => (decision.allowed ? 200 : 429))),
    counted: (await coreLoad.peek('burst', { cost: 0 })).estimated,
  };
  for (const [frameworkName, { server, load }] of Object.entries(apps)) {
    const { port } = server;
    const first = await get(port, '/ip');
    const proxied = await get(port, '/ip', { 'x-forwarded-for': '192.0.2.1, 203.0.113.9' });
    const rest = [await get(port, '/ip'), await get(port, '/ip'), await get(port, '/ip')];
    const responses = await Promise.all(Array.from({ length: 200 }, () => get(port, '/load', { 'x-id': 'burst' })));
    cells[frameworkName] = {
      first,
      proxied: proxied.body,
      statuses: rest.map((response) => response.status),
      denied: rest[2],
      burst: tally(responses.map((response) => response.status)),
      counted: (await load.peek('id:burst', { cost: 0 })).estimated,
    };
  }
}

// Redis killed, with checks in flight and after: every one answered within timeoutMs (by failMode 'closed' in the apps).
if (setups.length > 0) {
  const inFlight = setups.map(({ core, apps }) => ({
    core: Promise.all(Array.from({ length: 20 }, () => coreCheck(core, 'user:in-flight'))),
    apps: Object.values(apps).map(({ server }) =>
      Promise.all(Array.from({ length: 20 }, () => get(server.port, '/load', { 'x-id': 'in-flight' }))),
    ),
  }));
  await control('kill');
  for (const [index, { clientName, core, apps }] of setups.entries()) {
    const cells = report.cells[clientName];
    const coreInFlight = await inFlight[index].core;
    cells.core.inFlight = {
      slowestMs: Math.max(...coreInFlight.map(({ ms }) => ms)),
      outcomes: tally(coreInFlight.map((check) => check.code ?? check.allowed)),
    };
    for (const [frameworkIndex, frameworkName] of Object.keys(apps).entries()) {
      const answers = await inFlight[index].apps[frameworkIndex];
      cells[frameworkName].inFlight = {
        slowestMs: Math.max(...answers.map(({ ms }) => ms)),
        statuses: tally(answers.map(({ status }) => status)),
      };
    }
    cells.core.outage = [];
    for (let i = 0; i < 3; i++) cells.core.outage.push(await coreCheck(core, 'user:outage'));
    for (const [frameworkName, { server }] of Object.entries(apps)) {
      const answers = [];
      for (let i = 0; i < 3; i++) answers.push(await get(server.port, '/load', { 'x-id': 'outage' }));
      cells[frameworkName].outage = answers.map(({ status, ms, body }) => ({ status, ms, body }));
      cells[frameworkName].storeFailures = storeFailures[`${clientName}:${frameworkName}:load`];
    }
  }

  // Redis back: each limiter answers again once its client has reconnected (and its breaker let a probe through), and counts exactly.
  await control('restart');
  for (const { clientName, core, apps } of setups) {
    const cells = report.cells[clientName];
    cells.core.recoveredAfterMs = await untilRecovered(async () => (await coreCheck(core, 'user:probe')).allowed !== undefined);
    const after = [];
    for (let i = 0; i < 4; i++) after.push(await coreCheck(core, 'user:after'));
    cells.core.after = after.map(({ allowed, retryAfterMs }) => ({ allowed, retryAfterMs }));
    for (const [frameworkName, { server }] of Object.entries(apps)) {
      const { port } = server;
      cells[frameworkName].recoveredAfterMs = await untilRecovered(
        async () => (await get(port, '/load', { 'x-id': 'probe' })).status === 200,
      );
      const responses = await Promise.all(Array.from({ length: 200 }, () => get(port, '/load', { 'x-id': 'after' })));
      cells[frameworkName].after = tally(responses.map((response) => response.status));
    }
  }
}

for (const { close, apps } of setups) {
  for (const { server } of Object.values(apps)) await server.close();
  await close();
}
report.troubles = troubles;
console.log(`@@report ${JSON.stringify(report)}`);
// Deno and Bun keep the process up for a dangling handle of a client library: the report is out, so leave.
process.exit(0);
