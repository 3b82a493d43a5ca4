/**
 * Process warnings (`process.emitWarning`, the package's `SWL_*` codes), captured by the tests
 * that trigger them rather than printed in the middle of the run's output, where they look
 * like failures. Nothing is silenced for good: a test that captures a warning must look at it
 * (read `codes()` or `list`), or it fails.
 */

interface CapturedWarning {
  readonly code: string | undefined;
  readonly message: string;
}

export interface CapturedWarnings {
  /** The warnings emitted so far in the current test, in order. */
  readonly list: readonly CapturedWarning[];
  /** Their codes. */
  codes(): (string | undefined)[];
}

function captured(warning: string | Error, options?: unknown, code?: unknown): CapturedWarning {
  const message = typeof warning === 'string' ? warning : warning.message;
  if (typeof options === 'object' && options !== null) return { code: (options as { code?: string }).code, message };
  if (typeof code === 'string') return { code, message };
  return { code: typeof warning === 'string' ? undefined : (warning as { code?: string }).code, message };
}

/**
 * Captures the process warnings of every test of the calling block (call it in a `describe`, or
 * at the top of a file): Node does not print them, the test reads them. A test that captured a
 * warning and never read `codes()` or `list` fails, naming the warning.
 */
export function captureWarnings(): CapturedWarnings {
  const current: CapturedWarning[] = [];
  let read = false;
  let spy: jest.SpyInstance | undefined;
  beforeEach(() => {
    current.length = 0;
    read = false;
    spy = jest.spyOn(process, 'emitWarning').mockImplementation((warning: string | Error, options?: unknown, code?: unknown) => {
      current.push(captured(warning, options, code));
    });
  });
  afterEach(() => {
    spy?.mockRestore();
    if (current.length > 0 && !read) {
      throw new Error(`warnings captured but not asserted on: ${current.map((warning) => warning.code ?? warning.message).join(', ')}`);
    }
  });
  return {
    get list() {
      read = true;
      return current;
    },
    codes() {
      read = true;
      return current.map((warning) => warning.code);
    },
  };
}
