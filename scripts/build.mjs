// Compiles src/ to dist/ as CommonJS with .d.ts types. ES modules import it through
// Node's CommonJS interop (named exports are detected statically), so there is a single
// copy of the package at run time: no dual-package hazard with two module instances.
import { execFileSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
rmSync(new URL('../dist', import.meta.url), { recursive: true, force: true });
execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', 'tsconfig.build.json'], { stdio: 'inherit' });
