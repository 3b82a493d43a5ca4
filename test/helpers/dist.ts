/**
 * dist/, the built package, for the tests that use it as users get it (the documentation's code
 * blocks, the runtime suite): rebuilt when src/ has changed since it was built.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';

const root = resolve(__dirname, '../..');

/** The newest modification time of any file under `dir`. */
function newestFile(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestFile(path) : statSync(path).mtimeMs);
  }
  return newest;
}

/** Builds dist/ when its declarations are missing or older than the newest file under src/. */
export function ensureFreshDist(): void {
  const declarations = join(root, 'dist', 'index.d.mts');
  if (existsSync(declarations) && statSync(declarations).mtimeMs >= newestFile(join(root, 'src'))) return;
  execFileSync(process.execPath, [join(root, 'scripts', 'build.mjs')], { cwd: root, stdio: 'pipe' });
}
