/**
 * The documentation, kept honest: every TypeScript block of README.md and docs/*.md compiles
 * (with the checks `tsc --init` turns on, module nodenext) against the package's built types, the README stays a front door
 * of at most 2,500 words whose relative links resolve inside the published package, the table
 * of codes in docs/reference.md lists exactly the codes of src/errors.ts, and the links between
 * the guides point to files and headings that exist.
 *
 * Each block is written as its own module (`.mts`, so top-level `await` is allowed) under
 * node_modules/.cache/docs-blocks/, inside the repository, so that `import ... from
 * 'ratewarden/express'` resolves to dist/ through package.json `exports` (self-reference).
 * dist/ is rebuilt first when src/ has changed since it was built.
 *
 * A block that uses an API not built yet may be marked on the line before it with
 * `<!-- docs-test: skip-until <name> -->`: it is compiled but its errors are not reported, and
 * the test fails once it compiles cleanly, so the marker is removed when its API exists.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { CODES } from '../src/errors';
import { ensureFreshDist } from './helpers/dist';

const root = resolve(__dirname, '..');
const docsDir = join(root, 'docs');
const blocksDir = join(root, 'node_modules', '.cache', 'docs-blocks');
const README = 'README.md';
const MAX_README_WORDS = 2_500;
const SKIP_MARKER = /^<!--\s*docs-test:\s*skip-until\s+(\S+)\s*-->$/;

/** README.md and every docs/*.md, as paths relative to the repository. */
function documents(): string[] {
  const guides = readdirSync(docsDir)
    .filter((name) => name.endsWith('.md'))
    .sort()
    .map((name) => `docs/${name}`);
  return [README, ...guides];
}

function read(document: string): string {
  return readFileSync(join(root, document), 'utf8');
}

interface Block {
  readonly document: string;
  /** Line of the opening fence, 1-based. */
  readonly line: number;
  readonly code: string;
  /** The API named by a `skip-until` marker, if the block has one. */
  readonly skipUntil: string | undefined;
  /** The module the block is written to. */
  readonly file: string;
}

/** The ```ts and ```typescript blocks of a document, with the line of each opening fence. */
function typescriptBlocks(document: string): Block[] {
  const blocks: Block[] = [];
  let open: { line: number; typescript: boolean; marker: string | undefined; body: string[] } | undefined;
  let previous = '';
  for (const [index, text] of read(document).split('\n').entries()) {
    if (open === undefined) {
      const fence = /^```\s*([\w-]*)/.exec(text);
      if (fence !== null) {
        const typescript = fence[1] === 'ts' || fence[1] === 'typescript';
        open = { line: index + 1, typescript, marker: SKIP_MARKER.exec(previous)?.[1], body: [] };
      } else if (text.trim() !== '') previous = text.trim();
    } else if (/^```\s*$/.test(text)) {
      if (open.typescript) {
        const name = `block-${document.replace(/\W+/g, '_')}-${open.line}.mts`;
        blocks.push({ document, line: open.line, code: open.body.join('\n'), skipUntil: open.marker, file: join(blocksDir, name) });
      }
      open = undefined;
      previous = '';
    } else open.body.push(text);
  }
  if (open !== undefined) throw new Error(`${document}:${open.line}: a code block is never closed`);
  return blocks;
}

function diagnosticText(diagnostic: ts.Diagnostic): string {
  return ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n');
}

/** Markdown links `[text](target)` of a document, outside code blocks and inline code. */
function links(document: string): { target: string; line: number }[] {
  const found: { target: string; line: number }[] = [];
  let inFence = false;
  read(document)
    .split('\n')
    .forEach((text, index) => {
      if (/^```/.test(text)) inFence = !inFence;
      if (inFence) return;
      for (const match of text.replace(/`[^`]*`/g, '').matchAll(/\]\(([^)\s]+)\)/g)) found.push({ target: match[1], line: index + 1 });
    });
  return found;
}

function isExternal(target: string): boolean {
  return /^(https?:|mailto:|#)/.test(target);
}

/** GitHub's anchors of a Markdown document's headings (lowercased, punctuation dropped, spaces as hyphens, repeats numbered). */
function anchors(document: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  let inFence = false;
  for (const text of read(document).split('\n')) {
    if (/^```/.test(text)) inFence = !inFence;
    const heading = inFence ? null : /^#{1,6}\s+(.*)$/.exec(text);
    if (heading === null) continue;
    const slug = heading[1]
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    result.add(count === 0 ? slug : `${slug}-${count}`);
  }
  return result;
}

/** Whether a path of the repository is matched by an entry of package.json `files` (a path, a directory, or a glob with `*`). */
function isPublished(path: string, files: readonly string[]): boolean {
  return files.some((pattern) => {
    if (pattern.includes('*')) {
      const expression = pattern.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*');
      return new RegExp(`^${expression}$`).test(path);
    }
    return path === pattern || path.startsWith(`${pattern}/`);
  });
}

describe('documentation', () => {
  test('every TypeScript block compiles against the built package', () => {
    ensureFreshDist();
    const blocks = documents().flatMap(typescriptBlocks);
    expect(blocks.length).toBeGreaterThan(0);

    rmSync(blocksDir, { recursive: true, force: true });
    mkdirSync(blocksDir, { recursive: true });
    for (const block of blocks) writeFileSync(block.file, `${block.code}\n`);

    const program = ts.createProgram(
      blocks.map((block) => block.file),
      {
        // The checks `tsc --init` turns on (TypeScript 5.9), so a block compiles in a new project.
        strict: true,
        exactOptionalPropertyTypes: true,
        noUncheckedIndexedAccess: true,
        verbatimModuleSyntax: true,
        isolatedModules: true,
        module: ts.ModuleKind.NodeNext,
        moduleResolution: ts.ModuleResolutionKind.NodeNext,
        target: ts.ScriptTarget.ES2022,
        types: ['node'],
        // As every NestJS project compiles (the NestJS guide's controllers use its decorators).
        experimentalDecorators: true,
        emitDecoratorMetadata: true,
        noEmit: true,
        skipLibCheck: true,
      },
    );
    const byFile = new Map(blocks.map((block) => [block.file, block]));
    const errorsOf = new Map<Block, string[]>(blocks.map((block) => [block, []]));
    const elsewhere: string[] = [];
    for (const diagnostic of ts.getPreEmitDiagnostics(program)) {
      const block = diagnostic.file === undefined ? undefined : byFile.get(diagnostic.file.fileName);
      if (block === undefined || diagnostic.file === undefined) {
        elsewhere.push(diagnosticText(diagnostic));
        continue;
      }
      const { line, character } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start ?? 0);
      // The block's first code line is the line after its fence.
      const where = `${block.document}:${block.line + 1 + line}:${character + 1} (block at line ${block.line})`;
      errorsOf.get(block)?.push(`${where}: ${diagnosticText(diagnostic)}`);
    }

    const failures = [...elsewhere];
    for (const [block, errors] of errorsOf) {
      if (block.skipUntil === undefined) failures.push(...errors);
      else if (errors.length === 0) {
        failures.push(`${block.document}:${block.line}: compiles now: remove its "docs-test: skip-until ${block.skipUntil}" marker`);
      }
    }
    expect(failures).toEqual([]);
  }, 120_000);

  test(`the README has at most ${MAX_README_WORDS} words`, () => {
    const words = read(README)
      .split(/\s+/)
      .filter((word) => word !== '').length;
    expect(words).toBeLessThanOrEqual(MAX_README_WORDS);
  });

  test('the table of codes in docs/reference.md lists every error and warning code, and no other', () => {
    const reference = read('docs/reference.md');
    const listed = [...reference.matchAll(/^\| `(SWL_[A-Z0-9_]+)`\s*\|/gm)].map((match) => match[1]);
    expect([...listed].sort()).toEqual(Object.keys(CODES).sort());
    expect(new Set(listed).size).toBe(listed.length);
  });

  test('every relative link of the README points to a file of the published package', () => {
    const files = (JSON.parse(read('package.json')) as { files: string[] }).files;
    const problems: string[] = [];
    for (const { target, line } of links(README)) {
      if (isExternal(target)) continue;
      const path = relative(root, resolve(root, target.replace(/#.*$/, '')));
      if (!isPublished(path, files)) problems.push(`README.md:${line}: ${target} is not in the published package (package.json files)`);
      else if (!existsSync(join(root, path))) problems.push(`README.md:${line}: ${target} does not exist`);
    }
    expect(problems).toEqual([]);
  });

  test('every relative link of the documentation points to an existing file and heading', () => {
    const problems: string[] = [];
    for (const document of documents()) {
      for (const { target, line } of links(document)) {
        if (/^(https?:|mailto:)/.test(target)) continue;
        const [path, anchor] = target.split('#', 2);
        const file = path === '' ? document : relative(root, resolve(dirname(join(root, document)), path));
        if (!existsSync(join(root, file))) {
          problems.push(`${document}:${line}: ${target} does not exist`);
          continue;
        }
        if (anchor !== undefined && file.endsWith('.md') && !anchors(file).has(anchor)) {
          problems.push(`${document}:${line}: ${target} names no heading of ${file}`);
        }
      }
    }
    expect(problems).toEqual([]);
  });
});
