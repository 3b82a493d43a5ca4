import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { AggregationTemporality, MetricReader, type SumMetricData } from '@opentelemetry/sdk-metrics';
import type { Redis } from 'ioredis';
import request from 'supertest';
import { createApp as createLoginAndPlansApp } from '../examples/login-and-plans';
import { createMetricsApp } from '../examples/metrics';
import { createOpenTelemetryApp } from '../examples/opentelemetry';
import { createShadowApp } from '../examples/shadow';
import { RedisStore } from '../src';
import { freePort } from '../support/redis-server';
import { redisClient, redisUrl, uniquePrefix } from './helpers/redis';

const run = promisify(execFile);

describe('examples', () => {
  let client: Redis;
  beforeAll(() => {
    client = redisClient();
  });
  afterAll(() => client.quit());

  test('metrics example counts allowed, denied and near-limit decisions on /metrics', async () => {
    const app = createMetricsApp(new RedisStore({ client }), 10, uniquePrefix('metrics'));
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
    const failure = await run('npm', ['run', '--silent', 'demo'], { env: { ...process.env, REDIS_URL: url }, timeout: 30_000 }).then(
      () => undefined,
      (error: { code?: number; killed?: boolean; stderr?: string; stdout?: string }) => error,
    );
    expect(failure).toMatchObject({ code: 1, killed: false, stdout: '' });
    const lines = (failure?.stderr ?? '').trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^demo: cannot reach Redis at redis:\/\/127\.0\.0\.1:\d+ \(connect ECONNREFUSED [^)]*\): start redis-server, or unset REDIS_URL/,
    );
    // ts-node's start-up is most of it; ioredis's retries (every 2 s) would be well past this.
    expect(Date.now() - started).toBeLessThan(20_000);
  }, 30_000);
});
