/**
 * The one way tests catch an expected throw to assert more than one thing of it: take what was
 * thrown (or what a promise rejected with), then assert on it; a call that does not throw fails
 * the test here. A single assertion uses Jest's own `toThrow` or `rejects`.
 */
import { CODES, OptionError } from '../../src';

/** What `act` threw; fails when it returned. */
export function thrownBy(act: () => unknown): unknown {
  try {
    act();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw, but the call returned');
}

/** What the promise of `act` rejected with (or what `act` threw); fails when it resolved. */
export async function rejectionOf(act: () => PromiseLike<unknown>): Promise<unknown> {
  try {
    await act();
  } catch (error) {
    return error;
  }
  throw new Error('expected a rejection, but the promise resolved');
}

/**
 * Asserts that `thrown` is an `OptionError` (a `TypeError`) whose message starts with `option:`
 * and whose code is `code`, or any code of `CODES` when none is given.
 */
export function expectOptionError(thrown: unknown, option: string, code?: string): void {
  expect(thrown).toBeInstanceOf(OptionError);
  expect(thrown).toBeInstanceOf(TypeError);
  expect((thrown as Error).message.startsWith(`${option}:`)).toBe(true);
  if (code === undefined) expect(Object.keys(CODES)).toContain((thrown as OptionError).code);
  else expect((thrown as OptionError).code).toBe(code);
}
