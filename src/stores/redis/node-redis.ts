/**
 * The node-redis client behind a {@link RedisStore} (the `redis` package, versions 5 and 6):
 * a client from `createClient()` or a cluster from `createCluster()`. Everything
 * node-redis-specific stays in this file, including what it relies on across a reconnection
 * (the connection epochs, below); the types here are structural, so the package's declarations
 * do not need `redis` installed.
 */
import { setMaxListeners } from 'node:events';
import type { CheckScript } from '../../algorithms/types';
import { StoreUnavailableError } from '../../errors';
import type { ClusterNode, ClusterRouting } from './batch';
import { MemoryPolicies } from './memory-policy';
import {
  type ClientHooks,
  evalScript,
  loadOnEveryMaster,
  type RedisClientAdapter,
  rethrowStoreFailure,
  ScriptFunctions,
  sharedState,
  storeFailure,
} from './redis-client';

/** Why a node-redis client that is not open refuses a check: most often, connect() was never awaited. */
function closed(client: string): string {
  return `${client} is closed: await client.connect() before the first request (a client ended with close(), quit() or destroy() stays closed)`;
}

/**
 * The command options this package passes to node-redis: an `AbortSignal`, an empty type
 * mapping (replies as node-redis decodes them by default) and, to a standalone client, a
 * `timeout` of 0. Typed loosely, so the declarations need neither node-redis nor a DOM or
 * Node.js `AbortSignal` type.
 */
export interface NodeRedisCommandOptions {
  abortSignal?: { readonly aborted: boolean } | undefined;
  typeMapping?: object | undefined;
  timeout?: number | undefined;
}

/** The parts of a node-redis client (`createClient()`, node-redis 5 or 6) this package uses. */
export interface NodeRedisClient {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  sendCommand(args: string[], options?: NodeRedisCommandOptions): Promise<unknown>;
  /** Not called: its presence tells node-redis 5 and 6 from older versions. */
  withAbortSignal(signal: never): unknown;
  on(event: 'connect', listener: () => void): unknown;
}

/** The parts of a node-redis cluster (`createCluster()`, node-redis 5 or 6) this package uses. */
export interface NodeRedisCluster {
  readonly isOpen: boolean;
  /** Absent before node-redis 5.1 or so: `isOpen` stands in for it. */
  readonly isReady?: boolean | undefined;
  readonly masters: readonly unknown[];
  /** Per slot, its master: with its client once connected (node-redis 5 and 6 document `slots` and `nodeClient`). */
  readonly slots?: readonly ({ readonly master?: { readonly client?: NodeRedisClient } } | undefined)[];
  sendCommand(firstKey: string, isReadonly: boolean | undefined, args: string[], options?: NodeRedisCommandOptions): Promise<unknown>;
  on(event: 'node-connect', listener: () => void): unknown;
}

/** The parts of a node-redis Sentinel client (`createSentinel()`, node-redis 5 or 6) this package uses. */
export interface NodeRedisSentinel {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  sendCommand(isReadonly: boolean | undefined, args: string[], options?: NodeRedisCommandOptions): Promise<unknown>;
  /** Not called: its presence tells a Sentinel client from a plain one. */
  getMasterNode(): unknown;
  on(event: 'ready', listener: () => void): unknown;
}

type Send = (key: string, args: string[], options: NodeRedisCommandOptions) => Promise<unknown>;

/** Per client, shared by every store on it. */
interface ClientState {
  /** The options of every command that needs no epoch: {@link STANDALONE} or {@link CLUSTER}. */
  readonly baseOptions: NodeRedisCommandOptions;
  /** Undefined for a standalone client with `disableOfflineQueue: true`: node-redis queues nothing there. */
  readonly epoch: ConnectionEpoch<NodeRedisCommandOptions> | undefined;
  readonly hooks: ClientHooks;
  /** Which function libraries the client's servers hold. */
  readonly functions: ScriptFunctions;
}

/**
 * Replies as node-redis decodes them by default (integers as numbers), whatever type mapping
 * the client has. And, on a standalone client, no per-command timer: node-redis 6 arms one
 * (5 s by default) for every command, to drop a command still unwritten by then. It costs more
 * CPU than everything else node-redis does for a command (bench/micro.ts measures it), while the
 * limiter's `timeoutMs` already bounds every check and the store never leaves a check queued
 * across a reconnection. A cluster keeps its timer: a check routed to a node that is down waits
 * in that node's queue (offline queue on), and the timer is what bounds that queue.
 */
const STANDALONE: NodeRedisCommandOptions = Object.freeze({ typeMapping: Object.freeze({}), timeout: 0 });
const CLUSTER: NodeRedisCommandOptions = Object.freeze({ typeMapping: Object.freeze({}) });

function candidate(client: unknown): Record<string, unknown> | undefined {
  return typeof client === 'object' && client !== null ? (client as Record<string, unknown>) : undefined;
}

/** A node-redis cluster: `sendCommand(firstKey, isReadonly, args)` and a `masters` list. */
export function isNodeRedisCluster(client: unknown): client is NodeRedisCluster {
  const c = candidate(client);
  return c !== undefined && typeof c.sendCommand === 'function' && typeof c.on === 'function' && Array.isArray(c.masters);
}

/** A node-redis client: `sendCommand(args)` and a boolean `isReady`. */
export function isNodeRedisClient(client: unknown): client is NodeRedisClient {
  const c = candidate(client);
  return c !== undefined && typeof c.sendCommand === 'function' && typeof c.on === 'function' && typeof c.isReady === 'boolean';
}

/** A node-redis Sentinel client: `sendCommand(isReadonly, args)` and `getMasterNode()`. */
export function isNodeRedisSentinel(client: unknown): client is NodeRedisSentinel {
  const c = candidate(client);
  return c !== undefined && typeof c.getMasterNode === 'function' && typeof c.sendCommand === 'function' && typeof c.isReady === 'boolean';
}

/**
 * Why `client` cannot back a store, or `undefined`. node-redis 4 and older (and their legacy
 * mode) lack the `abortSignal` command option (`withAbortSignal` came with node-redis 5) that
 * keeps a failed check from being counted after a reconnection.
 */
export function unsupportedNodeRedis(client: NodeRedisClient | NodeRedisCluster | NodeRedisSentinel): string | undefined {
  if (isNodeRedisCluster(client) || isNodeRedisSentinel(client)) return undefined;
  return typeof client.withAbortSignal === 'function'
    ? undefined
    : 'a node-redis client older than version 5 (no withAbortSignal): use node-redis 5 or 6';
}

function stateOf(client: NodeRedisClient | NodeRedisCluster, cluster: boolean, hooks: ClientHooks): ClientState {
  const options = cluster ? undefined : (client as { options?: { disableOfflineQueue?: boolean } }).options;
  const baseOptions = cluster ? CLUSTER : STANDALONE;
  const epoch = options?.disableOfflineQueue === true ? undefined : new ConnectionEpoch(baseOptions);
  // The events that mark a new connection: `connect` on a client, `node-connect` on a cluster.
  if (epoch !== undefined) hooks.on(cluster ? 'node-connect' : 'connect', () => epoch.renew());
  watchMemoryPolicies(client, cluster, baseOptions, hooks);
  const load = (code: string) => {
    const command = ['FUNCTION', 'LOAD', 'REPLACE', code];
    if (!cluster) return (client as NodeRedisClient).sendCommand(command, baseOptions);
    return loadOnEveryMaster(mastersOf(client as NodeRedisCluster), (master) =>
      master.then((node) => node.sendCommand(command, baseOptions)),
    );
  };
  return { baseOptions, epoch, hooks, functions: new ScriptFunctions(load) };
}

/** The clients of a node-redis cluster's masters, as far as it knows them. */
function mastersOf(cluster: NodeRedisCluster): Promise<NodeRedisClient>[] {
  const nodeClient = (cluster as { nodeClient?: (node: unknown) => unknown }).nodeClient;
  if (typeof nodeClient !== 'function') return [];
  return cluster.masters.map((master) => Promise.resolve(nodeClient.call(cluster, master) as NodeRedisClient));
}

/**
 * Reads the memory policy of the node a client reaches at each new connection (now, if it is
 * ready), or of every master of a cluster (now).
 */
function watchMemoryPolicies(
  client: NodeRedisClient | NodeRedisCluster,
  cluster: boolean,
  options: NodeRedisCommandOptions,
  hooks: ClientHooks,
): void {
  const policies = new MemoryPolicies();
  if (cluster) {
    for (const master of mastersOf(client as NodeRedisCluster))
      policies.read(() => master.then((node) => node.sendCommand(['INFO'], options)));
    return;
  }
  const standalone = client as NodeRedisClient;
  const read = () => policies.read(() => standalone.sendCommand(['INFO'], options));
  hooks.on('ready', read);
  if (standalone.isReady) read();
}

/**
 * How often a Sentinel client's epoch ends on its own (see {@link nodeRedisSentinelAdapter}): a
 * check not written to Redis within this long, at most twice this long, is failed, never sent later.
 */
const SENTINEL_EPOCH_MS = 100;

/**
 * A node-redis Sentinel client (`createSentinel()`). Its `sendCommand` runs a command on a
 * master client leased from its pool and, when that client is not ready (its master died), waits
 * for Sentinel to report the topology again and sends the command then, however long a failover
 * takes: a check the limiter has long reported failed would be counted on the new master. The
 * Sentinel client does not tell its users when a master connection drops (its `client-error`
 * event stays internal), so epochs end by time as well: every {@link SENTINEL_EPOCH_MS}, and
 * whenever it reports a reconfiguration (`reconnecting`, `topology-change`). A command already
 * written to a master is not touched (node-redis removes its abort listener); one it would write
 * again after a dropped connection carries its old, aborted signal, and is refused.
 */
export function nodeRedisSentinelAdapter(sentinel: NodeRedisSentinel, useFunctions: boolean): RedisClientAdapter {
  const readiness = { event: 'ready', now: sentinel.isReady };
  const { state, release } = sharedState(
    sentinel,
    (hooks) => {
      const epoch = new ConnectionEpoch<NodeRedisCommandOptions>(STANDALONE);
      const policies = new MemoryPolicies();
      const readPolicy = () => policies.read(() => sentinel.sendCommand(false, ['INFO'], STANDALONE));
      hooks.on('reconnecting', () => epoch.renew());
      hooks.on('topology-change', () => {
        epoch.renew();
        readPolicy();
      });
      hooks.on('ready', readPolicy);
      if (sentinel.isReady) readPolicy();
      hooks.every(SENTINEL_EPOCH_MS, () => epoch.renew());
      const functions = new ScriptFunctions((code) => sentinel.sendCommand(false, ['FUNCTION', 'LOAD', 'REPLACE', code], STANDALONE));
      return { epoch, hooks, functions };
    },
    readiness,
  );
  const { epoch } = state;
  const functions = useFunctions ? state.functions : undefined;
  const evaluate = (lua: string, keys: readonly string[], argv: readonly (string | number)[]): Promise<unknown> => {
    const rest = [String(keys.length), ...keys];
    for (const arg of argv) rest.push(String(arg));
    let sent = epoch.options;
    return evalScript(
      lua,
      (command, script) => {
        sent = epoch.options;
        return sentinel.sendCommand(false, [command, script, ...rest], sent);
      },
      (error) => failure(error, sent),
      functions,
    );
  };
  const { hooks } = state;
  return {
    unavailable: () => {
      if (sentinel.isReady) return undefined;
      return sentinel.isOpen ? 'Redis Sentinel client is not ready' : closed('Redis Sentinel client');
    },
    whenConnected: (connected) => (firstConnection(hooks, sentinel.isOpen, sentinel.isReady) ? hooks.whenReady(connected) : undefined),
    run: (lua, keys, argv) => evaluate(lua, keys, argv),
    runBatch: (script: CheckScript, keys, argv) => evaluate(script.batchLua, keys, argv),
    cluster: false,
    del: (key) => sentinel.sendCommand(false, ['DEL', key], STANDALONE).then(undefined, rethrowStoreFailure),
    connectionsMade: () => hooks.connectionsMade,
    release,
  };
}

/**
 * Runs scripts as {@link evalScript} does (`FCALL` once their library is loaded, else `EVALSHA`,
 * and `EVAL` when Redis answers `NOSCRIPT`), through node-redis's `sendCommand`: one command per check.
 */
export function nodeRedisAdapter(client: NodeRedisClient | NodeRedisCluster, useFunctions: boolean): RedisClientAdapter {
  const cluster = isNodeRedisCluster(client);
  // A client emits `ready` once it can take commands; a cluster, `connect`.
  const readiness = { event: cluster ? 'connect' : 'ready', now: readyNow(client) };
  const { state, release } = sharedState(client, (hooks) => stateOf(client, cluster, hooks), readiness);
  const { baseOptions, epoch, hooks } = state;
  const functions = useFunctions ? state.functions : undefined;
  const send: Send = cluster
    ? (key, args, options) => (client as NodeRedisCluster).sendCommand(key, false, args, options)
    : (_key, args, options) => (client as NodeRedisClient).sendCommand(args, options);
  const optionsNow = (): NodeRedisCommandOptions => (epoch === undefined ? baseOptions : epoch.options);
  const evaluateWith = (to: Send, lua: string, keys: readonly string[], argv: readonly (string | number)[]): Promise<unknown> => {
    const rest = [String(keys.length), ...keys];
    for (const arg of argv) rest.push(String(arg));
    let sent = optionsNow();
    return evalScript(
      lua,
      (command, script) => {
        sent = optionsNow();
        return to(keys[0], [command, script, ...rest], sent);
      },
      (error) => failure(error, sent),
      functions,
    );
  };
  /**
   * Node batches on a node-redis cluster: the master of a slot from the cluster's slot map, and
   * its client once connected. A node batch is sent to that client directly, since a call without
   * keys would go to a random node; it carries the epoch's abort signal as every check does.
   */
  const routing: ClusterRouting | undefined = cluster
    ? {
        keyPrefix: '',
        nodeOf: (slot) => {
          const node = (client as NodeRedisCluster).slots?.[slot]?.master?.client;
          return node?.isReady === true ? node : undefined;
        },
        runOnNode: (node: ClusterNode, script, argv) => {
          const toNode: Send = (_key, args, options) => (node as NodeRedisClient).sendCommand(args, options);
          return evaluateWith(toNode, script.nodeBatchLua, [], argv);
        },
      }
    : undefined;
  return {
    // Never hand node-redis a check while it is not connected (before its first connection
    // too): it would queue it, to be counted when Redis comes back.
    unavailable: () => {
      if (readyNow(client)) return undefined;
      return client.isOpen ? 'Redis connection is not ready' : closed('Redis client');
    },
    // Between connect() and its first connection, wait: connect() need not be awaited first.
    whenConnected: (connected) => (firstConnection(hooks, client.isOpen, readyNow(client)) ? hooks.whenReady(connected) : undefined),
    run: (lua, keys, argv) => evaluateWith(send, lua, keys, argv),
    runBatch: (script: CheckScript, keys, argv) => evaluateWith(send, script.batchLua, keys, argv),
    cluster,
    routing,
    del: (key) => send(key, ['DEL', key], baseOptions).then(undefined, rethrowStoreFailure),
    connectionsMade: () => hooks.connectionsMade,
    release,
  };
}

/** Whether a client can take commands now (a cluster without `isReady`, before node-redis 5.1 or so: once open). */
function readyNow(client: NodeRedisClient | NodeRedisCluster): boolean {
  return client.isReady ?? client.isOpen;
}

/** Whether a client is making its first connection: `connect()` called (it is open), never ready yet. */
function firstConnection(hooks: ClientHooks, isOpen: boolean, isReady: boolean): boolean {
  return isOpen && !isReady && !hooks.everReady;
}

/** A check whose epoch ended was failed by `renew()` (or lost with its connection): say so with our error. */
function failure(error: unknown, options: NodeRedisCommandOptions): Error {
  if (options.abortSignal?.aborted) {
    return new StoreUnavailableError('Redis connection lost before the check was answered', { cause: error });
  }
  return storeFailure(error);
}

/*
 * Connection epochs: the one place this package relies on how node-redis behaves across a
 * reconnection, beyond what its documentation promises.
 *
 * node-redis never sends a command twice: when a connection drops, the commands written to it
 * and still awaiting their reply are rejected. But with its offline queue on (the default,
 * `disableOfflineQueue: false`), the commands it has not written yet stay queued and are written
 * to the next connection, however long that takes to come: a check made in the instant the
 * connection dropped (queued, not yet flushed to the socket), or routed to a cluster node whose
 * client is still connecting. The limiter may have reported such a check failed long before
 * (at `timeoutMs`), and it would still be counted. So every check carries the abort signal of
 * the current connection epoch, and the epoch ends when a connection is made: node-redis emits
 * `connect` (a cluster, `node-connect`) as soon as the new socket is connected, before its
 * handshake and its queue are written to it, and aborting a queued command removes it from the
 * queue and rejects it. A check is thus only ever written to a connection that was up when it
 * was made. A written command's abort listener is removed by node-redis, so an abort never
 * touches a check Redis is already running.
 *
 * With `disableOfflineQueue: true` node-redis itself rejects every queued command when a
 * connection drops and refuses commands while it is down, so a standalone client created that
 * way needs no signal, and gets none. A cluster's node clients are not visible from here, and a
 * check can wait for a node's first connection even then, so cluster checks always carry it.
 *
 * Verified on node-redis 6.3 and 5.12 (a test pins the installed major version and this
 * behaviour, and fails on an upgrade that changes it). node-redis 5 emits `node-connect` at
 * most for a node client's first connection (5.12 does, 5.0 does not): there, a cluster's
 * reconnections are protected by `defaults: { disableOfflineQueue: true }` alone (see docs/redis.md).
 */

/** The command options of a check: the adapter's own, and the epoch's abort signal. */
type EpochOptions<Base extends object> = Base & { readonly abortSignal: AbortSignal };

/** The abort signal of the current connection epoch, renewed (and the old one aborted) on each new connection. */
class ConnectionEpoch<Base extends object> {
  private controller = new AbortController();
  /** One options object per epoch, so a check allocates none. */
  private current: EpochOptions<Base>;

  /** `base`: the other command options every check carries. */
  constructor(private readonly base: Base) {
    this.current = this.optionsOf(this.controller);
  }

  get options(): EpochOptions<Base> {
    return this.current;
  }

  /** Ends the epoch: every check of it still queued (unwritten) is removed from the queue and rejected. */
  renew(): void {
    const ended = this.controller;
    this.controller = new AbortController();
    this.current = this.optionsOf(this.controller);
    ended.abort();
  }

  private optionsOf(controller: AbortController): EpochOptions<Base> {
    // Every check in flight listens to this one signal: no listener-count warning.
    setMaxListeners(0, controller.signal);
    return { ...this.base, abortSignal: controller.signal };
  }
}
