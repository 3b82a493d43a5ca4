import type { Config } from 'jest';

const config: Config = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  // Fault-injection tests start and kill their own servers: `npm run test:faults` (jest.faults.config.ts).
  testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/faults/'],
  globalSetup: '<rootDir>/test/helpers/global-setup.ts',
  globalTeardown: '<rootDir>/test/helpers/global-teardown.ts',
  transform: { '^.+\\.ts$': 'ts-jest' },
  testTimeout: 30_000,
};

export default config;
