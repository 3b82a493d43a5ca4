/** setupFilesAfterEnv of the `redis` project (jest.config.ts): see test/helpers/projects.ts. */
import { prepareTestFile } from './projects';

prepareTestFile('redis');
