/**
 * Starts real redis-server processes for tests on free loopback ports, in
 * throw-away directories: a standalone server, or a Redis Cluster of masters joined
 * with `redis-cli --cluster create`.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

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

function waitForPort(port: number, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const attempt = (): void => {
      const socket = new Socket();
      socket.once('connect', () => {
        socket.destroy();
        resolve();
      });
      socket.once('error', () => {
        socket.destroy();
        if (Date.now() > deadline) reject(new Error(`redis-server did not listen on ${port}`));
        else setTimeout(attempt, 20);
      });
      socket.connect(port, '127.0.0.1');
    };
    attempt();
  });
}

/** Waits for `child` to exit, keeping the event loop alive meanwhile (the servers are unref'd while they run). */
function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  child.ref();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/** Starts one redis-server; `extraArgs` are passed as command-line config (e.g. `['--cluster-enabled', 'yes']`). */
export async function startRedis(extraArgs: string[] = []): Promise<RedisProcess> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'swl-redis-'));
  let child: ChildProcess;
  const launch = async (): Promise<void> => {
    child = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...extraArgs],
      { stdio: 'ignore' },
    );
    child.unref();
    await waitForPort(port);
  };
  await launch();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    async kill() {
      child.kill('SIGKILL');
      await exited(child);
    },
    async restart() {
      await launch();
    },
    async stop() {
      child.kill('SIGKILL');
      await exited(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface RedisCluster {
  readonly nodes: RedisProcess[];
  readonly startupNodes: { host: string; port: number }[];
  stop(): Promise<void>;
}

/** Starts `masters` cluster-enabled servers and joins them into one cluster with all 16384 slots covered. */
export async function startCluster(masters = 3): Promise<RedisCluster> {
  const nodes = await Promise.all(
    Array.from({ length: masters }, () => startRedis(['--cluster-enabled', 'yes', '--cluster-node-timeout', '2000'])),
  );
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
  const port = await freePort();
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
  const child = spawn('redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
  child.unref();
  await waitForPort(port);
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
