/**
 * Fastify plugin (Fastify 5), built with fastify-plugin so it applies to the routes of
 * the context it is registered in and of its children.
 *
 * @example
 * import { rateLimitPlugin, byIp } from 'sliding-window-limiter/fastify';
 * await app.register(rateLimitPlugin, { store, limit: 100, window: '1m', identify: byIp() });
 * app.get('/search', { config: { rateLimit: { limit: 10, window: '1s' } } }, search);
 * app.get('/health', { config: { rateLimit: false } }, health);
 */
import type {
  FastifyInstance,
  FastifyPluginCallback,
  FastifyReply,
  FastifyRequest,
  HookHandlerDoneFunction,
  onRequestHookHandler,
  RouteOptions,
} from 'fastify';
import fp from 'fastify-plugin';
import {
  COUNTING_OPTIONS,
  createHttpLimiter,
  HTTP_OPTIONS,
  HttpLimiter,
  type HttpOptions,
  type Outcome,
  SERVICE_UNAVAILABLE,
} from './http';
import type { Decision, Limiter } from './limiter';
import { describe, oneOf, rejectUnknownKeys } from './options';

/** The route hook the check runs in. */
export type RateLimitHook = 'onRequest' | 'preValidation' | 'preHandler';

/** Per-route settings in `config.rateLimit`: any shared HTTP option, or `hook`, overriding the plugin's. */
export interface RouteRateLimitOptions extends HttpOptions<FastifyRequest> {
  /**
   * The hook the check runs in. `'onRequest'` (default) is the earliest and cheapest: a
   * denied request is answered before its body is read. `'preValidation'` or
   * `'preHandler'` run after body parsing, for a `cost` or `identify` that reads `request.body`.
   */
  hook?: RateLimitHook;
}

/** Options of {@link rateLimitPlugin}: the shared HTTP options, plus `global`. */
export interface FastifyRateLimitOptions extends RouteRateLimitOptions {
  /**
   * `true` (default): every route is limited unless its `config.rateLimit` is `false`.
   * `false`: only routes with a `config.rateLimit` object are limited.
   */
  global?: boolean;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Rate limiting of this route: `false` to exempt it, or options overriding the
     * plugin's. A route that changes how counting is done (limit, window, limits,
     * algorithm, store, prefix...) counts in its own key space, `<prefix>:<METHOD>:<url>`
     * unless it names its own prefix. HEAD counts as GET.
     */
    rateLimit?: RouteRateLimitOptions | false;
  }
  interface FastifyRequest {
    /** The rate-limit decision for this request (`null` when it was not limited, skipped or the store failed). */
    rateLimit: Decision | null;
  }
  interface FastifyInstance {
    /** The limiter of the plugin's own (non-route) settings, for `reset()` and `peek()`. */
    rateLimiter: Limiter;
  }
}

const ROUTE_OPTIONS: ReadonlySet<string> = new Set([...HTTP_OPTIONS, 'hook']);
const PLUGIN_OPTIONS: ReadonlySet<string> = new Set([...ROUTE_OPTIONS, 'global']);
const HOOKS: readonly RateLimitHook[] = ['onRequest', 'preValidation', 'preHandler'];

function setHeader(reply: FastifyReply, name: string, value: string): void {
  reply.header(name, value);
}

function rateLimitHook(http: HttpLimiter<FastifyRequest>): onRequestHookHandler {
  function respond(outcome: Outcome, reply: FastifyReply, done: HookHandlerDoneFunction): void {
    switch (outcome.kind) {
      case 'skip':
      case 'fail-open':
        done();
        return;
      case 'allow':
        reply.request.rateLimit = outcome.decision;
        http.setHeaders(outcome, reply, setHeader);
        done();
        return;
      case 'deny': {
        reply.request.rateLimit = outcome.decision;
        http.setHeaders(outcome, reply, setHeader);
        const { statusCode, body } = outcome.denial;
        reply.code(statusCode);
        if (typeof body === 'string') reply.type('text/plain; charset=utf-8');
        reply.send(body);
        return;
      }
      case 'fail-closed':
        reply.code(503).send(SERVICE_UNAVAILABLE);
        return;
    }
  }

  return function rateLimitHook(request, reply, done) {
    let outcome: Outcome | Promise<Outcome>;
    try {
      outcome = http.evaluate(request);
    } catch (error) {
      return done(error as Error);
    }
    if (outcome instanceof Promise) {
      outcome.then((settled) => respond(settled, reply, done)).catch(done);
    } else {
      respond(outcome, reply, done);
    }
  };
}

/** The plugin's options with a route's overrides applied; tier options replace each other as a group. */
function routeOptions(
  base: RouteRateLimitOptions,
  route: RouteRateLimitOptions,
  routeKey: string,
  baseLimiter: Limiter,
): RouteRateLimitOptions {
  // The plugin's store object itself, so routes share its counts (and a default MemoryStore).
  const merged: Record<string, unknown> = { ...base, store: baseLimiter.store };
  if (route.limits !== undefined) {
    delete merged.limit;
    delete merged.window;
  } else if (route.limit !== undefined || route.window !== undefined) {
    delete merged.limits;
  }
  Object.assign(merged, route);
  const ownKeySpace = COUNTING_OPTIONS.some((key) => (route as Record<string, unknown>)[key] !== undefined);
  if (ownKeySpace && route.prefix === undefined) {
    merged.prefix = `${base.prefix ?? 'rl'}:${routeKey.replace(/[{}\s]/g, '_')}`;
  }
  return merged as RouteRateLimitOptions;
}

function register(fastify: FastifyInstance, options: FastifyRateLimitOptions): void {
  const { global = true, ...shared } = options;
  if (typeof global !== 'boolean') throw new TypeError(`global: must be true or false, got ${describe(global)}`);
  const base = createHttpLimiter<FastifyRequest>(shared, PLUGIN_OPTIONS, 'rateLimitPlugin');
  oneOf(shared.hook ?? 'onRequest', HOOKS, 'hook');
  fastify.decorate('rateLimiter', base.limiter);
  if (!fastify.hasRequestDecorator('rateLimit')) fastify.decorateRequest('rateLimit', null);

  fastify.addHook('onRoute', (route: RouteOptions) => {
    const config = route.config?.rateLimit;
    if (config === false || (config === undefined && !global)) return;
    let http = base;
    if (config !== undefined) {
      if (config === null || typeof config !== 'object') {
        throw new TypeError(
          `config.rateLimit of ${route.method} ${route.url}: must be an options object or false, got ${describe(config)}`,
        );
      }
      rejectUnknownKeys(config, ROUTE_OPTIONS, `config.rateLimit of ${route.method} ${route.url}`);
      // HEAD runs the GET handler (Fastify adds a HEAD route for every GET route): it counts
      // with GET, or HEAD requests would get a second quota of a route's own limit.
      const method = Array.isArray(route.method) ? route.method.join(',') : route.method === 'HEAD' ? 'GET' : route.method;
      http = new HttpLimiter<FastifyRequest>(routeOptions(shared, config, `${method}:${route.url}`, base.limiter));
    }
    const hookName = oneOf(config?.hook ?? shared.hook ?? 'onRequest', HOOKS, 'hook');
    const hook = rateLimitHook(http);
    const existing = route[hookName] as onRequestHookHandler | onRequestHookHandler[] | undefined;
    (route as Record<RateLimitHook, unknown>)[hookName] =
      existing === undefined ? [hook] : Array.isArray(existing) ? [...existing, hook] : [existing, hook];
  });
}

const plugin: FastifyPluginCallback<FastifyRateLimitOptions> = (fastify, options, done) => {
  try {
    register(fastify, options);
  } catch (error) {
    // Invalid options must fail the registration. avvio does not catch a callback plugin's
    // synchronous throw: it escapes as an uncaught exception and ready() never settles.
    done(error as Error);
    return;
  }
  done();
};

/** The rate-limit plugin for Fastify 5. Register it before the routes it should limit. */
export const rateLimitPlugin = fp(plugin, { fastify: '5.x', name: 'sliding-window-limiter' });

export type { HeaderFormat, HeaderStyle, HeadersOption, ResetFormat } from './headers';
export type { ByApiKeyOptions, ByIpOptions, Identify, IdentifyOption } from './identify';
export { ANONYMOUS, byApiKey, byIp, byUser } from './identify';
export type { Decision, Limiter } from './limiter';
export { MemoryStore } from './stores/memory';
export { RedisStore, StoreUnavailableError } from './stores/redis';
