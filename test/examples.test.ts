import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import type { Redis } from 'ioredis';
import request from 'supertest';
import { createMetricsApp } from '../examples/metrics';
import { RedisStore } from '../src';
import { redisClient, uniquePrefix } from './helpers/redis';

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

  test('npm run demo prints 200s then 429s and exits', async () => {
    const { stdout } = await run('npm', ['run', '--silent', 'demo'], {
      env: { ...process.env, REDIS_URL: process.env.REDIS_URL },
      timeout: 60_000,
    });
    const statuses = [...stdout.matchAll(/^#\s*\d+\s+(\d{3})/gm)].map((m) => Number(m[1]));
    expect(statuses.slice(0, 5)).toEqual([200, 200, 200, 200, 200]);
    expect(statuses.slice(5)).toEqual([429, 429, 429]);
    expect(stdout).toMatch(/Retry-After: \d+/);
    expect(stdout).toContain('store: Redis');
  }, 60_000);
});
