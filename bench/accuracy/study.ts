/**
 * `npm run accuracy`: replays every study trace through the contestants (see
 * `contestants.ts`), prints the results tables and writes `docs/accuracy.md` and one
 * `docs/accuracy-<trace>.svg` per trace.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PRECISE_LABELS, STUDY_CONTESTANTS } from './contestants';
import { accuracyDocument, type FloodResult } from './document';
import { bucketTable, loadBand, loadBandTable, markdownTable, preciseTable, targetChecks, tracePlot } from './report';
import { floodAdmissions, simulateTrace, type TraceResult } from './simulate';
import { EPOCH, STUDY_TRACES } from './traces';

const DOCS = join(__dirname, '..', '..', 'docs');

function main(): void {
  const started = performance.now();
  mkdirSync(DOCS, { recursive: true });
  const results: TraceResult[] = [];
  for (const makeTrace of STUDY_TRACES) {
    const trace = makeTrace();
    const result = simulateTrace(
      trace,
      STUDY_CONTESTANTS,
      trace.breakdownByLoad === true ? (source) => loadBand(source.offeredLoad) : undefined,
    );
    results.push(result);
    const file = `accuracy-${trace.name}.svg`;
    writeFileSync(join(DOCS, file), tracePlot(result));
    for (const stat of result.stats) {
      if (stat.firstOwnMismatch === undefined) continue;
      const m = stat.firstOwnMismatch;
      console.error(
        `${trace.name}: ${stat.contestant.label} differs from its exact definition on ${stat.ownFalseAllows + stat.ownFalseDenies} requests; first: source ${m.source}, request #${m.index} at ${new Date(m.time).toISOString()} (${m.time}), ${m.allowed ? 'allowed' : 'denied'} with ${m.exactTokens} tokens in the exact bucket`,
      );
    }
    console.error(
      `${trace.name}: ${result.requests.toLocaleString('en-US')} requests in ${(result.elapsedMs / 1000).toFixed(1)} s -> docs/${file}`,
    );
  }
  const seconds = (performance.now() - started) / 1000;
  const table = markdownTable(results);
  console.log(table);
  console.log(`\ntoken bucket:\n${bucketTable(results)}`);
  const precise = preciseTable(results, PRECISE_LABELS);
  console.log(`\nprecise window:\n${precise}`);
  for (const label of PRECISE_LABELS) {
    for (const check of targetChecks(results, label)) {
      console.log(`${label}: ${check.met ? 'met' : 'MISSED'}: ${check.target}; worst ${check.detail} on ${check.trace}`);
    }
  }
  const breakdowns = results.filter((result) => result.groups.size > 0).map((result) => ({ result, table: loadBandTable(result) }));
  for (const { result, table: bands } of breakdowns) console.log(`\n${result.trace.name}, by offered load:\n${bands}`);
  const floods: FloodResult[] = [10, 100].map((limit) => ({
    limit,
    perWindow: new Map(
      STUDY_CONTESTANTS.map((contestant) => [contestant.label, floodAdmissions(contestant, { limit, window: 60_000 }, EPOCH, 10, 7)]),
    ),
  }));
  for (const flood of floods) {
    console.log(
      `\nconstant flood, limit ${flood.limit}: admitted per window ${[...flood.perWindow].map(([name, counts]) => `${name} ${counts.join(',')}`).join('; ')}`,
    );
  }
  writeFileSync(
    join(DOCS, 'accuracy.md'),
    accuracyDocument({ results, table, bucket: bucketTable(results), precise, breakdowns, floods, seconds }),
  );
  console.error(`wrote docs/accuracy.md (${seconds.toFixed(1)} s)`);
}

main();
