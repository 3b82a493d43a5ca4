/**
 * The package as its users get it: builds dist/, packs the tarball and installs it with
 * `npm install <tarball>` (a real install, not a link to this repository) into temporary
 * projects, then uses it from the files of fixtures/:
 *
 * - `full`: with express, fastify, ioredis and their types: all three entries type-checked
 *   with module nodenext and with moduleResolution bundler, and a RedisStore over ioredis;
 * - `bare`: the tarball alone, as a MemoryStore user installs it (ratewarden/hono and ratewarden/koa
 *   load there too);
 * - `redis`: with node-redis (`redis`) and @types/node, without ioredis: a RedisStore over a
 *   node-redis client and cluster, made and type-checked;
 * - `valkey`: with Valkey GLIDE, iovalkey and @types/node, without ioredis and node-redis:
 *   RedisStores over their standalone and cluster clients, made and type-checked;
 * - `frameworks`: with NestJS 12 (ES modules only, which Jest cannot load) and @nestjs/throttler 6,
 *   Hono and @hono/node-server, Koa and @koa/router, @opentelemetry/api and sdk-metrics 2.x: a
 *   Nest 12 app with the throttler storage, a Hono app with metrics, a Koa app, all on real
 *   sockets, and their types checked.
 *
 * The main entry's module graph (dist/index.mjs, dist/index.cjs and the chunks they load) is read
 * for the packages it imports: none of the optional peers.
 *
 * npm installs from its cache when it can (`--prefer-offline`), asking for the versions
 * installed in this repository. The scripts and type checks of a project start as soon as
 * it is installed and run side by side; the tests then look at their results.
 */
import { execFile } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const root = resolve(__dirname, '../..');
const fixtures = join(__dirname, 'fixtures');
const tsc = join(root, 'node_modules/typescript/bin/tsc');
const NAME = 'ratewarden';

/** Packages installed next to the tarball in each project. */
const PROJECTS = {
  full: ['ioredis', 'express', '@types/express', 'fastify', '@types/node'],
  bare: [],
  redis: ['redis', '@types/node'],
  valkey: ['@valkey/valkey-glide', 'iovalkey', '@types/node'],
  // Koa apart from NestJS 12: its Express 5 hoists content-disposition 2, whose own types lack the
  // Options that @types/koa reads from @types/content-disposition (skipLibCheck false fails there).
  koa: ['koa', '@koa/router', '@types/koa', '@types/node'],
  frameworks: [
    '@nestjs/common@12',
    '@nestjs/core@12',
    '@nestjs/platform-express@12',
    '@nestjs/throttler',
    'reflect-metadata',
    'rxjs',
    'hono',
    '@hono/node-server',
    '@opentelemetry/api',
    '@opentelemetry/sdk-metrics',
    '@types/node',
  ],
} as const satisfies Record<string, readonly string[]>;
type Project = keyof typeof PROJECTS;
const PROJECT_NAMES = Object.keys(PROJECTS) as Project[];

const COMPILER_OPTIONS = { target: 'es2022', strict: true, skipLibCheck: false, noEmit: true };
const TSCONFIGS = {
  nodenext: {
    compilerOptions: { ...COMPILER_OPTIONS, module: 'nodenext', moduleResolution: 'nodenext' },
    // A .cts file imports through `require`: it gets the CommonJS declarations.
    files: ['all-entries.ts', 'all-entries.cts', 'wrong-options.ts'],
  },
  bundler: {
    compilerOptions: { ...COMPILER_OPTIONS, module: 'esnext', moduleResolution: 'bundler' },
    files: ['all-entries.ts', 'wrong-options.ts'],
  },
  memory: {
    compilerOptions: { ...COMPILER_OPTIONS, module: 'nodenext', moduleResolution: 'nodenext' },
    files: ['memory-only.ts', 'memory-only.cts'],
  },
  noderedis: {
    compilerOptions: { ...COMPILER_OPTIONS, module: 'nodenext', moduleResolution: 'nodenext' },
    files: ['node-redis.ts', 'node-redis.cts'],
  },
  valkey: {
    compilerOptions: { ...COMPILER_OPTIONS, module: 'nodenext', moduleResolution: 'nodenext' },
    files: ['valkey.ts'],
  },
  frameworks: {
    compilerOptions: { ...COMPILER_OPTIONS, module: 'nodenext', moduleResolution: 'nodenext', experimentalDecorators: true },
    files: ['frameworks.ts'],
  },
  koa: {
    compilerOptions: { ...COMPILER_OPTIONS, module: 'nodenext', moduleResolution: 'nodenext' },
    files: ['koa.ts'],
  },
};
type TsConfig = keyof typeof TSCONFIGS;

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs a command to its end, killed after 90 s; never rejects. The `npm_*` variables that
 * `npm test` sets are left out, so that an npm started here sees only the project it runs in.
 */
/**
 * The longest any one command may take (an install, a type check): generous, since five projects
 * install and type-check at once and a shared machine can slow them down several times over.
 */
const COMMAND_TIMEOUT_MS = 240_000;

function run(command: string, args: string[], cwd: string): Promise<Result> {
  const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !/^npm_/i.test(key) && key !== 'INIT_CWD'));
  return new Promise((done) => {
    execFile(
      command,
      args,
      { cwd, env, maxBuffer: 64 * 1024 * 1024, timeout: COMMAND_TIMEOUT_MS, killSignal: 'SIGKILL' },
      (error, stdout, stderr) => {
        done({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
      },
    );
  });
}

function succeeded(what: string, result: Result): Result {
  if (result.code !== 0) throw new Error(`${what} exited with ${result.code}:\n${result.stdout}\n${result.stderr}`);
  return result;
}

/** `name@version` of the version installed in this repository. */
function installedSpec(name: string): string {
  const { version } = JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')) as { version: string };
  return `${name}@${version}`;
}

async function createProject(work: string, tarball: string, project: Project): Promise<string> {
  const dir = join(work, project);
  mkdirSync(dir);
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name: `tarball-test-${project}`, private: true, type: 'module' }));
  for (const file of readdirSync(fixtures)) copyFileSync(join(fixtures, file), join(dir, file));
  for (const [name, tsconfig] of Object.entries(TSCONFIGS)) writeFileSync(join(dir, `tsconfig.${name}.json`), JSON.stringify(tsconfig));
  // A name alone: the version installed here; a name with a version (NestJS 12): that one.
  const specs = PROJECTS[project].map((spec: string) => (spec.includes('@', 1) ? spec : installedSpec(spec)));
  const install = ['install', tarball, ...specs, '--prefer-offline', '--no-audit', '--no-fund'];
  succeeded(`npm install in the ${project} project`, await run('npm', install, dir));
  return dir;
}

/** What fixtures/entries.mjs and entries.cjs print. */
interface EntriesReport {
  files: string[];
  exports: string[][];
  allowed: boolean[];
  timeoutIsRateLimitTimeoutError: boolean;
  sameMemoryStore: boolean;
  plugin: string;
}

async function runScript(dir: string, file: string): Promise<unknown> {
  const { stdout } = succeeded(`node ${file}`, await run(process.execPath, [file], dir));
  return JSON.parse(stdout);
}

interface TypeCheck {
  /** The error lines tsc printed (`--pretty false`), file names relative to the project. */
  errors: string[];
  /** The files of the program (`--listFiles`). */
  files: string[];
}

async function typeCheck(dir: string, tsconfig: TsConfig): Promise<TypeCheck> {
  const { stdout, stderr } = await run(process.execPath, [tsc, '-p', `tsconfig.${tsconfig}.json`, '--pretty', 'false', '--listFiles'], dir);
  const lines = `${stdout}\n${stderr}`.split('\n');
  return {
    errors: lines.filter((line) => /\berror TS\d+:/.test(line)),
    files: lines.filter((line) => line.startsWith('/')).map((file) => realpathSync(file)),
  };
}

/** `file:line TSxxxx` for each `// expect TSxxxx` comment in a fixture. */
function markedErrors(file: string): string[] {
  return readFileSync(join(fixtures, file), 'utf8')
    .split('\n')
    .flatMap((line, index) => [...line.matchAll(/\/\/ expect (TS\d+)/g)].map((match) => `${file}:${index + 1} ${match[1]}`));
}

/** `file:line TSxxxx` of an error line, or the whole line when it names no file. */
function located(error: string): string {
  const match = /^(.*)\((\d+),\d+\): error (TS\d+):/.exec(error);
  return match ? `${match[1]}:${match[2]} ${match[3]}` : error;
}

/**
 * The modules a built file imports: its static imports and re-exports (each on a line of its own
 * in rollup's output), its `import(...)` and its `require(...)`.
 */
function specifiersOf(file: string): string[] {
  const code = readFileSync(file, 'utf8');
  const patterns = [
    /^(?:import|export)\b[^;]*?\bfrom\s*['"]([^'"]+)['"]/gm,
    /^import\s*['"]([^'"]+)['"]/gm,
    /\b(?:import|require)\(\s*['"]([^'"]+)['"]\s*\)/g,
  ];
  return patterns.flatMap((pattern) => [...code.matchAll(pattern)].map((match) => match[1]));
}

/** The packages (and `node:` modules) imported by `file` and by the files of the package it loads, sorted. */
function packagesImportedBy(file: string): string[] {
  const packages = new Set<string>();
  const seen = new Set<string>();
  const queue = [file];
  for (let next = queue.pop(); next !== undefined; next = queue.pop()) {
    if (seen.has(next)) continue;
    seen.add(next);
    for (const specifier of specifiersOf(next)) {
      if (specifier.startsWith('.')) queue.push(resolve(next, '..', specifier));
      else packages.add(specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]);
    }
  }
  return [...packages].sort();
}

describe('the packed tarball, installed with npm', () => {
  let work: string;
  const projects = {} as Record<Project, string>;
  const scripts: Record<string, Promise<unknown>> = {};
  const typeChecks: Record<string, Promise<TypeCheck>> = {};

  /** Starts `task` now; a failure is reported by the test that looks at its result. */
  function start<T>(task: Promise<T>): Promise<T> {
    task.catch(() => {});
    return task;
  }

  beforeAll(async () => {
    work = realpathSync(mkdtempSync(join(tmpdir(), 'swl-tarball-')));
    succeeded('npm run build', await run(process.execPath, [join(root, 'scripts/build.mjs')], root));
    const packed = succeeded('npm pack', await run('npm', ['pack', '--json', '--pack-destination', work], root));
    const tarball = join(work, (JSON.parse(packed.stdout) as { filename: string }[])[0].filename);
    await Promise.all(
      PROJECT_NAMES.map(async (project) => {
        const dir = await createProject(work, tarball, project);
        projects[project] = dir;
        for (const file of ['entries.mjs', 'entries.cjs']) scripts[`${project}/${file}`] = start(runScript(dir, file));
        if (project === 'full') {
          for (const file of ['ioredis.mjs', 'ioredis.cjs']) scripts[`${project}/${file}`] = start(runScript(dir, file));
          for (const tsconfig of ['nodenext', 'bundler'] as const) typeChecks[`${project}/${tsconfig}`] = start(typeCheck(dir, tsconfig));
        } else if (project !== 'valkey') {
          // (The valkey project type-checks its own file instead: one compiler less in this hook.)
          typeChecks[`${project}/memory`] = start(typeCheck(dir, 'memory'));
        }
        if (project === 'frameworks') {
          for (const file of ['nest12.mjs', 'hono.mjs', 'hono.cjs']) scripts[`${project}/${file}`] = start(runScript(dir, file));
          typeChecks[`${project}/frameworks`] = start(typeCheck(dir, 'frameworks'));
        }
        if (project === 'koa') {
          scripts['koa/koa.mjs'] = start(runScript(dir, 'koa.mjs'));
          typeChecks['koa/koa'] = start(typeCheck(dir, 'koa'));
        }
        if (project === 'bare')
          for (const file of ['hono-alone.mjs', 'koa-alone.mjs']) scripts[`bare/${file}`] = start(runScript(dir, file));
        if (project === 'redis') {
          for (const file of ['node-redis.mjs', 'node-redis.cjs']) scripts[`${project}/${file}`] = start(runScript(dir, file));
          typeChecks[`${project}/noderedis`] = start(typeCheck(dir, 'noderedis'));
        }
        if (project === 'valkey') {
          for (const file of ['valkey.mjs', 'valkey.cjs']) scripts[`${project}/${file}`] = start(runScript(dir, file));
          typeChecks[`${project}/valkey`] = start(typeCheck(dir, 'valkey'));
        }
      }),
    );
    // Waited for here, under this hook's timeout, rather than under each test's.
    await Promise.allSettled([...Object.values(scripts), ...Object.values(typeChecks)]);
  }, 2 * COMMAND_TIMEOUT_MS);

  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  function installed(project: Project, ...path: string[]): string {
    return join(projects[project], 'node_modules', NAME, ...path);
  }

  test('is installed as files, with fastify-plugin and none of its optional peers', () => {
    expect(lstatSync(installed('bare')).isDirectory()).toBe(true);
    expect(lstatSync(installed('bare')).isSymbolicLink()).toBe(false);
    const { dependencies } = JSON.parse(readFileSync(installed('bare', 'package.json'), 'utf8')) as { dependencies: object };
    expect(Object.keys(dependencies)).toEqual(['fastify-plugin']);
    const modules = join(projects.bare, 'node_modules');
    expect(existsSync(join(modules, 'fastify-plugin'))).toBe(true);
    const peers = [
      'ioredis',
      'redis',
      '@valkey/valkey-glide',
      'iovalkey',
      'express',
      'fastify',
      'hono',
      '@hono/node-server',
      'koa',
      '@nestjs/throttler',
      '@nestjs/common',
      '@opentelemetry/api',
    ];
    expect(peers.filter((peer) => existsSync(join(modules, peer)))).toEqual([]);
    const { peerDependenciesMeta } = JSON.parse(readFileSync(installed('bare', 'package.json'), 'utf8')) as {
      peerDependenciesMeta: Record<string, { optional: boolean }>;
    };
    expect(peers.filter((peer) => peerDependenciesMeta[peer]?.optional !== true)).toEqual([]);
    expect(existsSync(join(projects.redis, 'node_modules', 'ioredis'))).toBe(false);
    expect(existsSync(join(projects.redis, 'node_modules', 'redis'))).toBe(true);
  });

  describe.each(PROJECT_NAMES)('in the %s project', (project) => {
    const works = { allowed: [true, false], timeoutIsRateLimitTimeoutError: true, sameMemoryStore: true, plugin: 'function' };

    test('import gets the ES module build, with real named exports only, and a check through the MemoryStore works', async () => {
      const report = (await scripts[`${project}/entries.mjs`]) as EntriesReport;
      expect(report.files).toEqual(['index.mjs', 'express.mjs', 'fastify.mjs'].map((file) => installed(project, 'dist', file)));
      for (const keys of report.exports) {
        expect(keys).toEqual(expect.arrayContaining(['MemoryStore', 'RedisStore', 'StoreUnavailableError', 'byIp']));
        expect(keys).not.toContain('default');
        expect(keys).not.toContain('__esModule');
      }
      expect(report.exports[0]).toEqual(expect.arrayContaining(['createLimiter', 'RateLimitTimeoutError']));
      expect(report.exports[1]).toContain('rateLimit');
      expect(report.exports[2]).toContain('rateLimitPlugin');
      expect(report).toMatchObject(works);
    });

    test('require gets the CommonJS build, with the same exports, and a check through the MemoryStore works', async () => {
      const report = (await scripts[`${project}/entries.cjs`]) as EntriesReport;
      expect(report.files).toEqual(['index.cjs', 'express.cjs', 'fastify.cjs'].map((file) => installed(project, 'dist', file)));
      expect(report.exports).toEqual(((await scripts[`${project}/entries.mjs`]) as EntriesReport).exports);
      expect(report).toMatchObject(works);
    });
  });

  test('NestJS 12 (ES modules) in plain Node: the throttler guard over the storage refuses the third request with an exact Retry-After', async () => {
    expect(await scripts['frameworks/nest12.mjs']).toEqual({
      nest: '12',
      seen: [
        [200, null],
        [200, null],
        [429, '10'],
        [200, null],
      ],
    });
  });

  test('Hono on @hono/node-server, with OpenTelemetry metrics: the IP of the connection, a 429, counted decisions', async () => {
    expect(await scripts['frameworks/hono.mjs']).toEqual({
      identifier: 'ip:127.0.0.1',
      denied: [429, '120'],
      decisions: { allowed: 1, denied: 1 },
    });
  });

  test('ratewarden/hono loads without hono or @hono/node-server installed, from import and require', async () => {
    expect(await scripts['bare/hono-alone.mjs']).toEqual({ esm: 'function', cjs: 'function' });
  });

  test('ratewarden/koa loads without koa installed, from import and require', async () => {
    expect(await scripts['bare/koa-alone.mjs']).toEqual({ esm: 'function', cjs: 'function' });
  });

  test('Koa with @koa/router: the IP of the connection on ctx.state, a 429 with an exact Retry-After', async () => {
    expect(await scripts['koa/koa.mjs']).toEqual({ identifier: 'ip:127.0.0.1', denied: [429, '120'] });
  });

  test.each(['index.mjs', 'index.cjs'])(
    'the main entry (%s) and the chunks it loads import no optional peer (a Redis or Valkey client, koa...)',
    (file) => {
      const { peerDependencies } = JSON.parse(readFileSync(installed('bare', 'package.json'), 'utf8')) as {
        peerDependencies: Record<string, string>;
      };
      const imported = packagesImportedBy(installed('bare', 'dist', file));
      expect(imported.filter((name) => name in peerDependencies)).toEqual([]);
      // What it does import: Node's own modules only (node:crypto by the chunks it loads, so the walk reached them).
      expect(imported.filter((name) => !name.startsWith('node:'))).toEqual([]);
      expect(imported).toContain('node:crypto');
    },
  );

  test('require gets the CommonJS builds of ratewarden/hono and ratewarden/nestjs', async () => {
    expect(await scripts['frameworks/hono.cjs']).toEqual({ rateLimit: 'function', byIp: true, storage: 'function', sameMemoryStore: true });
  });

  test('Koa and @koa/router types: ratewarden/koa type-checks (skipLibCheck false)', async () => {
    const check = await typeChecks['koa/koa'];
    expect(check.errors).toEqual([]);
    expect(check.files).toEqual(expect.arrayContaining([installed('koa', 'dist', 'koa.d.mts')]));
  });

  test('NestJS 12, @nestjs/throttler, Hono and OpenTelemetry types: the new entries type-check (skipLibCheck false)', async () => {
    const check = await typeChecks['frameworks/frameworks'];
    expect(check.errors).toEqual([]);
    expect(check.files).toEqual(
      expect.arrayContaining(['hono.d.mts', 'nestjs.d.mts'].map((file) => installed('frameworks', 'dist', file))),
    );
  });

  test.each(['ioredis.mjs', 'ioredis.cjs'])('with ioredis installed, %s makes a RedisStore over an ioredis client', async (file) => {
    expect(await scripts[`full/${file}`]).toEqual({ redisStore: true, status: 'wait' });
  });

  test.each(['node-redis.mjs', 'node-redis.cjs'])(
    'with node-redis installed and not ioredis, %s makes RedisStores over a node-redis client and cluster',
    async (file) => {
      expect(await scripts[`redis/${file}`]).toEqual({ redisStore: true, clusterStore: true, refused: 'SWL_STORE_UNAVAILABLE' });
    },
  );

  test.each(['valkey.mjs', 'valkey.cjs'])(
    'with Valkey GLIDE and iovalkey installed, and neither ioredis nor node-redis, %s makes RedisStores over their clients',
    async (file) => {
      expect(await scripts[`valkey/${file}`]).toEqual(
        file.endsWith('.mjs')
          ? { stores: [true, true, true, true], sharded: [false, true, false, true] }
          : { stores: [true, true], sharded: [false, false] },
      );
    },
  );

  test('with Valkey GLIDE and iovalkey installed, RedisStores over their clients type-check (skipLibCheck false)', async () => {
    const check = await typeChecks['valkey/valkey'];
    expect(check.errors).toEqual([]);
    expect(check.files).toEqual(expect.arrayContaining([installed('valkey', 'dist', 'index.d.mts')]));
  });

  test('with node-redis installed and not ioredis, RedisStores over createClient() and createCluster() type-check (skipLibCheck false)', async () => {
    const check = await typeChecks['redis/noderedis'];
    expect(check.errors).toEqual([]);
    expect(check.files).toEqual(expect.arrayContaining(['index.d.mts', 'index.d.cts'].map((file) => installed('redis', 'dist', file))));
  });

  describe.each([
    ['nodenext', ['index.d.mts', 'express.d.mts', 'fastify.d.mts', 'index.d.cts', 'express.d.cts', 'fastify.d.cts'], []],
    ['bundler', ['index.d.mts', 'express.d.mts', 'fastify.d.mts'], ['index.d.cts', 'express.d.cts', 'fastify.d.cts']],
  ])('TypeScript 5.9 with module resolution %s, strict, skipLibCheck false', (tsconfig, loaded, notLoaded) => {
    const marked = markedErrors('wrong-options.ts');

    test('type-checks all three entries, express, fastify and a RedisStore over ioredis, with the declarations of the importing format', async () => {
      const check = await typeChecks[`full/${tsconfig}`];
      expect(check.errors.filter((error) => !marked.includes(located(error)))).toEqual([]);
      const files = (names: string[]) => names.map((name) => installed('full', 'dist', name));
      expect(check.files).toEqual(expect.arrayContaining(files(loaded)));
      expect(check.files.filter((file) => files(notLoaded).includes(file))).toEqual([]);
    });

    test('reports options of the wrong type', async () => {
      const check = await typeChecks[`full/${tsconfig}`];
      expect(marked).toHaveLength(2);
      expect(marked.filter((location) => !check.errors.some((error) => located(error) === location))).toEqual([]);
    });
  });

  // Fails while the declarations name ioredis types (src/stores/redis.ts imports its client
  // types from ioredis): a project without ioredis cannot resolve them.
  test.each(['bare', 'redis'] as const)(
    'without ioredis (%s project), a file using only the MemoryStore type-checks with skipLibCheck false',
    async (project) => {
      const check = await typeChecks[`${project}/memory`];
      expect(check.files).toEqual(expect.arrayContaining(['index.d.mts', 'index.d.cts'].map((file) => installed(project, 'dist', file))));
      expect(check.errors).toEqual([]);
    },
  );
});
