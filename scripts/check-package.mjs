// npm run check:package: builds dist/, packs the tarball that `npm publish` would upload, and
// checks that tarball with publint (package.json fields and `exports` against the packed files)
// and @arethetypeswrong/cli (the types each resolution mode finds for each entry point, and
// that they describe the JavaScript it loads). attw runs its default `strict` profile, which
// includes TypeScript's old `node10` resolution (`moduleResolution: "node"`): `typesVersions`
// in package.json keeps the subpath entries typed there. It also checks that every relative
// link and picture in a packed Markdown file points at a packed file, so the docs a user reads
// from node_modules have no hole in them.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, normalize } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const bin = (name) => join(root, 'node_modules', '.bin', name);
const run = (command, args) => execFileSync(command, args, { cwd: root, stdio: 'inherit' });

run(process.execPath, ['scripts/build.mjs']);
const dir = mkdtempSync(join(tmpdir(), 'swl-check-package-'));
try {
  const packed = execFileSync('npm', ['pack', '--json', '--pack-destination', dir], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const [{ filename, files, size, unpackedSize }] = JSON.parse(packed);
  console.log(`${filename}: ${files.length} files, ${size} bytes packed, ${unpackedSize} unpacked`);
  const paths = new Set(files.map((file) => file.path));
  const missing = [];
  for (const path of paths) {
    if (!path.endsWith('.md')) continue;
    for (const [, target] of readFileSync(join(root, path), 'utf8').matchAll(/\]\(([^)\s#]+)(?:#[^)]*)?\)/g)) {
      if (/^[a-z]+:/i.test(target)) continue;
      const linked = normalize(join(dirname(path), target));
      if (!paths.has(linked)) missing.push(`${path} -> ${target}`);
    }
  }
  if (missing.length > 0) throw new Error(`links to files the tarball lacks:\n${missing.join('\n')}`);
  const tarball = join(dir, filename);
  run(bin('publint'), ['run', tarball, '--strict']);
  run(bin('attw'), [tarball, '--profile', 'strict']);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
