/**
 * `npm run accuracy`: replays every study trace through the algorithms, prints the
 * results table and writes `docs/accuracy.md` and one `docs/accuracy-<trace>.svg`
 * per trace.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fixedWindow } from '../../src/algorithms/fixed-window';
import { slidingLog } from '../../src/algorithms/sliding-log';
import { slidingWindow } from '../../src/algorithms/sliding-window';
import type { Algorithm } from '../../src/algorithms/types';
import { accuracyDocument } from './document';
import { markdownTable, tracePlot } from './report';
import { simulateTrace, type TraceResult } from './simulate';
import { STUDY_TRACES } from './traces';

const DOCS = join(__dirname, '..', '..', 'docs');

/** The algorithms under test; the library's sliding log is checked against the independent exact log too. */
const ALGORITHMS: readonly Algorithm[] = [slidingWindow as Algorithm, fixedWindow as Algorithm, slidingLog as Algorithm];

function main(): void {
  const started = performance.now();
  mkdirSync(DOCS, { recursive: true });
  const results: TraceResult[] = [];
  for (const makeTrace of STUDY_TRACES) {
    const trace = makeTrace();
    const result = simulateTrace(trace, ALGORITHMS);
    results.push(result);
    const file = `accuracy-${trace.name}.svg`;
    writeFileSync(join(DOCS, file), tracePlot(result));
    console.error(`${trace.name}: ${result.requests.toLocaleString('en-US')} requests in ${(result.elapsedMs / 1000).toFixed(1)} s -> docs/${file}`);
  }
  const seconds = (performance.now() - started) / 1000;
  const table = markdownTable(results);
  console.log(table);
  writeFileSync(join(DOCS, 'accuracy.md'), accuracyDocument(results, table, seconds));
  console.error(`wrote docs/accuracy.md (${seconds.toFixed(1)} s)`);
}

main();
