/** setupFilesAfterEnv of the `faults` project (jest.config.ts): see test/helpers/projects.ts. */
import { prepareTestFile } from './projects';

prepareTestFile('faults');
