/**
 * The node-redis client behind a {@link RedisStore} (the `redis` package, versions 5 and 6):
 * a client from `createClient()` or a cluster from `createCluster()`. Everything
 * node-redis-specific stays in this file and in `node-redis-reconnect.ts`; the types here are
 * structural, so the package's declarations do not need `redis` installed.
 */
import { createHash } from 'node:crypto';
import type { CheckScript } from '../algorithms/types';
import { StoreUnavailableError } from '../errors';
import { ConnectionEpoch, watchConnections } from './node-redis-reconnect';
import type { RedisClientAdapter } from './redis-client';

/**
 * The command options this package passes to node-redis: an `AbortSignal`, an empty type
 * mapping (replies as node-redis decodes them by default) and, to a standalone client, a
 * `timeout` of 0. Typed loosely, so the declarations need neither node-redis nor a DOM or
 * Node.js `AbortSignal` type.
 */
export interface NodeRedisCommandOptions {
  abortSignal?: { readonly aborted: boolean };
  typeMapping?: object;
  timeout?: number;
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
  readonly isReady?: boolean;
  readonly masters: readonly unknown[];
  sendCommand(firstKey: string, isReadonly: boolean | undefined, args: string[], options?: NodeRedisCommandOptions): Promise<unknown>;
  on(event: 'node-connect', listener: () => void): unknown;
}

type Send = (key: string, args: string[], options: NodeRedisCommandOptions) => Promise<unknown>;

/** Per client, shared by every store on it. */
interface ClientState {
  /** The options of every command: {@link STANDALONE} or {@link CLUSTER}. */
  readonly plain: NodeRedisCommandOptions;
  /** Undefined for a standalone client with `disableOfflineQueue: true`: node-redis queues nothing there. */
  readonly epoch: ConnectionEpoch<NodeRedisCommandOptions> | undefined;
}

const states = new WeakMap<object, ClientState>();
/**
 * Replies as node-redis decodes them by default (integers as numbers), whatever type mapping
 * the client has. And, on a standalone client, no per-command timer: node-redis 6 arms one
 * (5 s by default) for every command, to drop a command still unwritten by then. It costs more
 * CPU than everything else node-redis does for a command (bench/micro.ts: a GET took 12.4 µs
 * with it, 1.6 µs without), while the limiter's `timeoutMs` already bounds every check and the
 * store never leaves a check queued across a reconnection. A cluster keeps its timer: a check routed to a node that is down waits
 * in that node's queue (offline queue on), and the timer is what bounds that queue.
 */
const STANDALONE: NodeRedisCommandOptions = Object.freeze({ typeMapping: Object.freeze({}), timeout: 0 });
const CLUSTER: NodeRedisCommandOptions = Object.freeze({ typeMapping: Object.freeze({}) });
const shas = new Map<string, string>();

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

/**
 * Why `client` cannot back a store, or `undefined`. node-redis 4 and older (and their legacy
 * mode) lack the `abortSignal` command option (`withAbortSignal` came with node-redis 5) that
 * keeps a failed check from being counted after a reconnection. A Sentinel client's
 * `sendCommand` takes other arguments, and its reconnections were not studied.
 */
export function unsupportedNodeRedis(client: NodeRedisClient | NodeRedisCluster): string | undefined {
  if (isNodeRedisCluster(client)) return undefined;
  if (typeof (client as { getMasterNode?: unknown }).getMasterNode === 'function') {
    return 'a node-redis Sentinel client (createSentinel) is not supported: use createClient() or createCluster()';
  }
  return typeof client.withAbortSignal === 'function'
    ? undefined
    : 'a node-redis client older than version 5 (no withAbortSignal): use node-redis 5 or 6';
}

function shaOf(lua: string): string {
  let sha = shas.get(lua);
  if (sha === undefined) {
    sha = createHash('sha1').update(lua).digest('hex');
    shas.set(lua, sha);
  }
  return sha;
}

function stateOf(client: NodeRedisClient | NodeRedisCluster, cluster: boolean): ClientState {
  let state = states.get(client);
  if (state === undefined) {
    const options = cluster ? undefined : (client as { options?: { disableOfflineQueue?: boolean } }).options;
    const plain = cluster ? CLUSTER : STANDALONE;
    const epoch = options?.disableOfflineQueue === true ? undefined : new ConnectionEpoch(plain);
    if (epoch !== undefined) watchConnections(client as { on(event: string, listener: () => void): unknown }, cluster, epoch);
    state = { plain, epoch };
    states.set(client, state);
  }
  return state;
}

function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}

/**
 * Runs scripts with `EVALSHA`, and `EVAL` when Redis answers `NOSCRIPT` (after a restart or
 * `SCRIPT FLUSH`), through node-redis's `sendCommand`: one command per check.
 */
export function nodeRedisAdapter(client: NodeRedisClient | NodeRedisCluster): RedisClientAdapter {
  const cluster = isNodeRedisCluster(client);
  const { plain, epoch } = stateOf(client, cluster);
  const send: Send = cluster
    ? (key, args, options) => (client as NodeRedisCluster).sendCommand(key, false, args, options)
    : (_key, args, options) => (client as NodeRedisClient).sendCommand(args, options);
  const optionsNow = (): NodeRedisCommandOptions => (epoch === undefined ? plain : epoch.options);
  const evaluate = (lua: string, keys: readonly string[], argv: readonly (string | number)[]): Promise<unknown> => {
    const args = ['EVALSHA', shaOf(lua), String(keys.length), ...keys];
    for (const arg of argv) args.push(String(arg));
    const options = optionsNow();
    return send(keys[0], args, options).then(undefined, (error: unknown) => {
      if (isNoScript(error)) {
        const again = optionsNow();
        return send(keys[0], ['EVAL', lua, ...args.slice(2)], again).then(undefined, (retryError: unknown) => {
          throw failure(retryError, again);
        });
      }
      throw failure(error, options);
    });
  };
  return {
    // Never hand node-redis a check while it is not connected (before its first connection
    // too): it would queue it, to be counted when Redis comes back.
    unavailable: () => {
      if (client.isReady ?? client.isOpen) return undefined;
      return client.isOpen ? 'Redis connection is not ready' : 'Redis client is closed';
    },
    run: (script, key, argv) => evaluate(script.lua, [key], argv),
    runBatch: cluster ? undefined : (script: CheckScript, keys, argv) => evaluate(script.batchLua, keys, argv),
    del: (key) => send(key, ['DEL', key], plain),
  };
}

/** A check whose epoch ended was failed by `renew()` (or lost with its connection): say so with our error. */
function failure(error: unknown, options: NodeRedisCommandOptions): unknown {
  if (options.abortSignal?.aborted) {
    return new StoreUnavailableError('Redis connection lost before the check was answered', { cause: error });
  }
  return error;
}
