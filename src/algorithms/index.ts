import { fixedWindow } from './fixed-window';
import { slidingLog } from './sliding-log';
import { slidingWindow } from './sliding-window';
import type { Algorithm, AlgorithmName } from './types';

/** Every algorithm by name. */
export const algorithms: Record<AlgorithmName, Algorithm> = {
  'sliding-window': slidingWindow as Algorithm,
  'fixed-window': fixedWindow as Algorithm,
  'sliding-log': slidingLog as Algorithm,
};

export type { Algorithm, AlgorithmName, RawReply, Tier } from './types';
