/**
 * Transpiles `src/` and the bench's server to plain CommonJS under bench/.tmp/build, so
 * the server children run as an application would (compiled JavaScript), not under
 * ts-node: ts-node loads Node's `repl`, which loads `domain`, which makes every
 * EventEmitter construction slower (about 7 % of a bare Fastify request's CPU time).
 */
import { mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import ts from 'typescript';

const ROOT = join(__dirname, '..');
export const BUILD_DIR = join(ROOT, 'bench', '.tmp', 'build');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sources(path);
    return name.endsWith('.ts') && !name.endsWith('.d.ts') ? [path] : [];
  });
}

/**
 * Transpiles `src/**` and the given bench files; returns the build directory (same layout
 * as the repository). `srcDir` (default `src/`; env BENCH_SRC) lets an A/B test run a
 * modified copy of the sources without touching the working tree.
 */
export function compileForBench(
  benchFiles: readonly string[],
  srcDir = process.env.BENCH_SRC ?? join(ROOT, 'src'),
  otherFiles: readonly string[] = [],
): string {
  rmSync(BUILD_DIR, { recursive: true, force: true });
  const files = [
    ...sources(srcDir).map((file) => ({ file, out: join('src', relative(srcDir, file)) })),
    ...benchFiles.map((file) => ({ file: join(ROOT, 'bench', file), out: join('bench', file) })),
    // Other files of the repository (paths from its root), e.g. the redis-server harness in support/.
    ...otherFiles.map((file) => ({ file: join(ROOT, file), out: file })),
  ];
  for (const { file, out: target } of files) {
    const { outputText } = ts.transpileModule(readFileSync(file, 'utf8'), {
      fileName: file,
      compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.CommonJS, esModuleInterop: true },
    });
    const out = join(BUILD_DIR, target).replace(/\.ts$/, '.js');
    mkdirSync(dirname(out), { recursive: true });
    writeFileSync(out, outputText);
  }
  return BUILD_DIR;
}
