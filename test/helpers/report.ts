/**
 * Figures a test file reports rather than asserts (latencies, counts after a fault), printed once
 * its tests have run, so that a run's output says what the faults cost.
 */

/**
 * The lines the tests of the calling file push, printed under `title` after they all ran. Call
 * once, at the top level of a test file.
 */
export function figuresPrintedAfterAll(title: string): string[] {
  const figures: string[] = [];
  afterAll(() => console.log(`${title}:\n${figures.join('\n')}`));
  return figures;
}
