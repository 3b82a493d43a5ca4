/**
 * Real HTTP servers (Express and Fastify, listening on loopback) behind the limiter, and
 * clients that measure every request: a keep-alive client, a bounded load loop, and a
 * raw TCP client for bytes an HTTP library would refuse to send.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import { performance } from 'node:perf_hooks';
import express from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
import { type ExpressRateLimitOptions, rateLimit } from '../../src/express';
import { type FastifyRateLimitOptions, rateLimitPlugin } from '../../src/fastify';
import type { Identify, RequestLike } from '../../src/http/identify';

export type Framework = 'express' | 'fastify';
export const FRAMEWORKS: readonly Framework[] = ['express', 'fastify'];

export interface App {
  readonly framework: Framework;
  readonly port: number;
  readonly host: string;
  /** The Fastify instance (for `inject`), when the framework is Fastify. */
  readonly fastify?: FastifyInstance;
  close(): Promise<void>;
}

/** Limiter options both adapters accept; `identify` receives either framework's request. */
export type AppOptions = Omit<
  ExpressRateLimitOptions,
  'handler' | 'identify' | 'skip' | 'cost' | 'message' | 'onDecision' | 'onNearLimit' | 'onError'
> & {
  /** Both frameworks' requests have `headers` and `ip`. */
  identify?: Identify<RequestLike> | Identify<RequestLike>[];
  onError?: (error: unknown) => void;
};

export interface AppSettings {
  /** Express `trust proxy` / Fastify `trustProxy`. Default false. */
  trustProxy?: boolean | string;
  /** Listen address. Default `127.0.0.1`. */
  host?: string;
  /** The one route, answering `ok`. Default `/`. */
  path?: string;
}

/** Starts `framework` with the limiter in front of `GET /` (which answers `ok`). */
export async function startApp(framework: Framework, options: AppOptions, settings: AppSettings = {}): Promise<App> {
  const host = settings.host ?? '127.0.0.1';
  const path = settings.path ?? '/';
  if (framework === 'express') {
    const app = express();
    app.set('trust proxy', settings.trustProxy ?? false);
    app.use(rateLimit(options as ExpressRateLimitOptions));
    app.get(path, (_request, response) => {
      response.send('ok');
    });
    const server = http.createServer(app);
    await new Promise<void>((resolve) => server.listen(0, host, resolve));
    return {
      framework,
      port: (server.address() as AddressInfo).port,
      host,
      close: () =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    };
  }
  const app = Fastify({ logger: false, trustProxy: settings.trustProxy ?? false });
  await app.register(rateLimitPlugin, options as FastifyRateLimitOptions);
  app.get(path, async () => 'ok');
  await app.listen({ port: 0, host });
  return {
    framework,
    port: (app.server.address() as AddressInfo).port,
    host,
    fastify: app,
    close: () => app.close(),
  };
}

export interface Sample {
  /** performance.now() when the answer was complete. */
  readonly at: number;
  readonly ms: number;
  readonly status: number;
  /** Whether the answer carried `X-RateLimit-Limit`, i.e. the limiter decided it. */
  readonly limited: boolean;
  readonly id: string;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

/** One GET, timed from the call to the end of the body. A transport error rejects. */
export function get(port: number, headers: Record<string, string> = {}, path = '/', host = '127.0.0.1'): Promise<Sample> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const request = http.request({ host, port, path, method: 'GET', headers, agent }, (response) => {
      response.resume();
      response.on('end', () => {
        const at = performance.now();
        resolve({
          at,
          ms: at - started,
          status: response.statusCode ?? 0,
          limited: response.headers['x-ratelimit-limit'] !== undefined,
          id: headers['x-id'] ?? '',
        });
      });
      response.on('error', reject);
    });
    request.on('error', reject);
    request.end();
  });
}

/**
 * `concurrency` clients, each sending requests back to back (header `x-id` from
 * `idOf(client)`) until `stop()` is called; `done` resolves with every sample. Bounded:
 * a client never has more than one request in flight.
 */
export function load(
  port: number,
  concurrency: number,
  idOf: (client: number) => string,
): { stop(): void; done: Promise<Sample[]>; readonly samples: readonly Sample[] } {
  let running = true;
  const samples: Sample[] = [];
  const client = async (index: number): Promise<void> => {
    while (running) samples.push(await get(port, { 'x-id': idOf(index) }));
  };
  const done = Promise.all(Array.from({ length: concurrency }, (_, index) => client(index))).then(() => samples);
  return {
    stop() {
      running = false;
    },
    done,
    /** The answers so far, in the order they came. */
    samples,
  };
}

/**
 * Sends `head` (request line and headers, CRLF-separated, without the blank line) over a
 * raw TCP connection with `Connection: close`, and resolves with the status code of the
 * answer (0 when the server closed without one).
 */
export function rawRequest(port: number, head: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1');
      const match = /^HTTP\/1\.1 (\d{3})/.exec(text);
      resolve(match ? Number(match[1]) : 0);
    });
    // Written, not ended: a half-closed request may be dropped as abandoned by the server.
    // With `Connection: close` the server closes the socket once it has answered.
    socket.write(Buffer.concat([head, Buffer.from('\r\nConnection: close\r\n\r\n')]));
  });
}

export function closeAgent(): void {
  agent.destroy();
}
