/** setupFilesAfterEnv of the `unit` project (jest.config.ts): see test/helpers/projects.ts. */
import { prepareTestFile } from './projects';

prepareTestFile('unit');
