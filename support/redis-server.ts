/**
 * Starts real redis-server processes for tests on free loopback ports, in
 * throw-away directories: a standalone server, or a Redis Cluster of masters joined
 * with `redis-cli --cluster create`.
 */
import { type ChildProcess, execFile, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/**
 * What to install when a Redis binary the tests start is missing (one line), or undefined when
 * `redis-server` and `redis-cli` are both on the PATH.
 */
export function missingRedisBinaries(): string | undefined {
  const missing = ['redis-server', 'redis-cli'].filter(
    (binary) => spawnSync(binary, ['--version'], { stdio: 'ignore' }).error !== undefined,
  );
  if (missing.length === 0) return undefined;
  return `${missing.join(' and ')} not found on the PATH: these tests start their own Redis servers. Install Redis 7 (Debian or Ubuntu: apt-get install redis-server; macOS: brew install redis), or run npm run test:unit, which needs no Redis.`;
}

export interface RedisProcess {
  readonly port: number;
  readonly url: string;
  /** SIGKILL, as a crash would. */
  kill(): Promise<void>;
  /** Starts the server again on the same port (after `kill`). */
  restart(): Promise<void>;
  /** Stops the server and removes its directory. */
  stop(): Promise<void>;
}

/** A port nothing listens on right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * Ports for the servers, below Linux's ephemeral range (32768-60999): the ports the kernel hands
 * out for `listen(0)` and outgoing connections never come from here, so a server killed and
 * restarted on its port does not find it taken by another test's socket in between.
 */
const SERVER_PORTS = { first: 20_000, count: 12_000 };

/** A port of {@link SERVER_PORTS} nothing listens on right now (another process may take it before us: see `launchOn`). */
async function serverPort(): Promise<number> {
  for (;;) {
    const port = SERVER_PORTS.first + Math.floor(Math.random() * SERVER_PORTS.count);
    const free = await new Promise<boolean>((resolve) => {
      const server = createServer();
      server.unref();
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
    });
    if (free) return port;
  }
}

/**
 * Resolves once the server on `port` answers `PING` with `PONG` or `LOADING` (not merely accepts
 * a connection: another process could hold the port), false if `child` exits first (the port was
 * taken, say).
 */
function answersPing(port: number, child: ChildProcess, timeoutMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const attempt = (): void => {
      if (child.exitCode !== null || child.signalCode !== null) {
        resolve(false);
        return;
      }
      const socket = new Socket();
      let reply = '';
      const retry = (): void => {
        socket.destroy();
        if (Date.now() > deadline) reject(new Error(`redis-server did not answer PING on ${port}`));
        else setTimeout(attempt, 20);
      };
      socket.setEncoding('latin1');
      socket.once('connect', () => socket.write('PING\r\n'));
      socket.on('data', (chunk: string) => {
        reply += chunk;
        if (!reply.includes('\r\n')) return;
        socket.destroy();
        // A server still loading its data answers LOADING: it is up, and a test may want that state.
        if (reply.startsWith('+PONG') || reply.startsWith('-LOADING')) resolve(true);
        else retry();
      });
      socket.once('error', retry);
      socket.connect(port, '127.0.0.1');
    };
    attempt();
  });
}

/**
 * Spawns redis-server with `args` until it answers on `port`: up to `attempts` times, since the
 * port may be taken between our check and the server's bind. Resolves with the child.
 */
async function launchOn(port: number, args: string[], attempts: number): Promise<ChildProcess> {
  for (let attempt = 1; ; attempt++) {
    const child = spawn('redis-server', args, { stdio: 'ignore' });
    child.unref();
    if (await answersPing(port, child)) return child;
    if (attempt >= attempts) throw new Error(`redis-server could not listen on ${port} (${attempts} attempts)`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Waits for `child` to exit, keeping the event loop alive meanwhile (the servers are unref'd while they run). */
function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  child.ref();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/** Starts one redis-server; `extraArgs` are passed as command-line config (e.g. `['--cluster-enabled', 'yes']`). */
export async function startRedis(extraArgs: string[] = []): Promise<RedisProcess> {
  const dir = mkdtempSync(join(tmpdir(), 'swl-redis-'));
  const argsOn = (port: number) => [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--save',
    '',
    '--appendonly',
    'no',
    '--dir',
    dir,
    ...extraArgs,
  ];
  let port = 0;
  let child: ChildProcess | undefined;
  // Another port when the chosen one was taken before the server bound it.
  for (let attempt = 1; child === undefined; attempt++) {
    port = await serverPort();
    try {
      child = await launchOn(port, argsOn(port), 1);
    } catch (error) {
      if (attempt < 5) continue;
      rmSync(dir, { recursive: true, force: true });
      throw error;
    }
  }
  let running: ChildProcess = child;
  // A restart must keep the port, which clients reconnect to: retry there a few times.
  const launch = async (): Promise<void> => {
    running = await launchOn(port, argsOn(port), 5);
  };
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    async kill() {
      running.kill('SIGKILL');
      await exited(running);
    },
    async restart() {
      await launch();
    },
    async stop() {
      running.kill('SIGKILL');
      await exited(running);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface RedisCluster {
  readonly nodes: RedisProcess[];
  readonly startupNodes: { host: string; port: number }[];
  stop(): Promise<void>;
}

/**
 * Starts `masters` cluster-enabled servers and joins them into one cluster with all 16384 slots
 * covered; `extraArgs` go to each server's command line.
 */
export async function startCluster(masters = 3, extraArgs: readonly string[] = []): Promise<RedisCluster> {
  const started = await Promise.allSettled(
    Array.from({ length: masters }, () => startRedis(['--cluster-enabled', 'yes', '--cluster-node-timeout', '2000', ...extraArgs])),
  );
  const nodes = started.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  // Whatever fails from here, no server or directory is left behind.
  try {
    const failed = started.find((result) => result.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
    const addresses = nodes.map((node) => `127.0.0.1:${node.port}`);
    await run('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', '0', '--cluster-yes']);
    // Wait until every node agrees the cluster is up.
    const deadline = Date.now() + 20_000;
    for (const node of nodes) {
      for (;;) {
        const { stdout } = await run('redis-cli', ['-p', String(node.port), 'cluster', 'info']);
        if (stdout.includes('cluster_state:ok')) break;
        if (Date.now() > deadline) throw new Error(`cluster did not become ok on ${node.port}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
  } catch (error) {
    await Promise.all(nodes.map((node) => node.stop()));
    throw error;
  }
  return {
    nodes,
    startupNodes: nodes.map((node) => ({ host: '127.0.0.1', port: node.port })),
    async stop() {
      await Promise.all(nodes.map((node) => node.stop()));
    },
  };
}

/** A master, its replica and one Sentinel (quorum 1) watching them under the name `mymaster`. */
export interface RedisSentinelGroup {
  readonly name: string;
  readonly master: RedisProcess;
  readonly replica: RedisProcess;
  readonly sentinel: { readonly port: number };
  /** The port of the master Sentinel reports now. */
  masterPort(): Promise<number>;
  stop(): Promise<void>;
}

/**
 * Starts a master, a replica of it and a Sentinel that fails over 500 ms after the master stops
 * answering. `redis-server <conf> --sentinel` needs a writable config file: Sentinel rewrites it.
 */
export async function startSentinelGroup(extraArgs: string[] = []): Promise<RedisSentinelGroup> {
  const name = 'mymaster';
  const master = await startRedis(extraArgs);
  const replica = await startRedis(['--replicaof', '127.0.0.1', String(master.port), ...extraArgs]);
  const port = await serverPort();
  const dir = mkdtempSync(join(tmpdir(), 'swl-sentinel-'));
  const conf = join(dir, 'sentinel.conf');
  writeFileSync(
    conf,
    [
      `port ${port}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${name} 127.0.0.1 ${master.port} 1`,
      `sentinel down-after-milliseconds ${name} 500`,
      `sentinel failover-timeout ${name} 5000`,
      `sentinel parallel-syncs ${name} 1`,
      '',
    ].join('\n'),
  );
  const child = await launchOn(port, [conf, '--sentinel'], 1);
  const masterPort = async (): Promise<number> => {
    const { stdout } = await run('redis-cli', ['-p', String(port), 'sentinel', 'get-master-addr-by-name', name]);
    return Number(stdout.trim().split('\n')[1]);
  };
  // Wait until the replica is in sync, so a failover has a replica to promote.
  const deadline = Date.now() + 20_000;
  for (;;) {
    const { stdout } = await run('redis-cli', ['-p', String(replica.port), 'info', 'replication']);
    if (stdout.includes('master_link_status:up')) break;
    if (Date.now() > deadline) throw new Error('the replica did not sync');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return {
    name,
    master,
    replica,
    sentinel: { port },
    masterPort,
    async stop() {
      child.kill('SIGKILL');
      await exited(child);
      rmSync(dir, { recursive: true, force: true });
      await Promise.all([master.stop(), replica.stop()]);
    },
  };
}
