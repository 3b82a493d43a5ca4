/**
 * `npm test` runs the three projects below; `npm run test:unit`, `test:redis` one of them
 * (`jest --selectProjects <name>`). Which file runs where, and why: test/helpers/projects.ts.
 *
 * - `unit`: no Redis. No global setup: nothing is started, and the run needs no redis-server on
 *   the PATH. The files that need no Redis (`*.unit.test.ts`), and the MemoryStore half of
 *   the files that run on each store (`*.each-store.test.ts`).
 * - `redis`: the global setup starts a standalone redis-server and a three-master cluster on
 *   free ports (never a server you run). The Redis half of `*.each-store.test.ts`, and the files that
 *   need Redis.
 * - `package`: the packed tarball installed in temporary apps (no Redis, ~35 s).
 *
 * A project's global setup runs only when a file of that project runs. Fault-injection tests
 * start and kill their own servers: `npm run test:faults` (jest.faults.config.ts).
 *
 * Loaded without type checking (a second off the start of every run): `npm run typecheck`
 * checks this file.
 *
 * @jest-config-loader-options {"transpileOnly": true}
 */
import type { Config } from 'jest';
import { NOT_REDIS_PATTERNS, UNIT_PATTERNS } from './test/helpers/projects';

/** What every project shares. */
export const common = {
  rootDir: __dirname,
  roots: ['<rootDir>/test'],
  preset: 'ts-jest',
  testEnvironment: 'node',
  transform: { '^.+\\.ts$': 'ts-jest' },
  // A global looked up in a test file's context (Jest's `vm` sandbox) costs a call into
  // C++, some thirty times a plain lookup: handed to each module as a parameter instead, the
  // MemoryStore's million-identifier test runs in 3 s rather than 7. Only globals nothing
  // replaces: not Date or the timers, which fake timers swap.
  sandboxInjectedGlobals: [
    'Math',
    'Number',
    'Array',
    'Object',
    'String',
    'Map',
    'Set',
    'Promise',
    'JSON',
    'Error',
    'TypeError',
    'BigInt',
    'Symbol',
  ],
} satisfies Config;

const config: Config = {
  testTimeout: 30_000,
  projects: [
    {
      ...common,
      displayName: 'unit',
      testMatch: UNIT_PATTERNS.map((pattern) => `<rootDir>/test/${pattern}`),
      setupFilesAfterEnv: ['<rootDir>/test/helpers/setup-unit.ts'],
    },
    {
      ...common,
      displayName: 'redis',
      testMatch: ['<rootDir>/test/**/*.test.ts'],
      testPathIgnorePatterns: ['/node_modules/', ...NOT_REDIS_PATTERNS],
      setupFilesAfterEnv: ['<rootDir>/test/helpers/setup-redis.ts'],
      globalSetup: '<rootDir>/test/helpers/global-setup.ts',
      globalTeardown: '<rootDir>/test/helpers/global-teardown.ts',
    },
    {
      ...common,
      displayName: 'package',
      testMatch: ['<rootDir>/test/package/**/*.test.ts'],
      // No Redis either: set up as the unit project's files are.
      setupFilesAfterEnv: ['<rootDir>/test/helpers/setup-unit.ts'],
    },
  ],
};

export default config;
