/**
 * Process-level observers: unhandled rejections, heap and event-loop delay.
 */
import { readFileSync } from 'node:fs';
import { monitorEventLoopDelay, PerformanceObserver, performance } from 'node:perf_hooks';
import v8 from 'node:v8';
import vm from 'node:vm';

/**
 * Jest gives each test file its own copy of `process`, whose events the real process
 * never emits: a listener added with `process.on` there would never be called. The
 * worker's real process is reached through `vm.runInThisContext`, and the listener is
 * put there (Jest also fails a test on an unhandled rejection by itself; this listener
 * makes the count an explicit assertion).
 */
export function watchUnhandledRejections(): { readonly reasons: unknown[]; stop(): void } {
  const real = vm.runInThisContext('process') as NodeJS.Process;
  const reasons: unknown[] = [];
  const listener = (reason: unknown): void => {
    reasons.push(reason);
  };
  real.on('unhandledRejection', listener);
  if (real !== process) process.on('unhandledRejection', listener);
  return {
    reasons,
    stop() {
      real.off('unhandledRejection', listener);
      if (real !== process) process.off('unhandledRejection', listener);
    },
  };
}

export interface LoopDelayMonitor {
  /** Largest event-loop delay seen, in milliseconds. */
  maxMs(): number;
  /** The 99th percentile, in milliseconds. */
  p99Ms(): number;
  stop(): void;
}

/** Event-loop delay sampled every 10 ms by `perf_hooks.monitorEventLoopDelay`. */
export function monitorLoopDelay(): LoopDelayMonitor {
  const histogram = monitorEventLoopDelay({ resolution: 10 });
  histogram.enable();
  return {
    maxMs: () => histogram.max / 1e6,
    p99Ms: () => histogram.percentile(99) / 1e6,
    stop: () => histogram.disable(),
  };
}

/**
 * Unhandled rejections and event-loop delay, watched during each test of the calling block: call
 * it in a `describe` (or at the top of a file) after the hooks that set a test up, so that the
 * watch starts with the test's body and stops after it. `rejections.reasons` and
 * `loopDelay.maxMs()` are those of the current test.
 */
export function watchEachTest(): {
  readonly rejections: { readonly reasons: unknown[] };
  readonly loopDelay: Pick<LoopDelayMonitor, 'maxMs'>;
} {
  let rejections: ReturnType<typeof watchUnhandledRejections> | undefined;
  let loopDelay: LoopDelayMonitor | undefined;
  beforeEach(() => {
    rejections = watchUnhandledRejections();
    loopDelay = monitorLoopDelay();
  });
  afterEach(() => {
    rejections?.stop();
    loopDelay?.stop();
  });
  return {
    rejections: {
      get reasons() {
        return rejections!.reasons;
      },
    },
    loopDelay: { maxMs: () => loopDelay!.maxMs() },
  };
}

/** Samples `heapUsed` every `everyMs` and keeps the peak. */
export function sampleHeap(everyMs = 1_000): { samples: number[]; peak(): number; stop(): void } {
  const samples: number[] = [process.memoryUsage().heapUsed];
  const timer = setInterval(() => samples.push(process.memoryUsage().heapUsed), everyMs);
  return {
    samples,
    peak: () => Math.max(...samples),
    stop: () => clearInterval(timer),
  };
}

export function mb(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

/**
 * Event-loop stalls with their time, from a 10 ms interval's drift, and V8's
 * garbage-collection pauses (perf_hooks `gc` entries), so that a stall can be told
 * apart from a collection that happened during it.
 */
export function recordStalls(thresholdMs = 20): {
  /** Stalls longer than the threshold: start (performance.now()) and length, minus the 10 ms period. */
  readonly stalls: { start: number; ms: number }[];
  readonly gcs: { start: number; ms: number }[];
  /** Milliseconds of garbage collection inside [start, start + ms]. */
  gcWithin(start: number, ms: number): number;
  stop(): void;
} {
  const stalls: { start: number; ms: number }[] = [];
  const gcs: { start: number; ms: number }[] = [];
  let last = performance.now();
  const timer = setInterval(() => {
    const now = performance.now();
    if (now - last - 10 > thresholdMs) stalls.push({ start: last, ms: now - last - 10 });
    last = now;
  }, 10);
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) gcs.push({ start: entry.startTime, ms: entry.duration });
  });
  observer.observe({ entryTypes: ['gc'] });
  return {
    stalls,
    gcs,
    gcWithin(start, ms) {
      let total = 0;
      for (const gc of gcs) {
        const overlap = Math.min(start + ms, gc.start + gc.ms) - Math.max(start, gc.start);
        if (overlap > 0) total += overlap;
      }
      return total;
    },
    stop() {
      clearInterval(timer);
      observer.disconnect();
    },
  };
}

/**
 * heapUsed after a full garbage collection: what is actually retained. `gc` is not
 * exposed without `--expose-gc`; the flag can still be set at run time, and a function
 * compiled after that (in a fresh context) sees `gc`.
 */
export function retainedHeap(): number {
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as () => void;
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

/**
 * CPU time of this process's main thread so far, in ms: Linux's schedstat, in nanoseconds;
 * elsewhere, the whole process's (`process.cpuUsage`). Unlike the process's, it leaves out what
 * V8's helper threads (concurrent marking, parallel scavenges) do on the other cores meanwhile.
 */
export function mainThreadCpuMs(): number {
  try {
    return Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;
  } catch {
    const { user, system } = process.cpuUsage();
    return (user + system) / 1_000;
  }
}
