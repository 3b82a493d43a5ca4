/**
 * The runtime suite (`npm run test:runtimes`): the package on Bun and Deno, from the npm
 * registry's `bun` and `deno` packages, and on Node for comparison (test/runtimes/). One file;
 * it starts, kills and restarts its own redis-server, and measures how long answers take while
 * Redis is down, so it runs alone rather than beside the other projects.
 *
 * @jest-config-loader-options {"transpileOnly": true}
 */
import type { Config } from 'jest';
import { common } from './jest.config';

const config: Config = {
  maxWorkers: 1,
  testTimeout: 30_000,
  projects: [
    {
      ...common,
      displayName: 'runtimes',
      testMatch: ['<rootDir>/test/runtimes/**/*.test.ts'],
      setupFilesAfterEnv: ['<rootDir>/test/helpers/setup-faults.ts'],
      globalSetup: '<rootDir>/test/helpers/global-setup-faults.ts',
    },
  ],
};

export default config;
