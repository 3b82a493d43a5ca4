/**
 * Koa middleware (Koa 2 and 3): framework glue over the shared HTTP path. The request and the
 * response are both Koa's `Context`; `byIp()` reads `ctx.ip`, which follows the app's `proxy`,
 * `proxyIpHeader` and `maxIpsCount`.
 *
 * @example
 * import { byIp, rateLimit } from 'ratewarden/koa';
 * app.use(rateLimit({ store, limit: 100, window: '1m', identify: byIp() }));
 * router.post('/login', rateLimit({ store, limit: 5, window: '1m', prefix: 'login' }), logIn);
 */
import type { Context, Middleware, Next } from 'koa';
import type { Decision, Limiter } from './core/types';
import { HttpLimiter, type HttpPort } from './http/handler';
import { HTTP_OPTION_KEYS, type HttpOptions, SERVICE_UNAVAILABLE } from './http/http-options';
import { checkOptions, keysOf } from './validate';

/** What the middleware puts on `ctx.state`: give it to `new Koa<RateLimitState>()` to type it there. */
export interface RateLimitState {
  /**
   * The decision of the last rate limiter this request passed; undefined when it was not
   * limited, was skipped, or the store failed.
   */
  rateLimit?: Decision | undefined;
}

declare module 'koa' {
  // Koa's default state is `any`-based: this names the one key the middleware sets, typed.
  interface DefaultState extends RateLimitState {}
}

/** Options of {@link rateLimit}: the shared HTTP options, their functions taking Koa's `Context`. */
export type KoaRateLimitOptions = HttpOptions<Context, Context>;

/** The middleware, with the limiter behind it for `reset()` or `peek()`. */
export interface RateLimitMiddleware extends Middleware {
  readonly limiter: Limiter;
  /**
   * Forgets what this middleware counted for the request of `ctx` (the whole count of the
   * identifier it counted against, as `limiter.reset()` does), e.g. after a successful login.
   * Resolves at once when this middleware counted nothing for the request.
   */
  resetRequest(ctx: Context): Promise<void>;
}

const OPTIONS = keysOf<KoaRateLimitOptions>(HTTP_OPTION_KEYS);

/** Where a request keeps, while a middleware checks it, how that middleware ends without going on (a denial, a 503). */
const ANSWERED: unique symbol = Symbol('ratewarden.koa');

type ContextRecord = Context & { [ANSWERED]?: () => void };

/** Ends the middleware checking `ctx`: its answer is in `ctx`, and the next middleware does not run. */
function answered(ctx: Context): void {
  (ctx as ContextRecord)[ANSWERED]?.();
}

const koaPort: HttpPort<Context, Context> = {
  setHeader(ctx, name, value) {
    ctx.set(name, value);
  },
  attach(ctx, decision) {
    (ctx.state as RateLimitState).rateLimit = decision;
  },
  countsHolder(ctx) {
    return ctx;
  },
  deny(ctx, _response, denial) {
    ctx.status = denial.statusCode;
    ctx.body = denial.body;
    // Koa would type a string body as text/plain or text/html by its look; the default body is JSON text already.
    if (denial.contentType !== undefined) ctx.type = denial.contentType;
    answered(ctx);
  },
  unavailable(ctx) {
    ctx.status = 503;
    ctx.body = SERVICE_UNAVAILABLE;
    answered(ctx);
  },
  whenDone(ctx, done) {
    // 'close' comes after 'finish' for a response sent in full, and alone when the client went away.
    const response = ctx.res;
    response.once('close', () => done(response.writableFinished));
  },
  statusOf(ctx) {
    return ctx.status;
  },
};

/**
 * Creates rate-limiting middleware for Koa: `app.use(rateLimit(options))`, or per route with
 * @koa/router, `router.get('/x', rateLimit(options), handler)`. The decision is
 * `ctx.state.rateLimit`. Options are validated here; mistakes throw an `OptionError` naming the option.
 */
export function rateLimit(options: KoaRateLimitOptions = {}): RateLimitMiddleware {
  checkOptions(options, OPTIONS, 'rateLimit');
  const http = new HttpLimiter<Context, Context>(options, koaPort);
  const middleware = function rateLimitMiddleware(ctx: Context, next: Next): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      // Another limiter later in the chain sets its own: this one is done with it by then.
      (ctx as ContextRecord)[ANSWERED] = resolve;
      http.handle(ctx, ctx, (error) => {
        if (error !== undefined) reject(error);
        else next().then(() => resolve(), reject);
      });
    });
  } as RateLimitMiddleware;
  Object.defineProperty(middleware, 'limiter', { value: http.limiter, enumerable: true });
  Object.defineProperty(middleware, 'resetRequest', { value: (ctx: Context) => http.resetRequest(ctx), enumerable: true });
  return middleware;
}

export * from './index';
