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
import { IncomingMessage } from 'node:http';
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

/*
 * `req.rateLimit` without a property added to the request. Express gives each request its app's
 * prototype, and after that V8 gives every property added to the request a hidden class of its
 * own, made in old space: a few microseconds and a survivor of the next scavenge per request
 * (bench/NOTES.md). So the decisions live in a WeakMap, read and written through a `rateLimit`
 * accessor on the prototype that every request of an Express copy inherits from, under its
 * app's or sub-app's own: the `request` object of the Express module.
 */
const decisions = new WeakMap<object, Decision | undefined>();
/** Marks the prototype that holds this module's accessor (a symbol of this copy of the package, not `Symbol.for`: another copy keeps another WeakMap). */
const KEEPS_DECISIONS: unique symbol = Symbol('ratewarden.keepsDecisions');

/** Keeps `decision` as `request.rateLimit`. */
function keepDecision(request: Request, decision: Decision): void {
  const prototype = Object.getPrototypeOf(request) as { [KEEPS_DECISIONS]?: true } | null;
  // An own property (set before the accessor existed) hides the accessor; so does any request Express did not make.
  if ((prototype?.[KEEPS_DECISIONS] === true || defineRateLimitAccessor(prototype)) && !Object.hasOwn(request, 'rateLimit')) {
    decisions.set(request, decision);
  } else request.rateLimit = decision;
}

/**
 * Defines the `rateLimit` accessor on the object of `prototype`'s chain that inherits from Node's
 * `IncomingMessage.prototype` directly (Express's own request prototype); false when there is no
 * such object or it already has a `rateLimit` of someone else's (another copy of this package,
 * whose accessor then takes the plain assignment).
 */
function defineRateLimitAccessor(prototype: object | null): boolean {
  let shared = prototype;
  while (shared !== null && Object.getPrototypeOf(shared) !== IncomingMessage.prototype)
    shared = Object.getPrototypeOf(shared) as object | null;
  if (shared === null || Object.hasOwn(shared, 'rateLimit')) return false;
  Object.defineProperties(shared, {
    rateLimit: {
      configurable: true,
      get(this: object) {
        return decisions.get(this);
      },
      set(this: object, value: Decision | undefined) {
        decisions.set(this, value);
      },
    },
    [KEEPS_DECISIONS]: { value: true },
  });
  return true;
}

function expressPort(handler: ExpressRateLimitOptions['handler']): HttpPort<Request, Response> {
  return {
    setHeader(response, name, value) {
      response.setHeader(name, value);
    },
    attach: keepDecision,
    countsHolder(request, response = request.res) {
      // Not the request, for the reason told at keepDecision. res.locals, which Express makes for
      // every request, is a dictionary object: adding to it allocates no hidden class.
      return response?.locals ?? request;
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
