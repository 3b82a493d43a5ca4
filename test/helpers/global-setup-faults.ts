/** Global setup of the `faults` project (jest.faults.config.ts): its files start their own servers, so it only checks that they can. */
import { exitUnlessRedisInstalled } from './global-setup';

export default function globalSetup(): void {
  exitUnlessRedisInstalled();
}
