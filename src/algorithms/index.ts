import { fixedWindow } from './fixed-window';
import { preciseWindow } from './precise-window';
import { slidingLog } from './sliding-log';
import { slidingWindow } from './sliding-window';
import { tokenBucket } from './token-bucket';
import type { AlgorithmName, AlgorithmScripts } from './types';

/** Every algorithm's scripts, by name. */
export const ALGORITHMS: Readonly<Record<AlgorithmName, AlgorithmScripts>> = {
  'sliding-window': slidingWindow as AlgorithmScripts,
  'fixed-window': fixedWindow as AlgorithmScripts,
  'sliding-log': slidingLog as AlgorithmScripts,
  'token-bucket': tokenBucket as AlgorithmScripts,
  'precise-window': preciseWindow as AlgorithmScripts,
};

export const ALGORITHM_NAMES = Object.keys(ALGORITHMS) as AlgorithmName[];

export type { AlgorithmName, AlgorithmScripts, RawReply } from './types';
