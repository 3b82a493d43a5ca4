/**
 * The package on Bun and Deno (and, for comparison, on Node), as users get it (dist/): each
 * runtime runs test/runtimes/suite.mjs against a redis-server this test starts on a free port,
 * and kills and restarts when the suite asks, through a control server of this test. For each
 * client library (ioredis, node-redis), the core limiter and an Express app, a Hono app served
 * by the runtime's own server (`Bun.serve`, `Deno.serve`; @hono/node-server on Node) and a Koa
 * app with @koa/router are held to the same things:
 *
 * - the rate-limit headers, and the client's address from the runtime's connection info, and
 *   through one trusted proxy from `X-Forwarded-For`;
 * - a 429 with an exact `Retry-After` and the default body;
 * - exactly the limit allowed, and counted, of 200 concurrent checks;
 * - with Redis killed, checks in flight and after answered within `timeoutMs` (503 in the apps,
 *   a coded failure from the core), no unhandled rejection, no crash;
 * - with Redis back, exact counts again.
 *
 * `npm run test:runtimes` (jest.runtimes.config.ts). The runtimes are devDependencies: the `bun`
 * and `deno` packages of the npm registry.
 */
import { execFile, spawnSync } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import { type RedisProcess, startRedis } from '../../support/redis-server';
import { ensureFreshDist } from '../helpers/dist';

const root = resolve(__dirname, '../..');
const SUITE = join(__dirname, 'suite.mjs');
/** How much later than `timeoutMs` an answer may come: the loop and the sockets of a busy machine. */
const MARGIN_MS = 150;

const RUNTIMES = {
  bun: { command: join(root, 'node_modules/.bin/bun'), args: [SUITE] },
  deno: { command: join(root, 'node_modules/.bin/deno'), args: ['run', '--allow-net', '--allow-env', SUITE] },
  node: { command: process.execPath, args: [SUITE] },
} as const;
type RuntimeName = keyof typeof RUNTIMES;

const CLIENTS = ['ioredis', 'node-redis'] as const;
const FRAMEWORKS = ['express', 'hono', 'koa'] as const;

interface Answer {
  status: number;
  ms: number;
  body: string;
  limit: string | null;
  remaining: string | null;
  reset: string | null;
  retryAfter: string | null;
  contentType: string | null;
}

interface CoreCheck {
  allowed?: boolean;
  retryAfterMs?: number;
  code?: string;
  ms: number;
}

interface FrameworkCell {
  first: Answer;
  proxied: string;
  statuses: number[];
  denied: Answer;
  burst: Record<string, number>;
  counted: number;
  inFlight: { slowestMs: number; statuses: Record<string, number> };
  outage: Pick<Answer, 'status' | 'ms' | 'body'>[];
  storeFailures: number;
  recoveredAfterMs: number | null;
  after: Record<string, number>;
}

interface CoreCell {
  checks: CoreCheck[];
  burst: Record<string, number>;
  counted: number;
  inFlight: { slowestMs: number; outcomes: Record<string, number> };
  outage: CoreCheck[];
  recoveredAfterMs: number | null;
  after: Pick<CoreCheck, 'allowed' | 'retryAfterMs'>[];
}

type ClientCells = { setupError?: string; core: CoreCell } & Record<(typeof FRAMEWORKS)[number], FrameworkCell>;

interface Report {
  runtime: string;
  version: string;
  timeoutMs: number;
  cells: Record<(typeof CLIENTS)[number], ClientCells>;
  troubles: { unhandledRejections: string[]; uncaughtExceptions: string[] };
}

interface Run {
  code: number | null;
  stderr: string;
  report: Report | undefined;
  ms: number;
}

/** A server through which the suite asks for Redis to be killed (`POST /kill`) and restarted (`POST /restart`); each answers once done. */
async function controlServer(redis: RedisProcess): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((request, response) => {
    const action =
      request.url === '/kill'
        ? redis.kill()
        : request.url === '/restart'
          ? redis.restart()
          : Promise.reject(new Error(`no action ${request.url}`));
    action.then(
      () => response.end('done'),
      (error: unknown) => {
        response.statusCode = 500;
        response.end(String(error));
      },
    );
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((done) => {
        server.close(() => done());
        server.closeAllConnections();
      }),
  };
}

/** Runs the suite under `runtime` against a new redis-server; killed after 90 s. */
async function runSuite(runtime: RuntimeName): Promise<Run> {
  const redis = await startRedis();
  const control = await controlServer(redis);
  const started = Date.now();
  try {
    const { command, args } = RUNTIMES[runtime];
    return await new Promise<Run>((done) => {
      execFile(
        command,
        [...args, redis.url, control.url],
        { cwd: root, timeout: 90_000, maxBuffer: 16 * 1024 * 1024 },
        (error, stdout, stderr) => {
          const line = stdout.split('\n').find((text) => text.startsWith('@@report '));
          done({
            code: error ? (typeof error.code === 'number' ? error.code : 1) : 0,
            stderr,
            report: line === undefined ? undefined : (JSON.parse(line.slice('@@report '.length)) as Report),
            ms: Date.now() - started,
          });
        },
      );
    });
  } finally {
    await control.close();
    await redis.stop();
  }
}

/** What the limit-3 route answers a denied request: 3 counts at the start of a 60 s window weigh 3 x (1 - t/60 s) in the next, room for one at t = 20 s. */
const RETRY_AFTER_S = 80;

beforeAll(() => {
  ensureFreshDist();
  for (const runtime of ['bun', 'deno'] as const) {
    const { command } = RUNTIMES[runtime];
    const version = spawnSync(command, ['--version'], { encoding: 'utf8' });
    if (version.status !== 0) {
      throw new Error(
        `${command} does not run (${version.stderr || version.error}): npm ci installs ${runtime} from the npm registry, and its postinstall (approved in package.json allowScripts) links the binary`,
      );
    }
  }
}, 120_000);

describe.each(Object.keys(RUNTIMES) as RuntimeName[])('on %s', (runtime) => {
  let run: Run;
  beforeAll(async () => {
    run = await runSuite(runtime);
    // The versions and times behind the support table of docs/runtimes.md.
    console.log(`${runtime} ${run.report?.version}: the suite ran in ${run.ms} ms`);
  }, 120_000);

  test('the suite ran to its end, with no unhandled rejection and no uncaught exception', () => {
    expect({ code: run.code, stderr: run.code === 0 ? '' : run.stderr }).toEqual({ code: 0, stderr: '' });
    expect(run.report?.runtime).toBe(runtime);
    expect(run.report?.troubles).toEqual({ unhandledRejections: [], uncaughtExceptions: [] });
  });

  describe.each(CLIENTS)('over %s', (client) => {
    const cells = (): ClientCells => {
      const found = run.report?.cells[client];
      if (found === undefined) throw new Error(`no report for ${client}`);
      expect(found.setupError).toBeUndefined();
      return found;
    };
    const bound = () => (run.report?.timeoutMs ?? 0) + MARGIN_MS;

    test('core: an exact retryAfterMs, exact counts of 200 concurrent checks, coded failures within timeoutMs while Redis is down, exact again after', () => {
      const { core } = cells();
      expect(core.checks.map(({ allowed, retryAfterMs }) => [allowed, retryAfterMs])).toEqual([
        [true, 0],
        [true, 0],
        [true, 0],
        [false, RETRY_AFTER_S * 1_000],
      ]);
      expect(core.burst).toEqual({ 200: 100, 429: 100 });
      expect(core.counted).toBe(100);
      expect(core.inFlight.slowestMs).toBeLessThan(bound());
      for (const check of core.outage) {
        expect(['SWL_STORE_UNAVAILABLE', 'SWL_TIMEOUT', 'SWL_CIRCUIT_OPEN']).toContain(check.code);
        expect(check.ms).toBeLessThan(bound());
      }
      expect(core.recoveredAfterMs).not.toBeNull();
      expect(core.after).toEqual(core.checks.map(({ allowed, retryAfterMs }) => ({ allowed, retryAfterMs })));
    });

    describe.each(FRAMEWORKS)('%s', (framework) => {
      const cell = () => cells()[framework];

      test("headers, the client's address from the connection and through one trusted proxy, a 429 with an exact Retry-After", () => {
        const { first, proxied, statuses, denied } = cell();
        expect(first).toMatchObject({ status: 200, body: '{"identifier":"ip:127.0.0.1"}', limit: '3', remaining: '2', retryAfter: null });
        // Quota comes back when the count of this window weighs nothing: at the end of the next one.
        expect(first.reset).toBe(String(1_800_000_000 + 120));
        expect(proxied).toBe('{"identifier":"ip:203.0.113.9"}');
        expect(statuses).toEqual([200, 200, 429]);
        expect(denied).toMatchObject({
          status: 429,
          retryAfter: String(RETRY_AFTER_S),
          body: `{"error":"Too Many Requests","retryAfter":${RETRY_AFTER_S}}`,
          contentType: 'application/json; charset=utf-8',
          limit: '3',
          remaining: '0',
        });
      });

      test('of 200 concurrent requests, exactly the limit (100) allowed and counted', () => {
        expect(cell().burst).toEqual({ 200: 100, 429: 100 });
        expect(cell().counted).toBe(100);
      });

      test('Redis killed: requests in flight and after answered within timeoutMs, 503 after; Redis back: exact counts again', () => {
        const { inFlight, outage, storeFailures, recoveredAfterMs, after } = cell();
        expect(inFlight.slowestMs).toBeLessThan(bound());
        expect(Object.keys(inFlight.statuses).filter((status) => !['200', '503'].includes(status))).toEqual([]);
        expect(outage.map(({ status, body }) => [status, body])).toEqual(Array(3).fill([503, '{"error":"Service Unavailable"}']));
        for (const { ms } of outage) expect(ms).toBeLessThan(bound());
        expect(storeFailures).toBeGreaterThanOrEqual(3);
        expect(recoveredAfterMs).not.toBeNull();
        expect(after).toEqual({ 200: 100, 429: 100 });
      });
    });
  });
});
