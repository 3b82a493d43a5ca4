/**
 * The shape the README's "Project layout" promises, kept by a test: no import circle in
 * src/ (type-only imports included), no source file over 250 lines, and the README's
 * table of codes equal to the codes the package uses.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { CODES } from '../src/errors';

const root = resolve(__dirname, '..');
const src = join(root, 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? sourceFiles(join(dir, entry.name)) : entry.name.endsWith('.ts') ? [join(dir, entry.name)] : [],
  );
}

/** The src/ files a file imports, by path relative to src/. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const targets: string[] = [];
  for (const match of text.matchAll(/(?:from|import)\s+'(\.{1,2}\/[^']*)'/g)) {
    const target = resolve(dirname(file), match[1]);
    const candidates = [`${target}.ts`, join(target, 'index.ts')];
    const found = candidates.find((candidate) => files.includes(candidate));
    if (found === undefined) throw new Error(`${relative(src, file)} imports ${match[1]}, which is not a file in src/`);
    targets.push(found);
  }
  return targets;
}

const files = sourceFiles(src);

test('the import graph of src/ has no circle', () => {
  const graph = new Map(files.map((file) => [file, importsOf(file)]));
  const state = new Map<string, 'visiting' | 'done'>();
  const circles: string[] = [];
  const visit = (file: string, path: string[]): void => {
    if (state.get(file) === 'done') return;
    if (state.get(file) === 'visiting') {
      circles.push([...path.slice(path.indexOf(file)), file].map((f) => relative(src, f)).join(' -> '));
      return;
    }
    state.set(file, 'visiting');
    for (const target of graph.get(file) ?? []) visit(target, [...path, file]);
    state.set(file, 'done');
  };
  for (const file of files) visit(file, []);
  expect(circles).toEqual([]);
});

test('no file in src/ is over 250 lines', () => {
  const long = files
    .map((file) => ({ file: relative(src, file), lines: readFileSync(file, 'utf8').split('\n').length - 1 }))
    .filter(({ lines }) => lines > 250);
  expect(long).toEqual([]);
});

test('the README lists every error and warning code, and no other', () => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const listed = [...readme.matchAll(/^\| `(SWL_[A-Z0-9_]+)`\s*\|/gm)].map((match) => match[1]);
  expect(listed.sort()).toEqual(Object.keys(CODES).sort());
});
