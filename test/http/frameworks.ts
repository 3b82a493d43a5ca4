/**
 * Shared by the test files of test/http/ that run one scenario through every adapter:
 * Express 5, Express 4 (the `express4` alias), the Fastify plugin's own options, a
 * Fastify route's `config.rateLimit`, Hono middleware on @hono/node-server (its options'
 * functions get a view of the context with the fields the tests read, `headers`, `ip`...), and
 * Koa 3 and Koa 2 (the `koa2` alias) middleware on an @koa/router route (a Koa context is such a
 * request as it is; its response is read as `ctx.status`). Each app listens on a real socket (127.0.0.1, so
 * `byIp()` sees `ip:127.0.0.1`), its route counts the requests that got past the limiter,
 * and its error handling records what reached it; it is closed after the test that started it.
 * Not a test file itself.
 */
import http, { type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { runInThisContext } from 'node:vm';
import { type HttpBindings, serve } from '@hono/node-server';
import Router from '@koa/router';
import express5, { type NextFunction, type Request, type Response } from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
import { type Context, Hono } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import Koa3, { type Context as KoaContext } from 'koa';
import request from 'supertest';
import { type CheckOptions, createLimiter, type Decision, type Limiter, type RequestLike, type Store } from '../../src';
import type { Awaitable } from '../../src/async';
import * as expressAdapter from '../../src/express';
import * as fastifyAdapter from '../../src/fastify';
import * as honoAdapter from '../../src/hono';
import type { HttpOptions } from '../../src/http/http-options';
import * as koaAdapter from '../../src/koa';

// eslint-disable-next-line @typescript-eslint/no-require-imports
const express4 = require('express4') as typeof express5;
// eslint-disable-next-line @typescript-eslint/no-require-imports
const Koa2 = require('koa2') as typeof Koa3;

/** What the tests' option functions may read of a request, in both frameworks. */
export type TestRequest = RequestLike & { method?: string; url?: string };
/** What `requestWasSuccessful` may read of a response (Express `res`, Fastify `reply`). */
export interface TestResponse {
  statusCode: number;
}
/** The HTTP options as the tests write them, once for every framework. */
export type TestOptions = HttpOptions<TestRequest, TestResponse>;

/** The route behind the limiter. */
export interface Route {
  method?: 'GET' | 'POST';
  path?: string;
  /** Answers a request that got past the limiter (default 200 'ok'); `raw` is Node's response. */
  handle?: (request: TestRequest, raw: ServerResponse) => Awaitable<{ status?: number; body?: string } | undefined>;
}

export interface Setup {
  store: Store;
  clock: () => number;
  /** The prefix the limiter under test counts in. */
  prefix: string;
  route?: Route;
  /** Express's `trust proxy` setting / Fastify's `trustProxy` option / Koa's `app.proxy`; unset by default. */
  trustProxy?: boolean;
  /** Other builds of the adapters (e.g. loaded by `jest.isolateModules`). */
  adapters?: { express: typeof expressAdapter; fastify: typeof fastifyAdapter; hono?: typeof honoAdapter };
}

export interface App {
  readonly port: number;
  /** Sends a request to the route (its method and path unless given). */
  send(headers?: Record<string, string>, options?: { method?: 'GET' | 'POST'; path?: string }): Promise<request.Response>;
  /** How many requests the route handler ran for. */
  readonly hits: () => number;
  /** Errors that reached the framework's error handling (Express error middleware, Fastify setErrorHandler). */
  readonly errors: unknown[];
  /**
   * Peeks at the counts of the limiter under test: `middleware.limiter` (Express),
   * `app.rateLimiter` (Fastify plugin), or, for a route's own key space, a limiter over the
   * same store, prefix and clock (Fastify keeps a route's limiter to itself).
   */
  peek(identifier: string, options?: CheckOptions): Promise<Decision>;
  close(): Promise<void>;
}

export interface Framework {
  readonly name: string;
  start(options: TestOptions, setup: Setup): Promise<App>;
}

const open = new Set<App>();

/** A minute into an hour, the start of the tests' manual clocks: no window boundary is near. */
export const START = 1_800_000_000_000 - (1_800_000_000_000 % 3_600_000) + 60_000;

/** Closes every app started since the last call. */
async function closeApps(): Promise<void> {
  const apps = [...open];
  open.clear();
  await Promise.all(apps.map((app) => app.close()));
}

// Every app a test starts is closed after it, in each test file that imports this one.
afterEach(() => closeApps());

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function expressFramework(name: string, express: typeof express5): Framework {
  return {
    name,
    async start(options, setup) {
      const { route = {} } = setup;
      const adapter = setup.adapters?.express ?? expressAdapter;
      const app = express();
      if (setup.trustProxy !== undefined) app.set('trust proxy', setup.trustProxy);
      const middleware = adapter.rateLimit({
        store: setup.store,
        clock: setup.clock,
        prefix: setup.prefix,
        ...(options as expressAdapter.ExpressRateLimitOptions),
      });
      let hits = 0;
      const errors: unknown[] = [];
      const method = route.method === 'POST' ? 'post' : 'get';
      app[method](route.path ?? '/', middleware, (req: Request, res: Response, next: NextFunction) => {
        hits++;
        Promise.resolve(route.handle?.(req, res)).then((answer) => {
          if (!res.headersSent) res.status(answer?.status ?? 200).send(answer?.body ?? 'ok');
        }, next);
      });
      app.use((error: unknown, _req: Request, res: Response, _next: NextFunction) => {
        errors.push(error);
        res.status(500).send(`error: ${messageOf(error)}`);
      });
      const server = http.createServer(app);
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return serving(server, route, () => hits, errors, middleware.limiter);
    },
  };
}

function fastifyFramework(name: string, where: 'plugin' | 'route'): Framework {
  return {
    name,
    async start(options, setup) {
      const { route = {} } = setup;
      const adapter = setup.adapters?.fastify ?? fastifyAdapter;
      const app: FastifyInstance = Fastify(setup.trustProxy === undefined ? {} : { trustProxy: setup.trustProxy });
      const shared = { store: setup.store, clock: setup.clock };
      let routeLimiter: Limiter | undefined;
      if (where === 'plugin') {
        await app.register(adapter.rateLimitPlugin, {
          ...shared,
          prefix: setup.prefix,
          ...(options as fastifyAdapter.FastifyRateLimitOptions),
        });
      } else {
        // The plugin's own settings (default limit and window, another prefix) must not be what the test sees.
        await app.register(adapter.rateLimitPlugin, { ...shared, prefix: `${setup.prefix}-plugin` });
        const fixed = (key: 'limit' | 'window' | 'limits') => (typeof options[key] === 'function' ? undefined : options[key]);
        routeLimiter = createLimiter({
          ...shared,
          prefix: setup.prefix,
          algorithm: options.algorithm,
          limit: fixed('limit') as number | undefined,
          window: fixed('window') as string | number | undefined,
          limits: fixed('limits') as CheckOptions['limits'],
          denyCacheSize: 0,
        });
      }
      let hits = 0;
      const errors: unknown[] = [];
      app.setErrorHandler((error, _request, reply) => {
        errors.push(error);
        reply.code(500).send({ error: messageOf(error) });
      });
      app.route({
        method: route.method ?? 'GET',
        url: route.path ?? '/',
        config: where === 'route' ? { rateLimit: { prefix: setup.prefix, ...(options as fastifyAdapter.RouteRateLimitOptions) } } : {},
        handler: async (req, reply) => {
          hits++;
          const answer = await route.handle?.(req, reply.raw);
          reply.code(answer?.status ?? 200);
          return answer?.body ?? 'ok';
        },
      });
      await app.listen({ port: 0, host: '127.0.0.1' });
      const port = (app.server.address() as AddressInfo).port;
      const limiter = routeLimiter ?? app.rateLimiter;
      const started: App = {
        port,
        send: (headers = {}, how = {}) => send(port, how.method ?? route.method ?? 'GET', how.path ?? route.path ?? '/', headers),
        hits: () => hits,
        errors,
        peek: (identifier, checkOptions) => limiter.peek(identifier, checkOptions),
        close: () => app.close(),
      };
      open.add(started);
      return started;
    },
  };
}

/** The view of a Hono context the tests' functions read: headers as Node has them, the peer's address as `ip`. */
const views = new WeakMap<Context, TestRequest>();
function viewOf(c: Context): TestRequest {
  let view = views.get(c);
  if (view === undefined) {
    const incoming = (c.env as HttpBindings).incoming;
    view = {
      ip: incoming.socket.remoteAddress,
      headers: incoming.headers,
      socket: { remoteAddress: incoming.socket.remoteAddress },
      method: c.req.method,
      url: new URL(c.req.url).pathname,
    };
    views.set(c, view);
  }
  return view;
}

/** The tests' options with every function of a request (and response) handed the view of the context. */
function honoOptions(options: TestOptions): honoAdapter.HonoRateLimitOptions {
  const converted: Record<string, unknown> = { ...options };
  const ofRequest = (fn: unknown) => (typeof fn === 'function' ? (c: Context) => fn(viewOf(c)) : fn);
  for (const key of ['skip', 'cost', 'limit', 'window', 'limits', 'concurrency'] as const) converted[key] = ofRequest(options[key]);
  const { identify, message, requestWasSuccessful, costAfter, onDecision, onNearLimit, onError } = options;
  if (identify !== undefined) converted.identify = Array.isArray(identify) ? identify.map(ofRequest) : ofRequest(identify);
  if (typeof message === 'function') converted.message = (c: Context, decision: Decision) => message(viewOf(c), decision);
  const response = (c: Context): TestResponse => ({ statusCode: c.res.status });
  if (requestWasSuccessful) converted.requestWasSuccessful = (c: Context) => requestWasSuccessful(viewOf(c), response(c));
  if (costAfter) converted.costAfter = (c: Context, _: Context, finished: boolean) => costAfter(viewOf(c), response(c), finished);
  if (onDecision) converted.onDecision = (decision: Decision, c: Context) => onDecision(decision, viewOf(c));
  if (onNearLimit) converted.onNearLimit = (decision: Decision, c: Context) => onNearLimit(decision, viewOf(c));
  if (onError) converted.onError = (error: unknown, c: Context) => onError(error, viewOf(c));
  for (const key of Object.keys(converted)) if (converted[key] === undefined) delete converted[key];
  return converted as honoAdapter.HonoRateLimitOptions;
}

function honoFramework(name: string): Framework {
  return {
    name,
    async start(options, setup) {
      const { route = {} } = setup;
      const adapter = setup.adapters?.hono ?? honoAdapter;
      const converted = honoOptions(options);
      // Hono's own byIp by default; `trustProxy: true` trusts every hop, as Express's setting does.
      if (converted.identify === undefined && setup.trustProxy) converted.identify = adapter.byIp({ trustProxy: () => true });
      const middleware = adapter.rateLimit({ store: setup.store, clock: setup.clock, prefix: setup.prefix, ...converted });
      let hits = 0;
      const errors: unknown[] = [];
      const app = new Hono<{ Bindings: HttpBindings }>();
      app.onError((error, c) => {
        errors.push(error);
        return c.text(`error: ${messageOf(error)}`, 500);
      });
      const handler = async (c: Context<{ Bindings: HttpBindings }>) => {
        hits++;
        const answer = await route.handle?.(viewOf(c), c.env.outgoing);
        return c.text(answer?.body ?? 'ok', (answer?.status ?? 200) as ContentfulStatusCode);
      };
      if (route.method === 'POST') app.post(route.path ?? '/', middleware, handler);
      else app.get(route.path ?? '/', middleware, handler);
      const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
        const started = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(started));
      });
      return serving(server as http.Server, route, () => hits, errors, middleware.limiter);
    },
  };
}

/** The tests' options with the functions of a response handed `{ statusCode: ctx.status }`; a Koa context is a TestRequest as it is. */
function koaOptions(options: TestOptions): koaAdapter.KoaRateLimitOptions {
  const converted: Record<string, unknown> = { ...options };
  const response = (ctx: KoaContext): TestResponse => ({ statusCode: ctx.status });
  const { requestWasSuccessful, costAfter } = options;
  if (requestWasSuccessful) converted.requestWasSuccessful = (ctx: KoaContext) => requestWasSuccessful(ctx, response(ctx));
  if (costAfter) converted.costAfter = (ctx: KoaContext, _: KoaContext, finished: boolean) => costAfter(ctx, response(ctx), finished);
  return converted as koaAdapter.KoaRateLimitOptions;
}

function koaFramework(name: string, Koa: typeof Koa3): Framework {
  return {
    name,
    async start(options, setup) {
      const { route = {} } = setup;
      const middleware = koaAdapter.rateLimit({ store: setup.store, clock: setup.clock, prefix: setup.prefix, ...koaOptions(options) });
      let hits = 0;
      const errors: unknown[] = [];
      const app = new Koa();
      if (setup.trustProxy !== undefined) app.proxy = setup.trustProxy;
      app.use(async (ctx, next) => {
        try {
          await next();
        } catch (error) {
          errors.push(error);
          ctx.status = 500;
          ctx.body = `error: ${messageOf(error)}`;
        }
      });
      const router = new Router();
      const handler = async (ctx: KoaContext) => {
        hits++;
        const answer = await route.handle?.(ctx, ctx.res);
        ctx.status = answer?.status ?? 200;
        ctx.body = answer?.body ?? 'ok';
      };
      if (route.method === 'POST') router.post(route.path ?? '/', middleware, handler);
      else router.get(route.path ?? '/', middleware, handler);
      app.use(router.routes());
      const server = http.createServer(app.callback());
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      return serving(server, route, () => hits, errors, middleware.limiter);
    },
  };
}

/** The App of a Node HTTP server listening on loopback, closed with every test's apps. */
function serving(server: http.Server, route: Route, hits: () => number, errors: unknown[], limiter: Pick<Limiter, 'peek'>): App {
  const port = (server.address() as AddressInfo).port;
  const started: App = {
    port,
    send: (headers = {}, how = {}) => send(port, how.method ?? route.method ?? 'GET', how.path ?? route.path ?? '/', headers),
    hits,
    errors,
    peek: (identifier, checkOptions) => limiter.peek(identifier, checkOptions),
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
  open.add(started);
  return started;
}

function send(port: number, method: 'GET' | 'POST', path: string, headers: Record<string, string>): Promise<request.Response> {
  const agent = request(`http://127.0.0.1:${port}`);
  return (method === 'POST' ? agent.post(path) : agent.get(path)).set(headers);
}

const FRAMEWORKS: readonly Framework[] = [
  expressFramework('Express 5', express5),
  expressFramework('Express 4', express4),
  fastifyFramework('Fastify plugin options', 'plugin'),
  fastifyFramework('Fastify route config.rateLimit', 'route'),
  honoFramework('Hono on @hono/node-server'),
  koaFramework('Koa 3 with @koa/router', Koa3),
  koaFramework('Koa 2 with @koa/router', Koa2),
];

/** The frameworks as `describe.each` rows: [name, framework]. */
export const FRAMEWORK_ROWS: [string, Framework][] = FRAMEWORKS.map((framework) => [framework.name, framework]);

/** The units counted for `identifier` (a peek of cost 0: counts nothing, never denied). */
export async function counted(app: App, identifier: string, options: CheckOptions = {}): Promise<number> {
  return (await app.peek(identifier, { ...options, cost: 0 })).estimated;
}

/**
 * Waits, polling, until `read()` gives `want` (refunds happen after the response); fails
 * with the last value read after `timeoutMs`. A bounded wait, not a fixed sleep.
 */
export async function eventually<T>(read: () => T | Promise<T>, want: T, timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = await read();
  while (last !== want && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 5));
    last = await read();
  }
  expect(last).toBe(want);
}

/**
 * Collects unhandled rejections of the real process while `run` runs and a few turns of
 * the event loop after. (Jest gives each test file a copy of `process` whose listeners
 * never fire; `vm.runInThisContext` reaches the real one.)
 */
export async function unhandledRejectionsDuring(run: () => Promise<void>): Promise<unknown[]> {
  const realProcess = runInThisContext('process') as NodeJS.Process;
  const seen: unknown[] = [];
  const listener = (reason: unknown) => {
    seen.push(reason);
  };
  realProcess.on('unhandledRejection', listener);
  process.on('unhandledRejection', listener);
  try {
    await run();
    for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setTimeout(resolve, 10));
  } finally {
    realProcess.off('unhandledRejection', listener);
    process.off('unhandledRejection', listener);
  }
  return seen;
}
