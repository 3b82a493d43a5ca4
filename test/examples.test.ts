import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import { AggregationTemporality, MetricReader, type SumMetricData } from '@opentelemetry/sdk-metrics';
import type { Redis } from 'ioredis';
import request from 'supertest';
import { createApp as createConcurrencyApp } from '../examples/concurrency';
import { type Completion, type CompletionRequest, createApp as createLlmProxyApp } from '../examples/llm-proxy';
import { createApp as createLoginAndPlansApp } from '../examples/login-and-plans';
import { createMetricsApp } from '../examples/metrics';
import { createOpenTelemetryApp } from '../examples/opentelemetry';
import { createPartnerClient, PartnerBusyError } from '../examples/outbound-client';
import { createShadowApp } from '../examples/shadow';
import { type Decision, RedisStore } from '../src';
import { freePort } from '../support/redis-server';
import { manualClock, redisClient, redisUrl, uniquePrefix } from './helpers/redis';
import { rejectionOf } from './helpers/thrown';

const run = promisify(execFile);

/** Polls `read` every 10 ms until it answers `expected`, for at most `ms`; answers what it read last. */
async function eventually<T>(read: () => Promise<T> | T, expected: T, ms = 2_000): Promise<T> {
  const deadline = Date.now() + ms;
  let value = await read();
  while (value !== expected && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    value = await read();
  }
  return value;
}

/** A promise and the function that resolves it. */
function deferred<T>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((settle) => {
    resolve = settle;
  });
  return { promise, resolve };
}

describe('examples', () => {
  let client: Redis;
  beforeAll(() => {
    client = redisClient();
  });
  afterAll(() => client.quit());

  test('metrics example counts allowed, denied and near-limit decisions on /metrics', async () => {
    const app = createMetricsApp(new RedisStore({ client }), 10, uniquePrefix('metrics'));
    // The example counts on Redis's clock over 10 s windows: 12 requests that straddle a window
    // turn see their counts decay a little, and a ratio of 0.9 becomes 0.8997. Start clear of one.
    const WINDOW_MS = 10_000;
    const toTurn = WINDOW_MS - (Date.now() % WINDOW_MS);
    if (toTurn < 2_000) await new Promise((resolve) => setTimeout(resolve, toTurn + 100));
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) statuses.push((await request(app).get('/')).status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(10);
    expect(statuses.filter((s) => s === 429)).toHaveLength(2);
    const metrics = (await request(app).get('/metrics')).text;
    expect(metrics).toMatch(/rate_limit_decisions_total\{result="allowed"\} 10/);
    expect(metrics).toMatch(/rate_limit_decisions_total\{result="denied"\} 2/);
    // ratios 0.9 and 1.0 (the 9th and 10th allowed) and 1.0 for both denials fall in the band
    expect(metrics).toMatch(/rate_limit_near_limit_total\{result="allowed"\} 2/);
    expect(metrics).toMatch(/rate_limit_near_limit_total\{result="denied"\} 2/);
  });

  test('OpenTelemetry example: the decision counter shows 10 allowed, 1 denied by Redis, 1 from the deny cache', async () => {
    class TestReader extends MetricReader {
      protected override async onForceFlush(): Promise<void> {}
      protected override async onShutdown(): Promise<void> {}
    }
    const reader = new TestReader({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
    const prefix = uniquePrefix('otel');
    const app = createOpenTelemetryApp(new RedisStore({ client }), reader, 10, prefix);
    for (let i = 0; i < 12; i++) await request(app).get('/');
    const { resourceMetrics } = await reader.collect();
    const decisions = resourceMetrics.scopeMetrics
      .flatMap((scope) => scope.metrics)
      .find((metric) => metric.descriptor.name === 'ratewarden.decisions') as SumMetricData;
    const byOutcome = Object.fromEntries(decisions.dataPoints.map((point) => [point.attributes['ratewarden.outcome'], point.value]));
    expect(byOutcome).toEqual({ allowed: 10, denied: 1, cached_denial: 1 });
    expect(decisions.dataPoints.every((point) => point.attributes['ratewarden.prefix'] === prefix)).toBe(true);
  });

  test('shadow example: the enforced limit refuses, the stricter shadow limit only counts its would-be denials', async () => {
    const app = createShadowApp(new RedisStore({ client }), uniquePrefix('shadow'));
    const responses: request.Response[] = [];
    for (let i = 0; i < 12; i++) responses.push(await request(app).get('/'));
    // Enforced: 10 per 10 s. The shadow limit (5 per 10 s) refuses nothing and sends no headers.
    expect(responses.map((response) => response.status)).toEqual([...Array(10).fill(200), 429, 429]);
    expect(responses.map((response) => response.headers['x-ratelimit-limit'])).toEqual(Array(12).fill('10'));
    const metrics = (await request(app).get('/metrics')).text;
    // The shadow limiter saw all 12: 5 within its limit, 7 it would have refused.
    expect(metrics).toMatch(/^rate_limit_shadow_would_deny_total 7$/m);
    expect(metrics).toMatch(/^rate_limit_denied_total 2$/m);
  });

  test('login example: five wrong passwords, then 429; successful logins count nothing', async () => {
    const { app, login } = createLoginAndPlansApp(new RedisStore({ client }), uniquePrefix('login'));
    const attempt = (password: string) => request(app).post('/login').send({ password });
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await attempt('guess')).status);
    for (let i = 0; i < 3; i++) expect((await attempt('correct horse')).status).toBe(200);
    // A success is given back once its response is over: wait (bounded) for the count to show 4 again.
    const counted = async () => (await login.limiter.peek('ip:127.0.0.1', { cost: 0 })).estimated;
    const deadline = Date.now() + 2_000;
    while ((await counted()) !== 4 && Date.now() < deadline);
    expect(await counted()).toBe(4);
    statuses.push((await attempt('guess')).status, (await attempt('guess')).status);
    expect(statuses).toEqual([401, 401, 401, 401, 401, 429]);
  });

  test('plans example: each API key gets the limit of its plan, in the headers', async () => {
    const { app } = createLoginAndPlansApp(new RedisStore({ client }), uniquePrefix('plans'));
    const free = await request(app).get('/api/data').set('x-api-key', 'free-key').expect(200);
    expect(free.headers['x-ratelimit-limit']).toBe('100');
    expect(free.headers['ratelimit-policy']).toBe('"default";q=100;w=60');
    const pro = await request(app).get('/api/data').set('x-api-key', 'pro-key').expect(200);
    expect(pro.headers['x-ratelimit-limit']).toBe('1000');
    expect(pro.headers['x-ratelimit-remaining']).toBe('999');
  });

  describe('LLM proxy example: tokens per API key per minute, reserved on arrival and settled after', () => {
    /** The identifier byApiKey() gives an API key (documented: `key:` and 32 hex digits of its SHA-256). */
    const identifierOf = (apiKey: string) => `key:${createHash('sha256').update(apiKey).digest('hex').slice(0, 32)}`;
    /** An upstream that uses as many tokens as the prompt says. */
    const upstream = async ({ prompt }: CompletionRequest): Promise<Completion> => ({
      text: 'ok',
      usage: { total_tokens: Number(prompt) },
    });

    test('gives back what a completion did not use, charges what it used past its reservation, and the debt makes the next request wait exactly', async () => {
      const clock = manualClock(1_700_000_040_000); // the start of a minute
      const { app, tokens } = createLlmProxyApp(new RedisStore({ client }), {
        prefix: uniquePrefix('llm'),
        tokensPerMinute: 1000,
        upstream,
        clock: clock.now,
      });
      const used = async () => (await tokens.limiter.peek(identifierOf('k1'), { cost: 0 })).estimated;
      const complete = (tokensUsed: number, maxTokens: number) =>
        request(app)
          .post('/v1/completions')
          .set('x-api-key', 'k1')
          .send({ prompt: String(tokensUsed), max_tokens: maxTokens });

      // Reserve 800, use 100: the headers show the reservation, the settlement gives 700 back.
      const first = await complete(100, 800);
      expect(first.status).toBe(200);
      expect(first.headers['x-ratelimit-remaining']).toBe('200');
      expect(await eventually(used, 100)).toBe(100);

      // Reserve 800, use 1000: the response is sent all the same, and 200 more are charged after it.
      const second = await complete(1000, 800);
      expect(second.status).toBe(200);
      expect(second.body.usage.total_tokens).toBe(1000);
      expect(await eventually(used, 1100)).toBe(1100);

      // 1100 of 1000 used: the next request waits until the debt has decayed, exactly.
      const refused = await complete(1, 1);
      expect(refused.status).toBe(429);
      const retryAfterMs = (await tokens.limiter.peek(identifierOf('k1'))).retryAfterMs;
      expect(retryAfterMs).toBeGreaterThan(60_000);
      expect(refused.headers['retry-after']).toBe(String(Math.ceil(retryAfterMs / 1000)));
      clock.advance(retryAfterMs - 1);
      expect((await complete(1, 1)).status).toBe(429);
      clock.advance(1);
      expect((await complete(1, 1)).status).toBe(200);
    });

    test('a client that went away is still charged what the upstream used', async () => {
      const upstreamDone = deferred<void>();
      const slowUpstream = async (completion: CompletionRequest): Promise<Completion> => {
        await upstreamDone.promise;
        return upstream(completion);
      };
      // A fixed clock: on Redis's, a minute turning during the test would decay the exact counts below.
      const clock = manualClock(1_700_000_040_000);
      const { app, tokens } = createLlmProxyApp(new RedisStore({ client }), {
        prefix: uniquePrefix('llm'),
        upstream: slowUpstream,
        clock: clock.now,
      });
      const used = async () => (await tokens.limiter.peek(identifierOf('k2'), { cost: 0 })).estimated;
      const server = app.listen(0, '127.0.0.1');
      await once(server, 'listening');
      try {
        const { port } = server.address() as AddressInfo;
        const body = JSON.stringify({ prompt: '300', max_tokens: 50 });
        const call = httpRequest({
          port,
          method: 'POST',
          path: '/v1/completions',
          headers: { 'content-type': 'application/json', 'x-api-key': 'k2' },
        });
        call.on('error', () => undefined); // the abort below
        call.end(body);
        expect(await eventually(used, 50)).toBe(50); // reserved on arrival
        call.destroy(); // the client goes away before the answer
        await new Promise((resolve) => setTimeout(resolve, 50));
        expect(await used()).toBe(50); // nothing settled yet: the upstream is still at work
        upstreamDone.resolve();
        expect(await eventually(used, 300)).toBe(300);
      } finally {
        server.close();
      }
    });

    test('a max_tokens above the budget is a 400, counted nowhere', async () => {
      const { app, tokens } = createLlmProxyApp(new RedisStore({ client }), {
        prefix: uniquePrefix('llm'),
        tokensPerMinute: 1000,
        upstream,
      });
      const response = await request(app).post('/v1/completions').set('x-api-key', 'k3').send({ prompt: '1', max_tokens: 1001 });
      expect(response.status).toBe(400);
      expect((await tokens.limiter.peek(identifierOf('k3'), { cost: 0 })).estimated).toBe(0);
    });
  });

  test('concurrency example: two reports in progress per API key, the third refused without Retry-After and counted in no rate tier', async () => {
    const renders = new Map<string, (report: string) => void>();
    const render = (id: string) => new Promise<string>((resolve) => renders.set(id, resolve));
    const app = await createConcurrencyApp(new RedisStore({ client }), uniquePrefix('concurrency'), render);
    await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const get = (id: string, apiKey = 'a') => request(app.server).get(`/reports/${id}`).set('x-api-key', apiKey);
      const first = get('1').then((response) => response);
      const second = get('2').then((response) => response);
      expect(await eventually(() => renders.size, 2)).toBe(2);

      const third = await Promise.race([
        get('3'),
        eventually(() => renders.has('3'), true).then(() => Promise.reject(new Error('a third report was let in'))),
      ]);
      expect(third.status).toBe(429);
      expect(third.headers['retry-after']).toBeUndefined();
      expect(third.body.error).toMatch(/in progress/);
      expect(third.headers['ratelimit-policy']).toBe('"minute";q=60;w=60, "inflight";q=2;qu="concurrent-requests"');
      // Two of the minute's 60 used: the refused request counted nothing.
      expect(third.headers.ratelimit).toMatch(/^"minute";r=58;t=\d+, "inflight";r=0$/);
      expect(renders.has('3')).toBe(false);

      // Another API key has slots of its own.
      const other = get('b1', 'b').then((response) => response);
      expect(await eventually(() => renders.has('b1'), true)).toBe(true);
      renders.get('b1')?.('b1 done');
      expect((await other).status).toBe(200);

      // When a report is done, its slot comes back: a new one is let in.
      renders.get('1')?.('report 1');
      expect((await first).status).toBe(200);
      // Its slot is released when its response is over, a moment after the client has it: retry a refusal (bounded).
      let fourth = get('4').then((response) => response);
      const deadline = Date.now() + 2_000;
      while (!renders.has('4') && Date.now() < deadline) {
        const status = await Promise.race([fourth.then((response) => response.status), eventually(() => renders.has('4'), true, 100)]);
        if (status === 429) fourth = get('4').then((response) => response);
      }
      expect(renders.has('4')).toBe(true);
      renders.get('4')?.('report 4');
      renders.get('2')?.('report 2');
      const [fourthResponse, secondResponse] = await Promise.all([fourth, second]);
      expect([secondResponse.status, fourthResponse.status]).toEqual([200, 200]);
      expect(fourthResponse.body).toEqual({ report: 'report 4' });
      expect(fourthResponse.headers.ratelimit).toMatch(/^"minute";r=57;t=\d+, "inflight";r=0$/);
    } finally {
      for (const finish of renders.values()) finish('cancelled');
      await app.close();
    }
  });

  test('outbound client example: two processes share one limit, sleeping exactly; a wait past maxWaitMs fails at once', async () => {
    const prefix = uniquePrefix('partner');
    const other = redisClient();
    try {
      const sent: number[] = [];
      const options = { limit: 5, window: '400ms', prefix, send: async (n: number) => sent.push(n) };
      // Two processes: each its own Redis connection, store and limiter.
      const one = createPartnerClient({ ...options, store: new RedisStore({ client }) });
      const two = createPartnerClient({ ...options, store: new RedisStore({ client: other }) });
      const started = Date.now();
      const calls = Array.from({ length: 12 }, (_, n) => (n % 2 === 0 ? one : two).call(n));
      const decisions: Decision[] = (await Promise.all(calls)).map((result) => result.decision);
      const elapsed = Date.now() - started;
      expect(sent.sort((a, b) => a - b)).toEqual(Array.from({ length: 12 }, (_, n) => n));

      // By the store's clock: never more than 5 in any 400 ms, and 12 calls take two windows, not more.
      const times = decisions.map((decision) => decision.now).sort((a, b) => a - b);
      for (let i = 0; i + 5 < times.length; i++) expect(times[i + 5] - times[i]).toBeGreaterThanOrEqual(400);
      expect(times[11] - times[0]).toBeLessThan(1_000);
      expect(elapsed).toBeGreaterThanOrEqual(800);

      // Another account's quota used up at once: a call that may wait 50 ms is told at once that it cannot.
      const busy = createPartnerClient({ ...options, store: new RedisStore({ client }), account: 'account:busy' });
      await Promise.all(Array.from({ length: 5 }, (_, n) => busy.call(100 + n)));
      const impatient = createPartnerClient({ ...options, store: new RedisStore({ client }), account: 'account:busy', maxWaitMs: 50 });
      const asked = Date.now();
      const failure = await rejectionOf(() => impatient.call(200));
      expect(failure).toBeInstanceOf(PartnerBusyError);
      expect((failure as PartnerBusyError).retryAfterMs).toBeGreaterThan(50);
      expect(Date.now() - asked).toBeLessThan(100);
      expect(sent).not.toContain(200);
    } finally {
      await other.quit();
    }
  });

  test('npm run demo prints 200s then 429s and exits', async () => {
    const { stdout } = await run('npm', ['run', '--silent', 'demo'], {
      env: { ...process.env, REDIS_URL: redisUrl() },
      timeout: 60_000,
    });
    const statuses = [...stdout.matchAll(/^#\s*\d+\s+(\d{3})/gm)].map((m) => Number(m[1]));
    expect(statuses.slice(0, 5)).toEqual([200, 200, 200, 200, 200]);
    expect(statuses.slice(5)).toEqual([429, 429, 429]);
    expect(stdout).toMatch(/Retry-After: \d+/);
    expect(stdout).toContain('store: Redis');
  }, 60_000);

  test('npm run demo with nothing listening at REDIS_URL exits 1 with one line, at once', async () => {
    const url = `redis://127.0.0.1:${await freePort()}`;
    const started = Date.now();
    const failure = (await rejectionOf(() =>
      run('npm', ['run', '--silent', 'demo'], { env: { ...process.env, REDIS_URL: url }, timeout: 30_000 }),
    )) as { code?: number; killed?: boolean; stderr?: string; stdout?: string };
    expect(failure).toMatchObject({ code: 1, killed: false, stdout: '' });
    const lines = (failure.stderr ?? '').trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^demo: cannot reach Redis at redis:\/\/127\.0\.0\.1:\d+ \(connect ECONNREFUSED [^)]*\): start redis-server, or unset REDIS_URL/,
    );
    // ts-node's start-up is most of it; ioredis's retries (every 2 s) would be well past this.
    expect(Date.now() - started).toBeLessThan(20_000);
  }, 30_000);
});
