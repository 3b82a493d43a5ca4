/**
 * The contestants of the accuracy study: an algorithm's scripts at one `precision`, under the
 * label that tables, plots and prose name it by.
 */
import { fixedWindow } from '../../src/algorithms/fixed-window';
import { DEFAULT_PRECISION, preciseWindow } from '../../src/algorithms/precise-window';
import { slidingLog } from '../../src/algorithms/sliding-log';
import { slidingWindow } from '../../src/algorithms/sliding-window';
import { tokenBucket } from '../../src/algorithms/token-bucket';
import type { AlgorithmScripts } from '../../src/algorithms/types';

/** One algorithm at one setting, run on its own state. */
export interface Contestant {
  /** The algorithm's name, followed by its precision when that is not the default: `precise-window, precision 600`. */
  readonly label: string;
  readonly scripts: AlgorithmScripts;
  /** The `precision` passed in the script arguments; only `precise-window` reads it. */
  readonly precision: number;
}

/**
 * A contestant for `scripts`, at `precision` (the limiter's default when absent).
 *
 * @param scripts - the algorithm's scripts, whose TypeScript twins the study runs.
 * @param precision - buckets per window, for `precise-window`.
 */
export function contestant(scripts: AlgorithmScripts, precision: number = DEFAULT_PRECISION): Contestant {
  const label =
    scripts.algorithm === 'precise-window' && precision !== DEFAULT_PRECISION
      ? `${scripts.algorithm}, precision ${precision}`
      : scripts.algorithm;
  return { label, scripts, precision };
}

/** The coarser precisions the study runs `precise-window` at besides its default, finest first. */
export const COARSER_PRECISIONS: readonly number[] = [600, 60];

/**
 * Everything the study runs: each algorithm at its default, and `precise-window` at coarser
 * precisions too, to show what its memory bound (`precision + 1` entries) costs in accuracy.
 */
export const STUDY_CONTESTANTS: readonly Contestant[] = [
  contestant(slidingWindow as AlgorithmScripts),
  contestant(fixedWindow as AlgorithmScripts),
  contestant(slidingLog as AlgorithmScripts),
  contestant(tokenBucket as AlgorithmScripts),
  contestant(preciseWindow as AlgorithmScripts),
  ...COARSER_PRECISIONS.map((precision) => contestant(preciseWindow as AlgorithmScripts, precision)),
];

/** The labels of the `precise-window` contestants, the default first. */
export const PRECISE_LABELS: readonly string[] = STUDY_CONTESTANTS.filter(({ scripts }) => scripts.algorithm === 'precise-window').map(
  ({ label }) => label,
);
