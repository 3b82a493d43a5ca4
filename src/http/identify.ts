import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import { isPromiseLike } from '../async';
import { OptionError, Warnings } from '../errors';
import { checkOptions, describeValue, keysOf } from '../validate';

/** The parts of an Express `Request` or Fastify `FastifyRequest` the built-in identifiers read. */
export interface RequestLike {
  ip?: string | undefined;
  headers: Record<string, string | string[] | undefined>;
  socket?: { remoteAddress?: string | undefined } | undefined;
}

/**
 * Finds who a request counts against. Returns the identifier, or nothing (`undefined`,
 * `null`, `''`) when it cannot tell, in which case the next identifier in a list is tried.
 */
export type Identify<Req = RequestLike> = (request: Req) => IdentifierAnswer | PromiseLike<IdentifierAnswer>;

/** What an {@link Identify} function answers: an identifier, or nothing. */
export type IdentifierAnswer = string | number | undefined | null;

/** One identifier function, or a list tried in order: the first non-empty answer wins. */
export type IdentifyOption<Req = RequestLike> = Identify<Req> | readonly Identify<Req>[];

const BY_IP_OPTIONS = keysOf<ByIpOptions>({ ipv6Subnet: true, warnOnForwarded: true });
const BY_API_KEY_OPTIONS = keysOf<ByApiKeyOptions>({ header: true });
/** The default `ipv6Subnet` of {@link byIp}: the prefix length commonly allocated to one customer. */
const DEFAULT_IPV6_SUBNET = 56;
/** The default header of {@link byApiKey}. */
const DEFAULT_API_KEY_HEADER = 'x-api-key';

/** The identifier of requests no identifier function could place. They share one quota. */
export const ANONYMOUS = 'anonymous';

/** Options of {@link byIp}. */
export interface ByIpOptions {
  /**
   * IPv6 addresses are reduced to this prefix length, so one host cannot escape its limit
   * by rotating through the addresses of its allocation (commonly a /56 or /64). A number
   * from 1 to 128, or `false` to use full addresses. Default `56`.
   */
  ipv6Subnet?: number | false | undefined;
  /**
   * Warn, once per process each, about a proxy setting that defeats the limit:
   *
   * - `SWL_UNTRUSTED_FORWARDED`: a request carries `X-Forwarded-For` or `Forwarded` (or Koa's
   *   `proxyIpHeader`) while the framework's `ip` is the socket's own peer: behind a proxy without
   *   Express's `trust proxy`, Fastify's `trustProxy` or Koa's `proxy`, every client would share
   *   the proxy's quota.
   * - `SWL_TRUST_ALL_PROXIES`: Express's `trust proxy` is `true`, Koa's `proxy` is on without
   *   `maxIpsCount`, or a request's `ip` is the leftmost of several `X-Forwarded-For` entries
   *   (Fastify's `trustProxy: true`): every hop is trusted, so any client can choose its IP, and
   *   its quota, per request.
   *
   * The header never decides the identifier. Default `true`.
   */
  warnOnForwarded?: boolean | undefined;
}

/**
 * The app a request belongs to, as far as its proxy settings go: Express's `app.get('trust proxy')`,
 * or Koa's `app.proxy`, `app.proxyIpHeader` and `app.maxIpsCount` (a Koa `ctx.app`).
 */
interface AppLike {
  get?(name: string): unknown;
  proxy?: unknown;
  proxyIpHeader?: unknown;
  maxIpsCount?: unknown;
}

type RequestOfApp = RequestLike & { app?: AppLike };

function warnIfForwardedUntrusted(request: RequestOfApp, ip: string, warnings: Warnings): void {
  const { headers } = request;
  if (headers === undefined) return;
  // Koa reads the client's address from a header of its own choosing (`proxyIpHeader`).
  const koaHeader = request.app?.proxyIpHeader;
  const custom = typeof koaHeader === 'string' ? headers[koaHeader.toLowerCase()] : undefined;
  if (headers['x-forwarded-for'] === undefined && headers.forwarded === undefined && custom === undefined) return;
  if (ip !== request.socket?.remoteAddress) return;
  warnings.once(
    'SWL_UNTRUSTED_FORWARDED',
    () =>
      `A request came with X-Forwarded-For or Forwarded, but its ip is the connection's own peer (${ip}): behind a proxy or load balancer, every client then shares the proxy's rate limit. Set Express's 'trust proxy', Fastify's 'trustProxy' or Koa's 'proxy' (with 'maxIpsCount') to the proxies you run (or pass byIp({ warnOnForwarded: false }) if clients reach the app directly).`,
  );
}

const TRUST_ALL_FIX =
  "Set Express's 'trust proxy' or Fastify's 'trustProxy' to the number of proxies in front of the app (such as 1) or to their addresses, or Koa's 'maxIpsCount' to that number.";

/**
 * Warns when the framework trusts every hop: Express's `trust proxy` setting is `true`, or Koa's
 * `proxy` is on with no `maxIpsCount` (read once per app), or, whatever the framework, `ip` is
 * the leftmost of several `X-Forwarded-For` entries, which only a setting that trusts every hop yields.
 */
function warnIfTrustingAll(request: RequestOfApp, ip: string, checked: { app?: object }, warnings: Warnings): void {
  const { app } = request;
  if (app !== undefined && app !== checked.app) {
    checked.app = app;
    if (typeof app.get === 'function' && app.get('trust proxy') === true) {
      warnings.once(
        'SWL_TRUST_ALL_PROXIES',
        () =>
          `Express's 'trust proxy' is true: it trusts every hop, so any client can choose its IP with X-Forwarded-For and get a fresh rate limit per request. ${TRUST_ALL_FIX}`,
      );
      return;
    }
    if (app.proxy === true && !(typeof app.maxIpsCount === 'number' && app.maxIpsCount > 0)) {
      warnings.once(
        'SWL_TRUST_ALL_PROXIES',
        () =>
          `Koa's 'proxy' is on with no 'maxIpsCount': ctx.ip is the leftmost address of ${typeof app.proxyIpHeader === 'string' ? app.proxyIpHeader : 'X-Forwarded-For'}, so any client can choose its IP and get a fresh rate limit per request. Set 'maxIpsCount' to the number of proxies in front of the app (such as 1).`,
      );
      return;
    }
  }
  // Koa's setting says all there is to know: with maxIpsCount, a leftmost address is one the proxies vouch for.
  if (typeof app?.maxIpsCount === 'number') return;
  const forwarded = request.headers['x-forwarded-for'];
  if (typeof forwarded !== 'string' || !forwarded.includes(',')) return;
  const entries = forwarded.split(',');
  const first = entries[0].trim();
  if (ip !== first || first === entries[entries.length - 1].trim()) return;
  warnings.once(
    'SWL_TRUST_ALL_PROXIES',
    () =>
      `A request's ip (${ip}) is the leftmost X-Forwarded-For entry: the app trusts every hop (Express 'trust proxy' or Fastify 'trustProxy' true, or Koa's 'proxy' without 'maxIpsCount'), so any client can choose its IP and get a fresh rate limit per request. ${TRUST_ALL_FIX}`,
  );
}

/**
 * Identifies a request by client IP: the framework's `request.ip` (Koa's `ctx.ip`), which honours
 * the app's `trust proxy` (Express), `trustProxy` (Fastify) or `proxy`, `proxyIpHeader` and
 * `maxIpsCount` (Koa) settings and is never read from headers by this package. IPv4 addresses are used as they are, and an IPv4-mapped IPv6
 * address (`::ffff:203.0.113.7`, what a dual-stack socket reports for an IPv4 client) as its
 * IPv4 address; other IPv6 addresses are masked to `ipv6Subnet`. Identifiers look like `ip:203.0.113.7` or `ip:2001:db8:0:1200::/56`.
 */
export function byIp(options: ByIpOptions = {}): Identify<RequestLike> {
  checkOptions(options, BY_IP_OPTIONS, 'byIp');
  const { subnet, warnOnForwarded } = resolveByIpOptions(options);
  const checked: { app?: object } = {};
  // Each byIp() warns for itself: a limiter's default identify is its own.
  const warnings = new Warnings();
  return function identifyByIp(request) {
    const ip = request.ip ?? request.socket?.remoteAddress;
    if (!ip) return undefined;
    // Once a warning is said, its per-request checks stop.
    if (warnOnForwarded && !warnings.has('SWL_UNTRUSTED_FORWARDED')) warnIfForwardedUntrusted(request, ip, warnings);
    if (warnOnForwarded && !warnings.has('SWL_TRUST_ALL_PROXIES')) warnIfTrustingAll(request, ip, checked, warnings);
    return `ip:${normalizeIp(ip, subnet)}`;
  };
}

/** `ipv6Subnet` and `warnOnForwarded` of {@link ByIpOptions}, validated, with their defaults (the caller checks for unknown keys). */
export function resolveByIpOptions(options: ByIpOptions): { subnet: number | false; warnOnForwarded: boolean } {
  const subnet = options.ipv6Subnet ?? DEFAULT_IPV6_SUBNET;
  if (subnet !== false && (typeof subnet !== 'number' || !Number.isInteger(subnet) || subnet < 1 || subnet > 128)) {
    throw new OptionError('SWL_INVALID_NUMBER', `ipv6Subnet: must be an integer from 1 to 128 or false, got ${describeValue(subnet)}`);
  }
  const warnOnForwarded = options.warnOnForwarded ?? true;
  if (typeof warnOnForwarded !== 'boolean') {
    throw new OptionError('SWL_INVALID_CHOICE', `warnOnForwarded: must be true or false, got ${describeValue(warnOnForwarded)}`);
  }
  return { subnet, warnOnForwarded };
}

/**
 * Identifies a request by its authenticated user: `userId(request)` returns the user's
 * id, or nothing for anonymous requests. Identifiers look like `user:42`.
 *
 * @example byUser((req) => req.user?.id)
 */
export function byUser<Req = RequestLike>(userId: (request: Req) => IdentifierAnswer | PromiseLike<IdentifierAnswer>): Identify<Req> {
  if (typeof userId !== 'function')
    throw new OptionError('SWL_INVALID_FUNCTION', `byUser: expected a function returning the user id, got ${describeValue(userId)}`);
  const prefixed = (id: IdentifierAnswer): string | undefined => (id === undefined || id === null || id === '' ? undefined : `user:${id}`);
  return function identifyByUser(request) {
    const id = userId(request);
    return isPromiseLike(id) ? Promise.resolve(id).then(prefixed) : prefixed(id);
  };
}

/** Options of {@link byApiKey}. */
export interface ByApiKeyOptions {
  /** The request header holding the key. Default `'x-api-key'`. */
  header?: string | undefined;
}

/**
 * Identifies a request by the API key in a header. The key is hashed (SHA-256,
 * shortened to 128 bits) before it becomes part of a store key, so Redis never holds
 * credentials. Identifiers look like `key:9f86d081884c7d659a2feaa0c55ad015`.
 */
export function byApiKey(options: ByApiKeyOptions = {}): Identify<RequestLike> {
  const name = apiKeyHeader(options);
  return function identifyByApiKey(request) {
    let key = request.headers[name];
    if (Array.isArray(key)) key = key[0];
    return key ? apiKeyIdentifier(key) : undefined;
  };
}

/** The identifier of an API key: `key:` and its SHA-256, shortened to 128 bits. */
export function apiKeyIdentifier(key: string): string {
  return `key:${createHash('sha256').update(key).digest('hex').slice(0, 32)}`;
}

/** The header name of `byApiKey`'s options (`'x-api-key'` by default), validated and lowercased. */
export function apiKeyHeader(options: ByApiKeyOptions): string {
  checkOptions(options, BY_API_KEY_OPTIONS, 'byApiKey');
  const header = options.header ?? DEFAULT_API_KEY_HEADER;
  if (typeof header !== 'string' || header.length === 0)
    throw new OptionError('SWL_INVALID_TYPE', `header: must be a header name, got ${describeValue(header)}`);
  return header.toLowerCase();
}

/**
 * Turns the `identify` option into one function that always answers an identifier (or a
 * promise of one, when an identify function is async): lists are tried in order, and a
 * request nothing identifies counts as {@link ANONYMOUS}.
 */
export function resolveIdentify<Req>(
  option: IdentifyOption<Req> | undefined,
  fallback: Identify<Req>,
): (request: Req) => string | Promise<string> {
  const list: readonly Identify<Req>[] = option === undefined ? [fallback] : Array.isArray(option) ? option : [option as Identify<Req>];
  if (list.length === 0 || list.some((fn) => typeof fn !== 'function')) {
    throw new OptionError(
      'SWL_INVALID_FUNCTION',
      'identify: must be a function or a non-empty array of functions (e.g. byIp(), byUser(fn), byApiKey())',
    );
  }
  const from = (request: Req, start: number): string | Promise<string> => {
    for (let i = start; i < list.length; i++) {
      const answer = list[i](request);
      if (isPromiseLike(answer)) {
        return Promise.resolve(answer).then((settled) => present(settled) ?? from(request, i + 1));
      }
      const id = present(answer);
      if (id !== undefined) return id;
    }
    return ANONYMOUS;
  };
  if (list.length === 1) {
    const only = list[0];
    return (request) => {
      const answer = only(request);
      return isPromiseLike(answer)
        ? Promise.resolve(answer).then((settled) => present(settled) ?? ANONYMOUS)
        : (present(answer) ?? ANONYMOUS);
    };
  }
  return (request) => from(request, 0);
}

function present(id: unknown): string | undefined {
  if (id === undefined || id === null || id === '') return undefined;
  if (typeof id === 'string') return id;
  if (typeof id === 'number' && Number.isFinite(id)) return String(id);
  // An object would become '[object Object]' and put every client under one key.
  throw new OptionError('SWL_INVALID_IDENTIFIER', `identify: must return a string, a finite number or nothing, got ${describeValue(id)}`);
}

/** IPv4 as is (IPv4-mapped IPv6 unmapped to it); IPv6 masked to `subnet` bits and written as `prefix::/subnet`. */
export function normalizeIp(ip: string, subnet: number | false): string {
  const version = isIP(ip);
  if (version === 4) return ip;
  if (version !== 6) {
    const zone = ip.indexOf('%');
    // A zone id (fe80::1%eth0) is not part of the address.
    return zone > 0 && isIP(ip.slice(0, zone)) === 6 ? normalizeIp(ip.slice(0, zone), subnet) : ip;
  }
  const words = ipv6Words(ip);
  // ::ffff:a.b.c.d, however written, is an IPv4 client seen by a dual-stack socket: unmap it first,
  // or every IPv4 client would share one IPv6 subnet.
  if (words[0] === 0 && words[1] === 0 && words[2] === 0 && words[3] === 0 && words[4] === 0 && words[5] === 0xffff) {
    return `${words[6] >> 8}.${words[6] & 0xff}.${words[7] >> 8}.${words[7] & 0xff}`;
  }
  if (subnet === false) return words.map((word) => word.toString(16)).join(':');
  const kept: string[] = [];
  for (let i = 0; i * 16 < subnet; i++) {
    const bits = Math.min(16, subnet - i * 16);
    kept.push((words[i] & (0xffff << (16 - bits)) & 0xffff).toString(16));
  }
  return `${kept.join(':')}${kept.length < 8 ? '::' : ''}/${subnet}`;
}

/** The eight 16-bit words of a valid IPv6 address (as accepted by `net.isIP`). */
function ipv6Words(ip: string): number[] {
  let text = ip.toLowerCase();
  const tail: number[] = [];
  const lastColon = text.lastIndexOf(':');
  if (text.includes('.', lastColon)) {
    const octets = text
      .slice(lastColon + 1)
      .split('.')
      .map(Number);
    tail.push((octets[0] << 8) | octets[1], (octets[2] << 8) | octets[3]);
    text = `${text.slice(0, lastColon + 1)}0:0`;
  }
  const [head, rest] = text.split('::');
  const parse = (part: string | undefined): number[] => (part ? part.split(':').map((word) => parseInt(word, 16)) : []);
  const front = parse(head);
  const back = rest === undefined ? [] : parse(rest);
  const words = rest === undefined ? front : [...front, ...new Array<number>(8 - front.length - back.length).fill(0), ...back];
  if (tail.length > 0) words.splice(6, 2, ...tail);
  return words;
}
