/**
 * Fastify plugin (Fastify 5): framework glue over the shared HTTP path. Built with
 * fastify-plugin so it applies to the routes of the context it is registered in and of
 * its children.
 *
 * @example
 * import { rateLimitPlugin, byIp } from 'ratewarden/fastify';
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
import { DEFAULT_PREFIX } from './core/limiter-options';
import type { Decision, Limiter } from './core/types';
import { OptionError, warn } from './errors';
import { COUNTED, HttpLimiter, type HttpPort, resetEveryCount } from './http/handler';
import { HTTP_OPTION_KEYS, type HttpOptions, SERVICE_UNAVAILABLE } from './http/http-options';
import { checkOptions, describeValue, type KnownKeys, keysOf, oneOf } from './validate';

/** The route hook the check runs in. */
export type RateLimitHook = 'onRequest' | 'preValidation' | 'preHandler';

/** Per-route settings in `config.rateLimit`: any shared HTTP option, or `hook`, overriding the plugin's. */
export interface RouteRateLimitOptions extends HttpOptions<FastifyRequest, FastifyReply> {
  /**
   * The hook the check runs in. `'onRequest'` (default) is the earliest and cheapest: a
   * denied request is answered before its body is read. `'preValidation'` or
   * `'preHandler'` run after body parsing, for a `cost` or `identify` that reads `request.body`.
   */
  hook?: RateLimitHook | undefined;
}

/** Options of `app.rateLimitHook()`: a route's options but `hook`, since the caller places the hook. */
export type HookRateLimitOptions = Omit<RouteRateLimitOptions, 'hook'>;

/** Options of {@link rateLimitPlugin}: the shared HTTP options, plus `global`. */
export interface FastifyRateLimitOptions extends RouteRateLimitOptions {
  /**
   * `true` (default): every route is limited unless its `config.rateLimit` is `false`.
   * `false`: only routes with a `config.rateLimit` object are limited.
   */
  global?: boolean | undefined;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * Rate limiting of this route: `false` to exempt it, or options overriding the
     * plugin's. A route that changes how counting is done (limit, window, limits,
     * algorithm, store, prefix...) counts in its own key space, `<prefix>:<METHOD>:<url>`
     * unless it names its own prefix. HEAD counts as GET.
     */
    rateLimit?: RouteRateLimitOptions | false | undefined;
  }
  interface FastifyRequest {
    /** The rate-limit decision for this request (`null` when it was not limited, skipped or the store failed). */
    rateLimit: Decision | null;
    /**
     * Forgets what the rate limiters of this route counted for this request (the whole count of
     * the identifier each counted against, as `limiter.reset()` does), e.g. after a successful
     * login. Resolves at once when nothing was counted.
     */
    resetRateLimit(): Promise<void>;
  }
  interface FastifyInstance {
    /** The limiter of the plugin's own (non-route) settings, for `reset()` and `peek()`. */
    rateLimiter: Limiter;
    /**
     * A hook that limits whatever it is added to, with the plugin's settings and `options` over
     * them: for handlers no route reaches, such as the not-found handler,
     * `app.setNotFoundHandler({ preHandler: app.rateLimitHook() }, handler)`, or for
     * `app.addHook('onRequest', app.rateLimitHook({ ... }))` in a context of your own. Without
     * counting options it shares the plugin's counts; one that changes limit, window, limits,
     * algorithm, store or concurrency names its own `prefix`.
     */
    rateLimitHook(options?: HookRateLimitOptions): onRequestHookHandler;
  }
}

const ROUTE_OPTION_KEYS: KnownKeys<RouteRateLimitOptions> = { ...HTTP_OPTION_KEYS, hook: true };
const ROUTE_OPTIONS = keysOf<RouteRateLimitOptions>(ROUTE_OPTION_KEYS);
const PLUGIN_OPTIONS = keysOf<FastifyRateLimitOptions>({ ...ROUTE_OPTION_KEYS, global: true });
const HOOK_FACTORY_OPTIONS = keysOf<HookRateLimitOptions>(HTTP_OPTION_KEYS);
const HOOKS: readonly RateLimitHook[] = ['onRequest', 'preValidation', 'preHandler'];
const DEFAULT_HOOK: RateLimitHook = 'onRequest';

/**
 * Options that decide what is counted where: a route overriding any of them gets its own
 * key space. (`timeoutMs`, `denyCacheSize` and `clock` change how a check is run, not
 * what it counts, so a route may change them and keep sharing the plugin's counts.)
 */
const COUNTING_OPTIONS: readonly (keyof RouteRateLimitOptions)[] = [
  'store',
  'limit',
  'window',
  'limits',
  'algorithm',
  'prefix',
  'concurrency',
];

const fastifyPort: HttpPort<FastifyRequest, FastifyReply> = {
  setHeader(reply, name, value) {
    reply.header(name, value);
  },
  attach(request, decision) {
    request.rateLimit = decision;
  },
  countsHolder(request) {
    return request;
  },
  deny(_request, reply, denial) {
    reply.code(denial.statusCode);
    if (denial.contentType !== undefined) reply.type(denial.contentType);
    reply.send(denial.body);
  },
  unavailable(reply) {
    reply.code(503).send(SERVICE_UNAVAILABLE);
  },
  whenDone(reply, done) {
    // The raw response rather than the onResponse hook: onResponse never runs for a client that
    // went away before the response was sent, and such a request counts as failed.
    reply.raw.once('close', () => done(reply.raw.writableFinished));
  },
  statusOf(reply) {
    return reply.statusCode;
  },
};

/** The name of the plugin's route hooks, as `printRoutes({ includeHooks: true })` shows them. */
const HOOK_NAME = 'rateLimitHook';

function rateLimitHook(http: HttpLimiter<FastifyRequest, FastifyReply>): onRequestHookHandler {
  return function rateLimitHook(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) {
    http.handle(request, reply, done);
  };
}

/**
 * The app's routes that lack this plugin's hook, from `printRoutes` (Fastify's only way to list
 * routes): each entry is a line ending in its methods, `/a (GET)` or `multi (GET, POST)` (routes
 * with the same hooks are grouped), followed by its hook lines, `• (onRequest) ["rateLimitHook()"]`.
 * `methods` counts the routes (one per method) of those entries.
 */
function routesWithoutHook(fastify: FastifyInstance): { entries: string[]; methods: number } {
  const missing = { entries: [] as string[], methods: 0 };
  let entry: string | undefined;
  let hooked = false;
  const close = (): void => {
    if (entry === undefined || hooked) return;
    missing.entries.push(entry);
    missing.methods += entry.slice(entry.lastIndexOf('(')).split(',').length;
  };
  for (const line of fastify.printRoutes({ commonPrefix: false, includeHooks: true }).split('\n')) {
    const text = line.replace(/^[\s│├└─]+/, '');
    if (text.startsWith('•')) {
      if (/^• \((?:onRequest|preValidation|preHandler)\)/.test(text) && text.includes(`"${HOOK_NAME}()"`)) hooked = true;
    } else if (/\((?:[A-Z]+(?:, )?)+\)$/.test(text)) {
      close();
      entry = text;
      hooked = false;
    }
  }
  close();
  return missing;
}

/**
 * A global plugin registered on the root instance must see every route. Routes registered before
 * it loaded (`register` not awaited before them, or called after them) never got its hook: warn
 * (`SWL_ROUTES_NOT_LIMITED`) once the app is ready. `exempt` counts the routes the plugin saw and
 * left alone (`config.rateLimit: false`), one per method.
 */
function warnOnUnlimitedRoutes(fastify: FastifyInstance, exempt: () => number): void {
  // Children of the root are created with the parent as prototype: only the root has none of its own.
  if (Object.getPrototypeOf(fastify) !== Object.prototype) return;
  // A bundler that renames functions would hide the hook's name: then nothing can be told.
  if (rateLimitHook.name !== HOOK_NAME) return;
  fastify.addHook('onReady', (done) => {
    try {
      const missing = routesWithoutHook(fastify);
      const unlimited = missing.methods - exempt();
      if (unlimited > 0) {
        const { entries } = missing;
        warn(
          'SWL_ROUTES_NOT_LIMITED',
          `rateLimitPlugin is global, but ${unlimited} route(s) were registered before it loaded and are not limited (${entries.slice(0, 5).join('; ')}${entries.length > 5 ? '; ...' : ''}). Register it first and await it: await app.register(rateLimitPlugin, options), then declare the routes (use config: { rateLimit: false } on routes meant to be unlimited).`,
        );
      }
    } catch {
      // printRoutes is only read to warn: a format it does not know must not fail startup.
    }
    done();
  });
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
  const ownKeySpace = COUNTING_OPTIONS.some((key) => route[key] !== undefined);
  if (ownKeySpace && route.prefix === undefined) {
    merged.prefix = `${base.prefix ?? DEFAULT_PREFIX}:${routeKey.replace(/[{}\s]/g, '_')}`;
  }
  return merged as RouteRateLimitOptions;
}

/** The limiter of a hook made by `app.rateLimitHook(overrides)`. */
function hookLimiter(
  shared: RouteRateLimitOptions,
  overrides: HookRateLimitOptions,
  base: HttpLimiter<FastifyRequest, FastifyReply>,
): HttpLimiter<FastifyRequest, FastifyReply> {
  checkOptions(overrides, HOOK_FACTORY_OPTIONS, 'rateLimitHook()');
  if (Object.keys(overrides).length === 0) return base;
  // A hook has no route to name its key space after: one that counts otherwise names its own.
  const counting = COUNTING_OPTIONS.filter((key) => key !== 'prefix' && (overrides as RouteRateLimitOptions)[key] !== undefined);
  if (counting.length > 0 && overrides.prefix === undefined) {
    throw new OptionError(
      'SWL_CONFLICTING_OPTIONS',
      `rateLimitHook(): a hook with its own ${counting.join(', ')} counts apart from the plugin: give it a prefix of its own`,
    );
  }
  return new HttpLimiter(routeOptions(shared, overrides, '', base.limiter), fastifyPort);
}

function register(fastify: FastifyInstance, options: FastifyRateLimitOptions): void {
  checkOptions(options, PLUGIN_OPTIONS, 'rateLimitPlugin');
  const { global = true, ...shared } = options;
  if (typeof global !== 'boolean')
    throw new OptionError('SWL_INVALID_CHOICE', `global: must be true or false, got ${describeValue(global)}`);
  const base = new HttpLimiter(shared, fastifyPort);
  const pluginHook = oneOf(shared.hook ?? DEFAULT_HOOK, HOOKS, 'hook');
  // Registered more than once (an enforcing limiter beside a shadow one), the first keeps the name.
  if (!fastify.hasDecorator('rateLimiter')) fastify.decorate('rateLimiter', base.limiter);
  if (!fastify.hasDecorator('rateLimitHook')) {
    fastify.decorate('rateLimitHook', function rateLimitHookOf(overrides: HookRateLimitOptions = {}) {
      return rateLimitHook(hookLimiter(shared, overrides, base));
    });
  }
  if (!fastify.hasRequestDecorator('rateLimit')) fastify.decorateRequest('rateLimit', null);
  if (!fastify.hasRequestDecorator(COUNTED)) fastify.decorateRequest(COUNTED, undefined);
  if (!fastify.hasRequestDecorator('resetRateLimit')) {
    fastify.decorateRequest('resetRateLimit', function resetRateLimit(this: FastifyRequest) {
      return resetEveryCount(fastifyPort.countsHolder(this));
    });
  }
  let exempt = 0;
  if (global) warnOnUnlimitedRoutes(fastify, () => exempt);

  fastify.addHook('onRoute', (route: RouteOptions) => {
    const config = route.config?.rateLimit;
    if (config === false) exempt += Array.isArray(route.method) ? route.method.length : 1;
    if (config === false || (config === undefined && !global)) return;
    let http = base;
    let hookName = pluginHook;
    if (config !== undefined) {
      const where = `config.rateLimit of ${route.method} ${route.url}`;
      if (config === null || typeof config !== 'object') {
        throw new OptionError('SWL_INVALID_OPTIONS', `${where}: must be an options object or false, got ${describeValue(config)}`);
      }
      checkOptions(config, ROUTE_OPTIONS, where);
      // HEAD runs the GET handler (Fastify adds a HEAD route for every GET route): it counts
      // with GET, or HEAD requests would get a second quota of a route's own limit.
      const method = Array.isArray(route.method) ? route.method.join(',') : route.method === 'HEAD' ? 'GET' : route.method;
      http = new HttpLimiter(routeOptions(shared, config, `${method}:${route.url}`, base.limiter), fastifyPort);
      hookName = oneOf(config.hook ?? pluginHook, HOOKS, 'hook');
    }
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
export const rateLimitPlugin = fp(plugin, { fastify: '5.x', name: 'ratewarden' });

export * from './index';
