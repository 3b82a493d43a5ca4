/**
 * Fault-injection tests (`npm run test:faults`): Redis killed, slowed, flushed and
 * resharded under load, a soak of the MemoryStore, hostile input over real HTTP.
 *
 * The `faults` project has no global setup: every test file starts (and kills) its own
 * redis-server processes. Files run one at a time (`maxWorkers: 1`) because they measure
 * latencies, heap and event-loop delay, which a neighbouring file hammering the two cores
 * would distort: that, and its timeout, are options of a whole run, hence a config of its
 * own rather than a fourth project of jest.config.ts. The soak lasts SOAK_SECONDS (default 60).
 *
 * @jest-config-loader-options {"transpileOnly": true}
 */
import type { Config } from 'jest';
import { common } from './jest.config';

const config: Config = {
  maxWorkers: 1,
  testTimeout: 120_000,
  projects: [
    {
      ...common,
      displayName: 'faults',
      testMatch: ['<rootDir>/test/faults/**/*.test.ts'],
      setupFilesAfterEnv: ['<rootDir>/test/helpers/setup-faults.ts'],
      globalSetup: '<rootDir>/test/helpers/global-setup-faults.ts',
    },
  ],
};

export default config;
