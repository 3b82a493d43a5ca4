/**
 * `RedisStore.close()`: it removes what the stores made on their client (shared by the stores on
 * one client, removed with the last), a check after it fails coded, and a process whose stores
 * are closed and whose clients have quit exits on its own.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';
import { redisUrl } from '../../helpers/redis';

test('a process with closed stores over ioredis and node-redis exits on its own once the clients quit', async () => {
  const child = spawn(
    process.execPath,
    ['-r', 'ts-node/register/transpile-only', join(__dirname, 'fixtures/closing-stores.ts'), redisUrl()],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, TS_NODE_PROJECT: join(__dirname, '../../../tsconfig.json') },
    },
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
  const [code, signal] = (await once(child, 'exit')) as [number | null, string | null];
  clearTimeout(timer);
  expect(signal).toBeNull();
  expect(code).toBe(0);
  const report = JSON.parse(output) as {
    before: Record<string, number>;
    withStores: Record<string, number>;
    halfClosed: Record<string, number>;
    after: Record<string, number>;
    afterClose: string;
  };
  // The stores listen on each client, and one closed store of two leaves the shared listeners be.
  expect(report.withStores.ioredis).toBeGreaterThan(report.before.ioredis);
  expect(report.withStores.nodeRedis).toBeGreaterThan(report.before.nodeRedis);
  expect(report.halfClosed).toEqual(report.withStores);
  expect(report.after).toEqual(report.before);
  expect(report.afterClose).toBe('SWL_STORE_UNAVAILABLE');
}, 30_000);
