/**
 * The ioredis client behind a {@link RedisStore}: `Redis`, `Cluster`, and API-compatible forks
 * such as iovalkey. Everything ioredis-specific stays in this file, including the one place this
 * package reaches into ioredis internals (its command queue, below). The types here are
 * structural, so the package's declarations do not need ioredis installed.
 */
import type { CheckScript } from '../../algorithms/types';
import { StoreUnavailableError, Warnings } from '../../errors';
import { dryRunArgIndex } from '../../protocol';
import type { ClusterNode, ClusterRouting } from './batch';
import { MemoryPolicies } from './memory-policy';
import {
  type ClientHooks,
  evalScript,
  loadOnEveryMaster,
  packageScriptKind,
  type RedisClientAdapter,
  rethrowStoreFailure,
  type ScriptCommand,
  ScriptFunctions,
  type ScriptKind,
  sharedState,
} from './redis-client';

/** The parts of an ioredis `Redis` or `Cluster` this package uses. */
export interface IoredisClient {
  readonly status: string;
  /** `true` on a `Cluster`, whose keys live on several nodes. */
  readonly isCluster?: boolean | undefined;
  evalsha(sha: string, numberOfKeys: number, ...args: (string | number)[]): Promise<unknown>;
  eval(lua: string, numberOfKeys: number, ...args: (string | number)[]): Promise<unknown>;
  fcall(name: string, numberOfKeys: number, ...args: (string | number)[]): Promise<unknown>;
  call(command: string, ...args: string[]): Promise<unknown>;
  del(...keys: string[]): Promise<number>;
  on(event: 'ready' | 'close', listener: () => void): unknown;
}

/** The parts of an ioredis node (a `Redis` of a `Cluster`'s pool) a node batch uses. */
interface IoredisNode extends IoredisClient {
  readonly options: { readonly host?: string | undefined; readonly port?: number | undefined };
}

/** The parts of an ioredis `Cluster` its routing uses: its slot map (node keys `host:port`, master first) and nodes. */
interface IoredisCluster {
  readonly slots: readonly (readonly string[] | undefined)[];
  readonly options: { readonly keyPrefix?: string | undefined };
  nodes(role: 'all' | 'master'): IoredisNode[];
  on(event: '+node' | '-node', listener: (node: IoredisNode) => void): unknown;
}

/** Per client, shared by every store on it. */
interface ClientState {
  readonly hooks: ClientHooks;
  /** The Redis servers whose memory policy was read (see memory-policy.ts). */
  readonly policies: MemoryPolicies;
  /** What was warned about this client (the unknown shape of its command queue). */
  readonly warnings: Warnings;
  /** On a Cluster: its nodes by address. */
  readonly nodes: ClusterNodes | undefined;
  /** Which function libraries the client's servers hold. */
  readonly functions: ScriptFunctions;
}

export function isIoredisClient(client: unknown): client is IoredisClient {
  const candidate = client as Partial<IoredisClient> | null;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.evalsha === 'function' &&
    typeof candidate.status === 'string' &&
    typeof candidate.del === 'function' &&
    typeof candidate.on === 'function'
  );
}

function stateOf(client: IoredisClient, hooks: ClientHooks): ClientState {
  const state: ClientState = {
    hooks,
    policies: new MemoryPolicies(),
    warnings: new Warnings(),
    nodes: client.isCluster === true ? clusterNodes(client as unknown as IoredisCluster, hooks) : undefined,
    functions: new ScriptFunctions((code) => loadEverywhere(client, code)),
  };
  hooks.on('close', () => abandonUnansweredChecks(client, packageScriptKind, state.warnings));
  // Each new connection may reach another node (a restart, a Sentinel failover).
  hooks.on('ready', () => readMemoryPolicies(client, state.policies));
  if (client.status === 'ready') readMemoryPolicies(client, state.policies);
  return state;
}

/** Loads a function library on the server of a standalone client, or on every master of a Cluster. */
function loadEverywhere(client: IoredisClient, code: string): Promise<unknown> {
  if (client.isCluster !== true) return client.call('FUNCTION', 'LOAD', 'REPLACE', code);
  const masters = (client as unknown as IoredisCluster).nodes('master');
  return loadOnEveryMaster(masters, (node) => node.call('FUNCTION', 'LOAD', 'REPLACE', code));
}

/** Reads the memory policy of the node a standalone client is connected to, or of every master of a Cluster. */
function readMemoryPolicies(client: IoredisClient, policies: MemoryPolicies): void {
  const info = (node: unknown) => () => (node as { info(): Promise<string> }).info();
  const nodes = (client as { nodes?: (role: string) => unknown[] }).nodes;
  if (client.isCluster === true && typeof nodes === 'function') {
    for (const node of nodes.call(client, 'master')) policies.read(info(node));
  } else policies.read(info(client));
}

/**
 * Runs scripts with the client's own `fcall` once their library is loaded, else `evalsha`, and
 * `eval` when Redis answers `NOSCRIPT` (after a restart or `SCRIPT FLUSH`), as
 * {@link evalScript} does; defines nothing on the client. On a Cluster, a batch
 * holds keys of one slot, and is routed (and redirected) by its first key as any command is.
 */
export function ioredisAdapter(client: IoredisClient, useFunctions: boolean): RedisClientAdapter {
  const readiness = { event: 'ready', now: client.status === 'ready' };
  const { state, release } = sharedState(client, (hooks) => stateOf(client, hooks), readiness);
  const { hooks } = state;
  const functions = useFunctions ? state.functions : undefined;
  return {
    // ioredis queues commands while disconnected and replays them on reconnect, so a check
    // already failed open could still be counted minutes later. Once the connection has been
    // up, refuse to queue: fail now, count nothing.
    unavailable: () => (client.status !== 'ready' && hooks.everReady ? `Redis connection is ${client.status}` : undefined),
    // Before its first connection, a client made with enableOfflineQueue: false refuses commands
    // ("Stream isn't writeable"), and one with the queue would send them however late: wait here.
    whenConnected: (connected) => (!hooks.everReady && CONNECTING.has(client.status) ? hooks.whenReady(connected) : undefined),
    run: (lua, keys, argv) => evaluate(client, lua, keys, argv, functions),
    runBatch: (script: CheckScript, keys, argv) => evaluate(client, script.batchLua, keys, argv, functions),
    cluster: client.isCluster === true,
    routing: state.nodes === undefined ? undefined : clusterRouting(client as unknown as IoredisCluster, state.nodes, functions),
    del: (key) => client.del(key).then(undefined, rethrowStoreFailure),
    connectionsMade: () => hooks.connectionsMade,
    release,
  };
}

/** The statuses of an ioredis client on its way to a connection (`'wait'`, of `lazyConnect`, waits for a command or `connect()`). */
const CONNECTING: ReadonlySet<string> = new Set(['connecting', 'connect', 'reconnecting', 'close']);

/** An ioredis `Cluster`'s nodes by address (`host:port`), kept current by its pool's `+node` and `-node` events. */
type ClusterNodes = Map<string, IoredisNode>;

function clusterNodes(cluster: IoredisCluster, hooks: ClientHooks): ClusterNodes {
  const nodes: ClusterNodes = new Map();
  const keyOf = (node: IoredisNode) => `${node.options.host}:${node.options.port}`;
  for (const node of cluster.nodes('all')) nodes.set(keyOf(node), node);
  hooks.on('+node', (node: IoredisNode) => nodes.set(keyOf(node), node));
  hooks.on('-node', (node: IoredisNode) => {
    if (nodes.get(keyOf(node)) === node) nodes.delete(keyOf(node));
  });
  return nodes;
}

/**
 * Node batches on an ioredis `Cluster`: the node of a slot from the cluster's slot map, and its
 * `Redis` from the cluster's pool. A node batch is sent to that `Redis` directly, since a call
 * without keys would go to a random node.
 */
function clusterRouting(cluster: IoredisCluster, nodes: ClusterNodes, functions: ScriptFunctions | undefined): ClusterRouting {
  return {
    keyPrefix: cluster.options.keyPrefix ?? '',
    nodeOf: (slot) => {
      const address = cluster.slots[slot]?.[0];
      const node = address === undefined ? undefined : nodes.get(address);
      return node?.status === 'ready' ? node : undefined;
    },
    runOnNode: (node: ClusterNode, script, argv) => evaluate(node as IoredisNode, script.nodeBatchLua, [], argv, functions),
  };
}

function evaluate(
  client: IoredisClient,
  lua: string,
  keys: readonly string[],
  argv: readonly (string | number)[],
  functions: ScriptFunctions | undefined,
): Promise<unknown> {
  return evalScript(lua, (command, script) => send(client, command, script, keys, argv), undefined, functions);
}

function send(
  client: IoredisClient,
  command: ScriptCommand,
  script: string,
  keys: readonly string[],
  argv: readonly (string | number)[],
): Promise<unknown> {
  switch (command) {
    case 'FCALL':
      return client.fcall(script, keys.length, ...keys, ...argv);
    case 'EVALSHA':
      return client.evalsha(script, keys.length, ...keys, ...argv);
    case 'EVAL':
      return client.eval(script, keys.length, ...keys, ...argv);
  }
}

/*
 * The command queues. When a connection drops, ioredis keeps two kinds of commands it will send
 * once it has reconnected, however long that took:
 *
 * - `commandQueue`: sent but not answered; resent with `autoResendUnfulfilledCommands` (on by
 *   default). ioredis replaces this queue only when it connects again.
 * - `offlineQueue` (with `enableOfflineQueue`, on by default): commands that found the socket
 *   already ended while the client still said `ready` (a check batched, and written a moment
 *   later, after Redis died). The store never hands ioredis a check while its
 *   status is not `ready`, so only that instant adds to it.
 *
 * A check the limiter has already reported failed (timed out, failed open or closed) would be
 * counted when Redis comes back. On `close`, while those commands are still in either queue,
 * ours are failed now and turned into dry runs, so that a resent one counts nothing.
 *
 * Both queues are public in ioredis's typings but not documented. Verified on ioredis 6 (a test
 * pins the installed major version and this shape, and fails on an upgrade). Where the shape
 * differs, nothing is touched, one `SWL_IOREDIS_QUEUE_UNSUPPORTED` warning is emitted, and the
 * store keeps its documented behaviour: checks are never queued while the connection is down,
 * but a check in flight when it drops may be counted after a reconnect.
 */

/** The parts of an ioredis command this module reads and writes. */
interface QueuedCommand {
  name: string;
  args: unknown[];
  reject(error: Error): void;
}

/** ioredis's `Deque<{ command }>`, as far as this module uses it. */
interface CommandQueue {
  readonly length: number;
  peekAt(index: number): { command?: QueuedCommand } | undefined;
}

/**
 * The client's `commandQueue` (or `offlineQueue`) when it has the shape this module knows;
 * `undefined` for a Cluster (no such queue) or another shape, warned about once per `warnings`.
 */
export function commandQueueOf(
  client: object,
  name: 'commandQueue' | 'offlineQueue' = 'commandQueue',
  warnings: Warnings = new Warnings(),
): CommandQueue | undefined {
  const queue = (client as Record<string, unknown>)[name];
  if (queue === undefined) return undefined;
  const candidate = queue as Partial<CommandQueue>;
  if (typeof candidate.length === 'number' && typeof candidate.peekAt === 'function') return queue as CommandQueue;
  warnings.once(
    'SWL_IOREDIS_QUEUE_UNSUPPORTED',
    () =>
      "This ioredis version's commandQueue has an unknown shape: checks unanswered when a Redis connection drops may be counted after it reconnects.",
  );
  return undefined;
}

/**
 * Fails every unanswered `EVAL`/`EVALSHA`/`FCALL` of one of this package's scripts in the client's
 * queues (sent, or waiting offline), and turns it into a dry run in case ioredis sends it after
 * reconnecting: the dry-run flag of a single-key call, or a batch's dry-run override.
 */
export function abandonUnansweredChecks(
  client: object,
  kindOf: (script: string) => ScriptKind | undefined = packageScriptKind,
  warnings?: Warnings,
): void {
  abandonIn(commandQueueOf(client, 'commandQueue', warnings), kindOf);
  abandonIn(commandQueueOf(client, 'offlineQueue', warnings), kindOf);
}

/** The commands of ioredis that run a script: the first argument names it, then come the key count, keys and arguments. */
const SCRIPT_COMMANDS: ReadonlySet<string> = new Set(['evalsha', 'eval', 'fcall']);

function abandonIn(queue: CommandQueue | undefined, kindOf: (script: string) => ScriptKind | undefined): void {
  if (queue === undefined) return;
  for (let i = 0; i < queue.length; i++) {
    const command = queue.peekAt(i)?.command;
    if (command === undefined || !SCRIPT_COMMANDS.has(command.name)) continue;
    if (!Array.isArray(command.args)) continue;
    const kind = kindOf(String(command.args[0]));
    if (kind === undefined) continue;
    command.args[dryRunArgIndex(Number(command.args[1]), kind === 'batch')] = '1';
    command.reject(new StoreUnavailableError('Redis connection lost before the check was answered'));
  }
}
