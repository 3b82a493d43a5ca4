/**
 * The shape ARCHITECTURE.md promises, kept by a test: no import circle in src/ (type-only
 * imports included), no two source files of one name (index.ts and types.ts aside), no
 * measured figure in a source comment (figures live with the benches), no module-level mutable
 * state, no function of the hot path (src/core/, src/http/) with more than four parameters (a
 * request's inputs travel as one object), and no name in ARCHITECTURE.md that the source no longer has.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

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

test('no two files in src/ share a name, index.ts and types.ts aside', () => {
  const byName = new Map<string, string[]>();
  for (const file of files) {
    const name = basename(file);
    if (name === 'index.ts' || name === 'types.ts') continue;
    byName.set(name, [...(byName.get(name) ?? []), relative(src, file)]);
  }
  expect([...byName.values()].filter((paths) => paths.length > 1)).toEqual([]);
});

test('no source comment quotes a measured figure (µs, ms of a run, ratios to bare)', () => {
  const figures = /\d+(?:\.\d+)?\s*(?:µs|us\b)|\b0\.\d+ of bare|\d+(?:\.\d+)?\s*%\s+of\b|\breq(?:uests)?\/s\b/;
  const found: string[] = [];
  for (const file of files) {
    const lines = readFileSync(file, 'utf8').split('\n');
    lines.forEach((line, i) => {
      const comment = /^\s*(?:\/\/|\*|\/\*\*?|--)/.test(line) || line.includes('//');
      if (comment && figures.test(line)) found.push(`${relative(src, file)}:${i + 1}: ${line.trim()}`);
    });
  }
  expect(found).toEqual([]);
});

/**
 * Module-level mutable state: a top-level `let` or `var`, or a `const` holding a new Map, Set or
 * array whose type does not say it is read-only. A warning flag or a cache there would be shared
 * by every limiter of the process; such state belongs to a limiter, a store or a client. A
 * WeakMap keyed by the object whose state it holds (a client, a store, a meter) is that
 * object's state, kept beside it, and allowed.
 */
test('src/ keeps no module-level mutable state', () => {
  const found: string[] = [];
  for (const file of files) {
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest);
    for (const statement of source.statements) {
      if (!ts.isVariableStatement(statement)) continue;
      const { declarationList } = statement;
      const isConst = (declarationList.flags & ts.NodeFlags.Const) !== 0;
      for (const declaration of declarationList.declarations) {
        const name = `${relative(src, file)}: ${declaration.name.getText(source)}`;
        if (!isConst) {
          found.push(`${name} (let or var)`);
          continue;
        }
        const init = declaration.initializer;
        const mutableCollection =
          init !== undefined &&
          ((ts.isNewExpression(init) && /^(Map|Set)$/.test(init.expression.getText(source))) || ts.isArrayLiteralExpression(init));
        const readonlyType = declaration.type !== undefined && /^(Readonly|readonly )/.test(declaration.type.getText(source));
        if (mutableCollection && !readonlyType) found.push(`${name} (a Map, Set or array not typed read-only)`);
      }
    }
  }
  expect(found).toEqual([]);
});

test('no function or method in src/core/ or src/http/ takes more than four parameters', () => {
  const found: string[] = [];
  for (const file of files.filter((each) => /^(core|http)\//.test(relative(src, each)))) {
    const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
    const visit = (node: ts.Node): void => {
      if (ts.isFunctionLike(node) && node.parameters.length > 4) {
        found.push(`${relative(src, file)}:${source.getLineAndCharacterOfPosition(node.getStart()).line + 1}`);
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  expect(found).toEqual([]);
});

/** The names a file declares at its top level, and `Class.member` for the members of its classes. */
function declaredNames(file: string): Set<string> {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest);
  const names = new Set<string>();
  for (const statement of source.statements) {
    if (ts.isVariableStatement(statement)) {
      for (const declaration of statement.declarationList.declarations) names.add(declaration.name.getText(source));
      continue;
    }
    const named = statement as ts.Statement & { name?: ts.Identifier };
    if (named.name === undefined || !ts.isIdentifier(named.name)) continue;
    const name = named.name.text;
    names.add(name);
    if (ts.isClassDeclaration(statement) || ts.isInterfaceDeclaration(statement)) {
      for (const member of statement.members) {
        if (member.name !== undefined) names.add(`${name}.${member.name.getText(source)}`);
      }
    }
  }
  return names;
}

test('every `src/…: Symbol` in ARCHITECTURE.md names a file and a symbol that exist', () => {
  const text = readFileSync(join(root, 'ARCHITECTURE.md'), 'utf8');
  const references = [...text.matchAll(/`(src\/[^`:]+\.ts): ([A-Za-z_$][\w$.]*)`/g)].map(([, path, symbol]) => ({ path, symbol }));
  expect(references.length).toBeGreaterThan(10);
  const missing = references
    .filter(({ path, symbol }) => !existsSync(join(root, path)) || !declaredNames(join(root, path)).has(symbol))
    .map(({ path, symbol }) => `${path}: ${symbol}`);
  expect(missing).toEqual([]);
});
