/**
 * Hono middleware (Hono 4, served by @hono/node-server, `Bun.serve` or `Deno.serve`): framework
 * glue over the shared HTTP path. The request and the response are both Hono's `Context`; the IP
 * comes from the runtime's connection info (as Hono's `getConnInfo` reads it), and from
 * `X-Forwarded-For` only as far as `byIp({ trustProxy })` says.
 *
 * @example
 * import { byIp, rateLimit } from 'ratewarden/hono';
 * app.use(rateLimit({ store, limit: 100, window: '1m', identify: byIp() }));
 * app.get('/search', rateLimit({ store, limit: 10, window: '1s', prefix: 'search' }), search);
 */
import type { Context, MiddlewareHandler } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { Decision, Limiter } from './core/types';
import { OptionError, warn } from './errors';
import { HttpLimiter, type HttpPort } from './http/handler';
import { HTTP_OPTION_KEYS, type HttpOptions, SERVICE_UNAVAILABLE } from './http/http-options';
import {
  apiKeyHeader,
  apiKeyIdentifier,
  type ByApiKeyOptions,
  type ByIpOptions,
  type Identify,
  normalizeIp,
  resolveByIpOptions,
} from './http/identify';
import { checkOptions, describeValue, keysOf } from './validate';

/** The variables the middleware sets on the context: `c.get('rateLimit')`. */
export interface RateLimitVariables {
  /** The decision for this request; undefined when it was not limited, skipped, or the store failed. */
  rateLimit: Decision | undefined;
}

/** The environment the middleware declares, so `c.get('rateLimit')` is typed in the handlers after it. */
export interface RateLimitEnv {
  Variables: RateLimitVariables;
}

/** Options of {@link rateLimit}: the shared HTTP options, their functions taking Hono's `Context`. */
export type HonoRateLimitOptions = HttpOptions<Context, Context>;

/** The middleware, with the limiter behind it for `reset()` or `peek()`. */
export interface RateLimitMiddleware extends MiddlewareHandler<RateLimitEnv> {
  readonly limiter: Limiter;
  /** Forgets what this middleware counted for the request of `c` (its identifier's whole count, as `limiter.reset()` does). */
  resetRequest(c: Context): Promise<void>;
}

const OPTIONS = keysOf<HonoRateLimitOptions>(HTTP_OPTION_KEYS);

/** Where a request's state lives on its context while this middleware runs. */
const EXCHANGE: unique symbol = Symbol('ratewarden.hono');

/** One request through one middleware: its headers, how it is answered, what waits for its end. */
interface Exchange {
  /** Rate-limit headers, as name, value, name, value...: written on the response once there is one. */
  readonly headers: string[];
  /** Ends the middleware with a response of its own (a denial, a 503). */
  readonly answer: (response: Response) => void;
  /** Without Node's response (no @hono/node-server), what runs once the handlers are done. */
  afterNext: ((finished: boolean) => void)[] | undefined;
}

type ContextRecord = Context & { [EXCHANGE]?: Exchange };

function exchangeOf(c: Context): Exchange {
  const exchange = (c as ContextRecord)[EXCHANGE];
  if (exchange === undefined) throw new Error('ratewarden/hono: the shared path called back outside the middleware');
  return exchange;
}

/** Node's response under @hono/node-server, if the app runs there. */
function nodeResponse(c: Context): { once(event: 'close', listener: () => void): unknown; readonly writableFinished: boolean } | undefined {
  const env = c.env as { outgoing?: { once?: unknown; writableFinished?: unknown } } | undefined;
  const outgoing = env?.outgoing;
  return outgoing !== undefined && typeof outgoing.once === 'function' ? (outgoing as ReturnType<typeof nodeResponse>) : undefined;
}

function withHeaders(c: Context, headers: readonly string[]): void {
  for (let i = 0; i < headers.length; i += 2) c.header(headers[i], headers[i + 1]);
}

const honoPort: HttpPort<Context, Context> = {
  setHeader(c, name, value) {
    exchangeOf(c).headers.push(name, value);
  },
  attach(c, decision) {
    c.set('rateLimit', decision);
  },
  countsHolder(c) {
    return c;
  },
  deny(c, _response, denial) {
    const exchange = exchangeOf(c);
    withHeaders(c, exchange.headers);
    // An error status (400-599), validated at construction: always one with content.
    const status = denial.statusCode as ContentfulStatusCode;
    if (denial.contentType !== undefined) exchange.answer(c.body(denial.body, status, { 'Content-Type': denial.contentType }));
    else exchange.answer(c.json(denial.body, status));
  },
  unavailable(c) {
    exchangeOf(c).answer(c.json(SERVICE_UNAVAILABLE, 503));
  },
  whenDone(c, done) {
    // Node's response tells a response sent in full from a client that went away ('close' alone).
    const outgoing = nodeResponse(c);
    if (outgoing !== undefined) outgoing.once('close', () => done(outgoing.writableFinished));
    else {
      const exchange = exchangeOf(c);
      exchange.afterNext ??= [];
      exchange.afterNext.push(done);
    }
  },
  statusOf(c) {
    return c.res.status;
  },
};

/**
 * Creates rate-limiting middleware for Hono: `app.use(rateLimit(options))`, or per route
 * `app.get('/x', rateLimit(options), handler)`. The decision is `c.get('rateLimit')`. Options
 * are validated here; mistakes throw an `OptionError` naming the option.
 */
export function rateLimit(options: HonoRateLimitOptions = {}): RateLimitMiddleware {
  checkOptions(options, OPTIONS, 'rateLimit');
  // The shared default, the core's byIp(), reads request.ip, which a Hono context does not have.
  const http = new HttpLimiter<Context, Context>({ ...options, identify: options.identify ?? byIp() }, honoPort);
  const middleware = function rateLimitMiddleware(c: Context, next: () => Promise<void>): Promise<Response | undefined> {
    return new Promise<Response | undefined>((resolve, reject) => {
      const exchange: Exchange = { headers: [], answer: resolve, afterNext: undefined };
      (c as ContextRecord)[EXCHANGE] = exchange;
      http.handle(c, c, (error) => {
        if (error !== undefined) {
          reject(error);
          return;
        }
        next().then(() => {
          // On the response the handlers made: a header a later limiter (or the handler) set stays.
          const { headers } = exchange;
          for (let i = 0; i < headers.length; i += 2) if (!c.res.headers.has(headers[i])) c.header(headers[i], headers[i + 1]);
          if (exchange.afterNext !== undefined) for (const done of exchange.afterNext) done(true);
          resolve(undefined);
        }, reject);
      });
    });
  } as RateLimitMiddleware;
  Object.defineProperty(middleware, 'limiter', { value: http.limiter, enumerable: true });
  Object.defineProperty(middleware, 'resetRequest', { value: (c: Context) => http.resetRequest(c), enumerable: true });
  return middleware;
}

/**
 * Which proxies in front of the app are trusted to say who the client is, in `X-Forwarded-For`:
 * - a number `n`: the `n` nearest hops are your proxies (the connection's peer is the first), so
 *   the client is the address `n` hops back (`1`: the last address in `X-Forwarded-For`);
 * - a function of an address and its hop (0 for the connection's peer, 1 for the last address in
 *   `X-Forwarded-For`...): true for a proxy of yours; the client is the first address it refuses.
 */
export type TrustProxy = number | ((address: string, hop: number) => boolean);

/** Options of the Hono {@link byIp}: the core's, and `trustProxy`. */
export interface HonoByIpOptions extends ByIpOptions {
  /**
   * The proxies trusted to set `X-Forwarded-For` (see {@link TrustProxy}). Default: none; the
   * client is the connection's peer, and `X-Forwarded-For` is never read.
   */
  trustProxy?: TrustProxy | undefined;
}

const BY_IP_OPTIONS = keysOf<HonoByIpOptions>({ ipv6Subnet: true, warnOnForwarded: true, trustProxy: true });

function warnUntrustedForwarded(peer: string): void {
  warn(
    'SWL_UNTRUSTED_FORWARDED',
    `A request came with X-Forwarded-For or Forwarded, but ratewarden/hono's byIp() trusts no proxy: the client is the connection's peer (${peer}), so behind a proxy or load balancer every client shares the proxy's rate limit. Pass byIp({ trustProxy }) naming your proxies (or byIp({ warnOnForwarded: false }) if clients reach the app directly).`,
  );
}

/**
 * What the server puts in `c.env`, where the connection's peer can be read: Node's request under
 * @hono/node-server, Bun's server (`Bun.serve` calls `fetch(request, server)`), or Deno's
 * `ServeHandlerInfo` (`Deno.serve` calls `handler(request, info)`). Under `server` when the app
 * is called with bindings of its own around them.
 */
interface ServerBindings {
  readonly incoming?: { readonly socket?: { readonly remoteAddress?: string | undefined } | undefined } | undefined;
  readonly requestIP?: ((request: Request) => { readonly address: string } | null | undefined) | undefined;
  readonly remoteAddr?: { readonly transport?: string; readonly hostname?: string | undefined } | undefined;
  readonly server?: ServerBindings | undefined;
}

/**
 * The address of the connection's peer, from the runtime's own connection info (as Hono's
 * `getConnInfo` helpers of each runtime read it, without importing them: the adapter loads on
 * every runtime): Node's socket, Bun's `server.requestIP(request)`, or Deno's `info.remoteAddr`.
 */
function peerAddress(c: Context): string | undefined {
  const env = c.env as ServerBindings | undefined;
  const bindings = env?.server ?? env;
  const socket = bindings?.incoming?.socket;
  if (socket !== undefined) return socket.remoteAddress;
  if (typeof bindings?.requestIP === 'function') return bindings.requestIP(c.req.raw)?.address;
  const remote = bindings?.remoteAddr;
  // A Unix socket has a path, no address: such a request is not identified by IP.
  if (remote !== undefined) return remote.transport === 'tcp' || remote.transport === 'udp' ? remote.hostname : undefined;
  throw new Error(
    "ratewarden/hono: byIp() reads the client's address from the server's connection info (@hono/node-server's request, Bun.serve's server or Deno.serve's info in c.env), and this request came with none (app.request() in tests, a worker...); pass identify",
  );
}

/** The client's address: `peer`, or, through trusted proxies, an address of `X-Forwarded-For`. */
function clientAddress(c: Context, peer: string, trust: TrustProxy): string {
  const forwarded = c.req.header('x-forwarded-for');
  if (forwarded === undefined) return peer;
  // Nearest first: the peer, then X-Forwarded-For from its right end.
  const hops = [peer];
  const listed = forwarded.split(',');
  for (let i = listed.length - 1; i >= 0; i--) {
    const address = listed[i].trim();
    if (address !== '') hops.push(address);
  }
  if (typeof trust === 'number') return hops[Math.min(trust, hops.length - 1)];
  let hop = 0;
  while (hop < hops.length - 1 && trust(hops[hop], hop)) hop++;
  return hops[hop];
}

/**
 * Identifies a request by client IP, for Hono on @hono/node-server, `Bun.serve` or `Deno.serve`:
 * the connection's peer (as `getConnInfo` reads it), or with `trustProxy` the client your proxies name in `X-Forwarded-For`, never
 * a header no trusted proxy wrote. Addresses are normalized as by the core's `byIp()`
 * (IPv4-mapped IPv6 unmapped, IPv6 masked to `ipv6Subnet`): `ip:203.0.113.7`.
 */
export function byIp(options: HonoByIpOptions = {}): Identify<Context> {
  checkOptions(options, BY_IP_OPTIONS, 'byIp');
  const { subnet, warnOnForwarded } = resolveByIpOptions(options);
  const { trustProxy } = options;
  if (
    trustProxy !== undefined &&
    typeof trustProxy !== 'function' &&
    (typeof trustProxy !== 'number' || !Number.isSafeInteger(trustProxy) || trustProxy < 1)
  ) {
    throw new OptionError(
      'SWL_INVALID_NUMBER',
      `trustProxy: must be a positive integer (hops of your proxies) or a function of an address, got ${describeValue(trustProxy)}`,
    );
  }
  // Each byIp() warns for itself, once: a limiter's default identify is its own.
  let forwardedWarned = false;
  return function identifyByIp(c) {
    const peer = peerAddress(c);
    if (!peer) return undefined;
    if (trustProxy === undefined) {
      if (
        warnOnForwarded &&
        !forwardedWarned &&
        (c.req.header('x-forwarded-for') !== undefined || c.req.header('forwarded') !== undefined)
      ) {
        forwardedWarned = true;
        warnUntrustedForwarded(peer);
      }
      return `ip:${normalizeIp(peer, subnet)}`;
    }
    return `ip:${normalizeIp(clientAddress(c, peer, trustProxy), subnet)}`;
  };
}

/**
 * Identifies a request by the API key in a header (`x-api-key` by default), hashed as the core's
 * `byApiKey()` does: `key:9f86d081884c7d659a2feaa0c55ad015`.
 */
export function byApiKey(options: ByApiKeyOptions = {}): Identify<Context> {
  const name = apiKeyHeader(options);
  return function identifyByApiKey(c) {
    const key = c.req.header(name);
    return key ? apiKeyIdentifier(key) : undefined;
  };
}

export * from './index';
