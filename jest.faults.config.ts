import type { Config } from 'jest';

/**
 * Fault-injection tests (`npm run test:faults`): Redis killed, slowed, flushed and
 * resharded under load, a soak of the MemoryStore, hostile input over real HTTP.
 *
 * Unlike jest.config.ts there is no global setup: every test file starts (and kills) its
 * own redis-server processes. Files run one at a time (`maxWorkers: 1`) because they
 * measure latencies, heap and event-loop delay, which a neighbouring file hammering the
 * two cores would distort. The soak lasts SOAK_SECONDS (default 60).
 */
const config: Config = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  roots: ['<rootDir>/test/faults'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.ts$': 'ts-jest' },
  maxWorkers: 1,
  testTimeout: 120_000,
};

export default config;
