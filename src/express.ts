/**
 * Express middleware (Express 4 and 5).
 *
 * @example
 * import { rateLimit, byIp } from 'sliding-window-limiter/express';
 * app.use(rateLimit({ store, limit: 100, window: '1m', identify: byIp() }));
 * app.post('/login', rateLimit({ store, limit: 5, window: '1m', prefix: 'login' }), login);
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { createHttpLimiter, HTTP_OPTIONS, type HttpOptions, type Outcome, SERVICE_UNAVAILABLE } from './http';
import type { Decision, Limiter } from './limiter';

/** Options of {@link rateLimit}: the shared HTTP options, plus `handler`. */
export interface ExpressRateLimitOptions extends HttpOptions<Request> {
  /**
   * Answers a denied request yourself instead of the default 429. Headers and
   * `Retry-After` are already set when it is called.
   */
  handler?: (request: Request, response: Response, next: NextFunction, decision: Decision) => void | Promise<void>;
}

declare global {
  namespace Express {
    interface Request {
      /** The decision of the last rate limiter this request passed, as in express-rate-limit's `req.rateLimit`. */
      rateLimit?: Decision;
    }
  }
}

/** The middleware, with the limiter behind it for `reset()` or `peek()`. */
export interface RateLimitMiddleware extends RequestHandler {
  readonly limiter: Limiter;
}

const OPTIONS: ReadonlySet<string> = new Set([...HTTP_OPTIONS, 'handler']);

function setHeader(response: Response, name: string, value: string): void {
  response.setHeader(name, value);
}

/** Creates rate-limiting middleware for Express. Options are validated here; mistakes throw a `TypeError` naming the option. */
export function rateLimit(options: ExpressRateLimitOptions = {}): RateLimitMiddleware {
  const http = createHttpLimiter<Request>(options, OPTIONS, 'rateLimit');
  const handler = options.handler;
  if (handler !== undefined && typeof handler !== 'function') throw new TypeError('handler: must be a function');

  function respond(outcome: Outcome, request: Request, response: Response, next: NextFunction): void {
    switch (outcome.kind) {
      case 'skip':
      case 'fail-open':
        next();
        return;
      case 'allow':
        request.rateLimit = outcome.decision;
        http.setHeaders(outcome, response, setHeader);
        next();
        return;
      case 'deny': {
        request.rateLimit = outcome.decision;
        http.setHeaders(outcome, response, setHeader);
        if (handler !== undefined) {
          const answered: unknown = handler(request, response, next, outcome.decision);
          // An async handler's rejection goes to Express's error handling, not to the void.
          if (answered instanceof Promise) answered.catch(next);
          return;
        }
        const { statusCode, body } = outcome.denial;
        response.status(statusCode);
        if (typeof body === 'string') response.type('text').send(body);
        else response.json(body);
        return;
      }
      case 'fail-closed':
        response.status(503).json(SERVICE_UNAVAILABLE);
        return;
    }
  }

  const middleware = function rateLimitMiddleware(request: Request, response: Response, next: NextFunction): void {
    let outcome: Outcome | Promise<Outcome>;
    try {
      outcome = http.evaluate(request);
    } catch (error) {
      next(error);
      return;
    }
    if (outcome instanceof Promise) {
      outcome.then((settled) => respond(settled, request, response, next)).catch(next);
    } else {
      respond(outcome, request, response, next);
    }
  } as RateLimitMiddleware;
  Object.defineProperty(middleware, 'limiter', { value: http.limiter, enumerable: true });
  return middleware;
}

export type { HeaderFormat, HeaderStyle, HeadersOption, ResetFormat } from './headers';
export type { ByApiKeyOptions, ByIpOptions, Identify, IdentifyOption } from './identify';
export { ANONYMOUS, byApiKey, byIp, byUser } from './identify';
export type { Decision, Limiter } from './limiter';
export { MemoryStore } from './stores/memory';
export { RedisStore, StoreUnavailableError } from './stores/redis';
