/**
 * Express middleware (Express 4 and 5): framework glue over the shared HTTP path.
 *
 * @example
 * import { rateLimit, byIp } from 'ratewarden/express';
 * app.use(rateLimit({ store, limit: 100, window: '1m', identify: byIp() }));
 * const loginLimit = rateLimit({ store, limit: 5, window: '1m', prefix: 'login' });
 * app.post('/login', loginLimit, async (req, res) => {
 *   if (await logIn(req)) await loginLimit.resetRequest(req);
 * });
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { Decision, Limiter } from './core/types';
import { OptionError } from './errors';
import { HttpLimiter, type HttpPort } from './http/handler';
import { HTTP_OPTION_KEYS, type HttpOptions, SERVICE_UNAVAILABLE } from './http/http-options';
import { checkOptions, keysOf } from './validate';

/** Options of {@link rateLimit}: the shared HTTP options, plus `handler`. */
export interface ExpressRateLimitOptions extends HttpOptions<Request, Response> {
  /**
   * Answers a denied request yourself instead of the default 429. Headers and
   * `Retry-After` are already set when it is called.
   */
  handler?: ((request: Request, response: Response, next: NextFunction, decision: Decision) => void | Promise<void>) | undefined;
}

declare global {
  namespace Express {
    interface Request {
      /**
       * The decision of the last rate limiter this request passed. Named as in express-rate-limit,
       * but a `Decision`: `identifier` for its `key`, `resetAt` (epoch ms) for its `resetTime`, and
       * `limit - remaining` for its `used` (docs/migrating.md).
       */
      rateLimit?: Decision | undefined;
    }
  }
}

/** The middleware, with the limiter behind it for `reset()` or `peek()`. */
export interface RateLimitMiddleware extends RequestHandler {
  readonly limiter: Limiter;
  /**
   * Forgets what this middleware counted for `request` (the whole count of the identifier it
   * counted against, as `limiter.reset()` does), e.g. after a successful login. Resolves at once
   * when this middleware counted nothing for the request. What counted it is kept on `res.locals`:
   * an app that replaces `res.locals` leaves nothing to reset.
   */
  resetRequest(request: Request): Promise<void>;
}

const OPTIONS = keysOf<ExpressRateLimitOptions>({ ...HTTP_OPTION_KEYS, handler: true });

function expressPort(handler: ExpressRateLimitOptions['handler']): HttpPort<Request, Response> {
  return {
    setHeader(response, name, value) {
      response.setHeader(name, value);
    },
    attach(request, decision) {
      request.rateLimit = decision;
    },
    countsHolder(request) {
      // Not the request: after Express gives it its app's prototype, V8 gives each property added to
      // it a hidden class of its own (a new map and a copy of all its descriptors, in old space until
      // a full collection). res.locals, which Express makes for every request, is a dictionary
      // object: adding to it allocates nothing of the kind (bench/NOTES.md).
      return request.res?.locals ?? request;
    },
    deny(request, response, denial, next) {
      if (handler !== undefined) {
        // `next` is the middleware's own NextFunction, handed through the shared path.
        const answered: unknown = handler(request, response, next as NextFunction, denial.decision);
        // An async handler's rejection goes to Express's error handling, not to the void.
        if (answered instanceof Promise) answered.catch(next);
        return;
      }
      response.status(denial.statusCode);
      if (denial.contentType !== undefined) {
        // Written as is, past Express's send: a 429 needs no ETag and no freshness check, and they
        // cost a flood more than all of this package's own work per denial (bench/NOTES.md).
        response.setHeader('Content-Type', denial.contentType);
        response.end(denial.body);
      } else response.json(denial.body);
    },
    unavailable(response) {
      response.status(503).json(SERVICE_UNAVAILABLE);
    },
    whenDone(response, done) {
      // 'close' comes after 'finish' for a response sent in full, and alone when the client went away.
      response.once('close', () => done(response.writableFinished));
    },
    statusOf(response) {
      return response.statusCode;
    },
  };
}

/** Creates rate-limiting middleware for Express. Options are validated here; mistakes throw an `OptionError` naming the option. */
export function rateLimit(options: ExpressRateLimitOptions = {}): RateLimitMiddleware {
  checkOptions(options, OPTIONS, 'rateLimit');
  const handler = options.handler;
  if (handler !== undefined && typeof handler !== 'function') throw new OptionError('SWL_INVALID_FUNCTION', 'handler: must be a function');
  const http = new HttpLimiter<Request, Response>(options, expressPort(handler));
  const middleware = function rateLimitMiddleware(request: Request, response: Response, next: NextFunction): void {
    http.handle(request, response, next);
  } as RateLimitMiddleware;
  Object.defineProperty(middleware, 'limiter', { value: http.limiter, enumerable: true });
  Object.defineProperty(middleware, 'resetRequest', { value: (request: Request) => http.resetRequest(request), enumerable: true });
  return middleware;
}

export * from './index';
