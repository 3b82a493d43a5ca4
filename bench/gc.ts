import { constants, type PerformanceEntry } from 'node:perf_hooks';

/** Whether a perf_hooks `gc` entry is a young-generation collection (a scavenge). */
export function isScavenge(entry: PerformanceEntry): boolean {
  return ((entry as { detail?: unknown }).detail as { kind?: number } | undefined)?.kind === constants.NODE_PERFORMANCE_GC_MINOR;
}
