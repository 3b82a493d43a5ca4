import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = resolve(__dirname, '..');

describe('published package', () => {
  let dir: string;
  beforeAll(async () => {
    await run(process.execPath, [join(root, 'scripts/build.mjs')], { cwd: root });
    dir = mkdtempSync(join(tmpdir(), 'swl-package-'));
    mkdirSync(join(dir, 'node_modules'));
    symlinkSync(root, join(dir, 'node_modules', 'sliding-window-limiter'));
  }, 120_000);
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('ships compiled JavaScript with .d.ts types for each entry point', () => {
    for (const entry of ['index', 'express', 'fastify']) {
      expect(existsSync(join(root, 'dist', `${entry}.js`))).toBe(true);
      expect(existsSync(join(root, 'dist', `${entry}.d.ts`))).toBe(true);
    }
  });

  const script = `
    const d = await (limiter => limiter.check('a'))(root.createLimiter({ limit: 1, window: '1s' }));
    console.log([typeof root.createLimiter, typeof root.byIp, typeof express.rateLimit, typeof fastify.rateLimitPlugin, typeof express.byIp, typeof fastify.byApiKey, d.allowed].join(' '));
  `;

  test('works with import (ES modules)', async () => {
    writeFileSync(
      join(dir, 'main.mjs'),
      `import * as root from 'sliding-window-limiter';
       import * as express from 'sliding-window-limiter/express';
       import * as fastify from 'sliding-window-limiter/fastify';
       ${script}`,
    );
    const { stdout } = await run(process.execPath, ['main.mjs'], { cwd: dir });
    expect(stdout.trim()).toBe('function function function function function function true');
  });

  test('works with require (CommonJS)', async () => {
    writeFileSync(
      join(dir, 'main.cjs'),
      `const root = require('sliding-window-limiter');
       const express = require('sliding-window-limiter/express');
       const fastify = require('sliding-window-limiter/fastify');
       (async () => { ${script} })();`,
    );
    const { stdout } = await run(process.execPath, ['main.cjs'], { cwd: dir });
    expect(stdout.trim()).toBe('function function function function function function true');
  });
});
