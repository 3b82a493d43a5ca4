// Builds dist/ from the entry points (src/index.ts, src/express.ts, src/fastify.ts, src/hono.ts,
// src/koa.ts, src/nestjs.ts) in two formats: ES modules (.mjs, types in .d.mts) for `import`,
// CommonJS (.cjs, types in .d.cts) for `require`, chosen by the `import`/`require` conditions of
// package.json `exports`.
//
// Why two formats: an `import` of a CommonJS-only package gets Node's interop view of it
// (`default` and `__esModule` beside the named exports, and types that only some TypeScript
// settings resolve right), and a `require` of an ES-module-only package needs Node 20.19 or
// 22.12. Each format is one rollup bundle of one module graph: the entries share their
// internal modules through chunks (chunk-*.mjs, chunk-*.cjs), so a class exported by one entry
// and thrown by code reached through another is one class. Rollup writes the same bundle in
// both formats, so both run the same code. (tsup rewrites its CommonJS chunks with sucrase,
// which also compiles `?.`, `??` and class fields into helpers; tsc cannot emit ES modules that
// Node resolves from src's extensionless relative imports.)
//
// The dual-package hazard, for users: an application that both imports and requires this
// package (itself or through its dependencies) loads two copies of it, one per format. The
// copies share no classes (an error thrown by one fails `instanceof` against the other's
// class) and no module-scope state: for example the warning about two limiters sharing a
// store and a prefix with different limits only sees the limiters of its own copy, and each
// copy keeps its own state for a shared ioredis client. Counts live in the store, so limiters
// of both copies on one Redis store still count together. An application that uses this
// package through one module system loads one copy.
//
// The JavaScript is compiled without type checking (`npm run typecheck` does that).
import { rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import typescript from '@rollup/plugin-typescript';
import { rollup } from 'rollup';
import { dts } from 'rollup-plugin-dts';

// Paths below (and the TypeScript plugin's file filter) are relative to the repository.
process.chdir(fileURLToPath(new URL('..', import.meta.url)));
const outDir = 'dist';
const input = {
  index: 'src/index.ts',
  express: 'src/express.ts',
  fastify: 'src/fastify.ts',
  hono: 'src/hono.ts',
  koa: 'src/koa.ts',
  nestjs: 'src/nestjs.ts',
};
const tsconfig = 'tsconfig.build.json';

/** Dependencies, peer dependencies and Node's built-in modules stay imports, resolved in the user's project. */
function external(id) {
  return !id.startsWith('.') && !id.startsWith('/') && !id.startsWith('\0');
}

function onwarn(warning) {
  console.warn(`build: ${warning.message}`);
}

rmSync(outDir, { recursive: true, force: true });

/** Writes `bundle` once per output, each output named `[name]<extension>`. */
async function write(bundle, outputs) {
  for (const { extension, ...output } of outputs) {
    await bundle.write({
      dir: outDir,
      entryFileNames: `[name]${extension}`,
      chunkFileNames: `chunk-[hash]${extension}`,
      // No `import 'node:crypto'` in the entries for modules only their chunks use.
      hoistTransitiveImports: false,
      ...output,
    });
  }
  await bundle.close();
}

const code = await rollup({
  input,
  external,
  plugins: [
    typescript({
      tsconfig,
      // JavaScript only: the declarations come from rollup-plugin-dts below.
      compilerOptions: { module: 'esnext', moduleResolution: 'bundler', declaration: false, sourceMap: false, noCheck: true },
    }),
  ],
  onwarn,
});
await write(code, [
  { format: 'es', extension: '.mjs' },
  { format: 'cjs', extension: '.cjs', exports: 'named', interop: 'auto' },
]);

const types = await rollup({
  input,
  external,
  plugins: [dts({ tsconfig })],
  onwarn,
});
// Declaration files use the ES module syntax in both formats; the extension tells TypeScript which format they describe.
await write(types, [
  { format: 'es', extension: '.d.mts' },
  { format: 'es', extension: '.d.cts' },
]);
