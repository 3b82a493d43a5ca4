/**
 * A second process for the tests that need one: an app server, or a holder of leases, over
 * its own connection to the harness's Redis. Started by `startAppProcess` (test side) as
 * `node -r ts-node/register/transpile-only test/helpers/app-process.ts '<json>'`; it prints one
 * line, `ready <port>` or `held <epoch ms>`, and runs until killed. Not a test file.
 *
 * - `{ kind: 'express' | 'fastify', redisUrl, prefix, options }`: serves `GET /slow?ms=N`
 *   behind the rate limiter (`options` are its options), answering `{ pid, start, end }`: when
 *   the handler began and finished, in epoch ms, after holding the request for N ms.
 * - `{ kind: 'hold', redisUrl, prefix, options, identifier, count }`: takes `count` leases of
 *   `identifier` through the core, prints when, and never releases them.
 * - `{ kind: 'wait', redisUrl, prefix, options, identifier, count, startAt }`: at `startAt` (epoch
 *   ms), calls `limiter.wait(identifier)` `count` times at once, and prints `waited <json>`: the
 *   `now` of each allowed decision (the store's clock), in the order they were called; then exits.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

export interface AppProcessConfig {
  kind: 'express' | 'fastify' | 'hold' | 'wait';
  redisUrl: string;
  prefix: string;
  /** The limiter's options (JSON: no functions). */
  options: Record<string, unknown>;
  identifier?: string;
  count?: number;
  startAt?: number;
}

export interface AppProcess {
  readonly child: ChildProcess;
  /** The first line's value: the port, when the leases were taken, or when each wait ended. */
  readonly value: number;
  /** The first line's text after its first word. */
  readonly text: string;
  kill(): Promise<void>;
}

/** Starts a process of this file and waits for its first line. */
export async function startAppProcess(config: AppProcessConfig): Promise<AppProcess> {
  const child = spawn(
    process.execPath,
    ['-r', 'ts-node/register/transpile-only', join(__dirname, 'app-process.ts'), JSON.stringify(config)],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, TS_NODE_PROJECT: join(__dirname, '..', '..', 'tsconfig.json') },
    },
  );
  const lines = createInterface({ input: child.stdout! });
  const [line] = (await Promise.race([
    once(lines, 'line'),
    once(child, 'exit').then(([code]) => {
      throw new Error(`app process exited with ${code} before it was ready`);
    }),
  ])) as [string];
  const text = line.slice(line.indexOf(' ') + 1);
  return {
    child,
    value: Number(text),
    text,
    async kill() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = once(child, 'exit');
      child.kill('SIGKILL');
      await exited;
    },
  };
}

async function main(config: AppProcessConfig): Promise<void> {
  const { Redis } = await import('ioredis');
  const client = new Redis(config.redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  client.on('error', () => undefined);
  await once(client, 'ready');
  const { createLimiter, RedisStore } = await import('../../src');
  const store = new RedisStore({ client });
  const options = { store, prefix: config.prefix, ...config.options };

  if (config.kind === 'wait') {
    const limiter = createLimiter(options);
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, (config.startAt ?? 0) - Date.now())));
    const allowedAt = await Promise.all(
      Array.from({ length: config.count ?? 1 }, () => limiter.wait(config.identifier ?? 'u').then((decision) => decision.now)),
    );
    process.stdout.write(`waited ${JSON.stringify(allowedAt)}\n`);
    await client.quit();
    return;
  }

  if (config.kind === 'hold') {
    const limiter = createLimiter(options);
    const at = Date.now();
    for (let i = 0; i < (config.count ?? 1); i++) {
      const decision = await limiter.check(config.identifier ?? 'u');
      if (!decision.allowed) throw new Error(`lease ${i} refused`);
    }
    process.stdout.write(`held ${at}\n`);
    setInterval(() => undefined, 60_000);
    return;
  }

  const hold = async (query: { ms?: string }) => {
    const start = Date.now();
    await new Promise((resolve) => setTimeout(resolve, Number(query.ms ?? 0)));
    return { pid: process.pid, start, end: Date.now() };
  };
  if (config.kind === 'express') {
    const express = (await import('express')).default;
    const { rateLimit } = await import('../../src/express');
    const app = express();
    app.get('/slow', rateLimit(options), (req, res) => {
      hold(req.query as { ms?: string }).then((body) => res.json(body));
    });
    const server = app.listen(0, '127.0.0.1', () => {
      process.stdout.write(`ready ${(server.address() as AddressInfo).port}\n`);
    });
    return;
  }
  const Fastify = (await import('fastify')).default;
  const { rateLimitPlugin } = await import('../../src/fastify');
  const app = Fastify();
  await app.register(rateLimitPlugin, options);
  app.get('/slow', (request) => hold(request.query as { ms?: string }));
  await app.listen({ port: 0, host: '127.0.0.1' });
  process.stdout.write(`ready ${(app.server.address() as AddressInfo).port}\n`);
}

if (require.main === module) {
  main(JSON.parse(process.argv[2]) as AppProcessConfig).catch((error: unknown) => {
    console.error(error);
    process.exit(1);
  });
}
