/**
 * The Valkey GLIDE client behind a {@link RedisStore} (`@valkey/valkey-glide`): a `GlideClient`
 * (standalone) or a `GlideClusterClient`. Everything GLIDE-specific stays in this file: how its
 * errors read, what the store knows of its connection, and, on a cluster, the slot map of node
 * batches. The types here are structural and nothing is imported from GLIDE, so neither the
 * package's code nor its declarations need it installed.
 *
 * Scripts run with `customCommand` (`FCALL` once their library is loaded, else `EVALSHA`, then
 * `EVAL` on `NOSCRIPT`, through the shared {@link evalScript}), not GLIDE's `Script` and
 * `invokeScript`: the same speed (bench/glide.ts measures both), no native `Script` objects to make
 * (which would need GLIDE imported) and release, and the same fallback as every other client.
 */
import type { CheckScript } from '../../algorithms/types';
import { RateLimitTimeoutError, storeErrorOf } from '../../errors';
import type { ClusterNode, ClusterRouting } from './batch';
import { MemoryPolicies } from './memory-policy';
import { type ClientHooks, evalScript, type RedisClientAdapter, ScriptFunctions, sharedState, storeFailure } from './redis-client';

/** GLIDE's `Decoder.String`: replies as strings, whatever `defaultDecoder` the client has. */
const DECODE_STRINGS = 1;

/** The routes of GLIDE's cluster client this package uses: any node, every primary, or one node by its address. */
type GlideRoute = 'randomNode' | 'allPrimaries' | { readonly type: 'routeByAddress'; readonly host: string; readonly port: number };

/** The parts of a GLIDE `GlideClient` (standalone) this package uses. */
export interface GlideClient {
  customCommand(args: string[], options?: { decoder?: number | undefined }): Promise<unknown>;
  /** Not called: its presence (with `customCommand`) tells a GLIDE client. */
  invokeScript(...args: never[]): Promise<unknown>;
}

/** The parts of a GLIDE `GlideClusterClient` this package uses. */
export interface GlideClusterClient {
  customCommand(args: string[], options?: { decoder?: number | undefined; route?: GlideRoute | undefined }): Promise<unknown>;
  invokeScript(...args: never[]): Promise<unknown>;
  /** Not called: its presence tells GLIDE's cluster client from its standalone one. */
  invokeScriptWithRoute(...args: never[]): Promise<unknown>;
}

function methods(client: unknown): Record<string, unknown> | undefined {
  return typeof client === 'object' && client !== null ? (client as Record<string, unknown>) : undefined;
}

/** A GLIDE client, standalone or cluster: `customCommand` and `invokeScript`. */
export function isGlideClient(client: unknown): client is GlideClient | GlideClusterClient {
  const c = methods(client);
  return c !== undefined && typeof c.customCommand === 'function' && typeof c.invokeScript === 'function';
}

function isGlideCluster(client: GlideClient | GlideClusterClient): client is GlideClusterClient {
  return typeof (client as Partial<GlideClusterClient>).invokeScriptWithRoute === 'function';
}

/*
 * GLIDE's errors. Its client does not hand over Redis's error reply as it came: the Rust core
 * reads the reply's first word into a kind of its own, and the message names that kind
 * ("An error was signalled by the server: - ReadOnly: You can't write against a read only
 * replica."), or, for a word it has no kind for, keeps it ("OOM: command not allowed when
 * used memory > 'maxmemory'."). The store gives its callers Redis's word back (`StoreError.reply`),
 * as with the other clients. The error classes are told by `name`, since GLIDE is not imported.
 */

/** The reply word of each kind GLIDE names in its message (the kinds of its Rust core, redis-rs). */
const REPLY_OF_KIND: Readonly<Record<string, string>> = {
  ResponseError: 'ERR',
  ExecAbortError: 'EXECABORT',
  BusyLoadingError: 'LOADING',
  NoScriptError: 'NOSCRIPT',
  Moved: 'MOVED',
  Ask: 'ASK',
  TryAgain: 'TRYAGAIN',
  ClusterDown: 'CLUSTERDOWN',
  CrossSlot: 'CROSSSLOT',
  MasterDown: 'MASTERDOWN',
  ReadOnly: 'READONLY',
  NotBusy: 'NOTBUSY',
  PermissionDenied: 'NOPERM',
};

const KNOWN_REPLY = /^An error was signalled by the server:\s*-\s*(\w+)(?::\s?([\s\S]*))?$/;
/** A reply word GLIDE has no kind for, then its text. */
const OTHER_REPLY = /^([^\s:]+): ([\s\S]*)$/;

/** Redis's error reply (first word, then text) in the message of a GLIDE `RequestError`, or `undefined` for a failure of the client's own. */
function replyOf(message: string): string | undefined {
  const known = KNOWN_REPLY.exec(message);
  if (known !== null) {
    const word = REPLY_OF_KIND[known[1]] ?? 'ERR';
    return known[2] === undefined || known[2] === word ? word : `${word} ${known[2]}`;
  }
  const other = OTHER_REPLY.exec(message);
  return other === null ? undefined : `${other[1]} ${other[2]}`;
}

/**
 * A GLIDE failure as the store reports it: an error reply of Redis becomes a `StoreError` with
 * Redis's first word as `reply`; GLIDE's `TimeoutError` (its `requestTimeout` passed) a
 * `RateLimitTimeoutError`, as the limiter's own timeout is; anything else (a connection lost,
 * the client closed) a `StoreUnavailableError`. GLIDE's error is kept as `cause`.
 */
export function glideFailure(error: unknown): Error {
  if (!(error instanceof Error)) return storeFailure(error);
  switch (error.name) {
    case 'TimeoutError':
      return new RateLimitTimeoutError("Redis did not answer within the GLIDE client's requestTimeout", { cause: error });
    case 'RequestError':
    case 'ExecAbortError': {
      const reply = replyOf(error.message);
      if (reply !== undefined) return storeErrorOf(reply, { cause: error });
      break;
    }
  }
  return storeFailure(error);
}

/** GLIDE lost a connection: what it was carrying failed, and it is reconnecting. */
function connectionLost(error: unknown): boolean {
  return error instanceof Error && error.name === 'ConnectionError';
}

/** How long a failed probe waits before the next (each probe itself waits up to the client's `requestTimeout`). */
const PROBE_PAUSE_MS = 20;

/**
 * What the stores on a standalone GLIDE client know of its connection. GLIDE reports no
 * connection events, and while it reconnects it holds every command it is given, and sends it
 * once it is connected again, unless its `requestTimeout` has passed. A `ConnectionError` says
 * the connection was lost (the checks in flight on it fail, and GLIDE does not send them
 * again): from then on checks fail at once rather than wait in GLIDE, and one `PING` at a time
 * asks GLIDE for the connection; its answer says GLIDE is connected again.
 */
class StandaloneConnection {
  /** Whether a connection was seen lost, and no `PING` has been answered since. */
  down = false;
  private stopped = false;

  constructor(
    private readonly client: GlideClient,
    private readonly hooks: ClientHooks,
    private readonly policies: MemoryPolicies,
  ) {
    hooks.onRemove(() => {
      this.stopped = true;
    });
    this.readPolicy();
  }

  /** Connections GLIDE made again after one was seen lost. */
  get connectionsMade(): number {
    return this.hooks.connectionsMade;
  }

  /** A failure of a command: when it says the connection was lost, checks fail at once until GLIDE has reconnected. */
  failed(error: unknown): void {
    if (this.down || !connectionLost(error)) return;
    this.down = true;
    this.probe();
  }

  private probe(): void {
    if (this.stopped) return;
    let answer: Promise<unknown>;
    try {
      answer = this.client.customCommand(['PING'], { decoder: DECODE_STRINGS });
    } catch {
      answer = Promise.reject();
    }
    answer.then(
      () => {
        this.down = false;
        this.hooks.connectionsMade++;
        // A new connection may reach another server (a restart, a replacement behind the same address).
        this.readPolicy();
      },
      (error: unknown) => {
        // A closed client stays closed, and says so at once to every command (GLIDE's ClosingError).
        if (error instanceof Error && error.name === 'ClosingError') {
          this.down = false;
          return;
        }
        setTimeout(() => this.probe(), PROBE_PAUSE_MS).unref();
      },
    );
  }

  private readPolicy(): void {
    this.policies.read(() => this.client.customCommand(['INFO'], { decoder: DECODE_STRINGS }));
  }
}

/**
 * A GLIDE client's adapter. On a standalone client, see {@link StandaloneConnection}. On a
 * cluster, GLIDE routes each script call by its first key and follows `MOVED` and `ASK` itself;
 * node batches go by a slot map of this adapter's own ({@link GlideSlotMap}).
 */
export function glideAdapter(client: GlideClient | GlideClusterClient, useFunctions: boolean): RedisClientAdapter {
  return isGlideCluster(client) ? glideClusterAdapter(client, useFunctions) : glideStandaloneAdapter(client, useFunctions);
}

/**
 * `lua` on `keys` with `argv` through `send`, as {@link evalScript} runs it (`FCALL` with
 * `functions`, `EVALSHA`, `EVAL`); a failure coded by {@link glideFailure}.
 */
function evaluate(
  send: (args: string[]) => Promise<unknown>,
  lua: string,
  { keys, argv, functions }: ScriptRun,
  failed?: (error: unknown) => void,
): Promise<unknown> {
  const rest = [String(keys.length), ...keys];
  for (const arg of argv) rest.push(String(arg));
  return evalScript(
    lua,
    (command, script) =>
      send([command, script, ...rest]).then(undefined, (error: unknown) => {
        failed?.(error);
        throw glideFailure(error);
      }),
    glideFailure,
    functions,
  );
}

/** A script's keys and arguments, and the client's function libraries when the store runs functions. */
interface ScriptRun {
  readonly keys: readonly string[];
  readonly argv: readonly (string | number)[];
  readonly functions: ScriptFunctions | undefined;
}

function glideStandaloneAdapter(client: GlideClient, useFunctions: boolean): RedisClientAdapter {
  const send = (args: string[]) => client.customCommand(args, { decoder: DECODE_STRINGS });
  const { state, release } = sharedState(client, (hooks) => ({
    connection: new StandaloneConnection(client, hooks, new MemoryPolicies()),
    functions: new ScriptFunctions((code) => send(['FUNCTION', 'LOAD', 'REPLACE', code])),
  }));
  const { connection } = state;
  const functions = useFunctions ? state.functions : undefined;
  const failed = (error: unknown) => connection.failed(error);
  return {
    unavailable: () => (connection.down ? 'the Redis connection was lost: GLIDE is reconnecting' : undefined),
    // A GLIDE client is connected once createClient() has resolved: no first connection to wait for.
    whenConnected: () => undefined,
    run: (lua, keys, argv) => evaluate(send, lua, { keys, argv, functions }, failed),
    runBatch: (script: CheckScript, keys, argv) => evaluate(send, script.batchLua, { keys, argv, functions }, failed),
    cluster: false,
    del: (key) =>
      send(['DEL', key]).then(undefined, (error: unknown) => {
        failed(error);
        throw glideFailure(error);
      }),
    connectionsMade: () => connection.connectionsMade,
    release,
  };
}

/** A master of a cluster, as {@link GlideSlotMap} knows it: a node batch is sent to it by address. */
interface GlideNode {
  readonly route: { readonly type: 'routeByAddress'; readonly host: string; readonly port: number };
}

const SLOTS = 16_384;

/** The least time between two reads of a cluster's slot map. */
const SLOT_MAP_EVERY_MS = 1_000;

/**
 * The master of each slot, read with `CLUSTER SLOTS` when the first store on the client is made,
 * and again (at most once a second) when a node batch held keys its node no longer serves or
 * failed. GLIDE keeps a slot map of its own but does not show it, and its route by slot id cannot
 * be used (GLIDE 2.5 sends every such command to the master of slot 0), so node batches go to a
 * master by its address. A map behind the cluster's costs nothing but a round trip: each check a
 * node refuses is sent again through GLIDE's routing, which follows `MOVED` and `ASK`.
 */
class GlideSlotMap {
  private readonly nodes: (GlideNode | undefined)[] = new Array(SLOTS).fill(undefined);
  private readAt = 0;
  private reading = false;
  /** Whether a read has succeeded: until one has, every lookup asks for one (a first read may fail). */
  private loaded = false;

  constructor(private readonly client: GlideClusterClient) {
    this.read();
  }

  nodeOf(slot: number): GlideNode | undefined {
    if (!this.loaded) this.read();
    return this.nodes[slot];
  }

  /** Reads the map again, unless it was read less than {@link SLOT_MAP_EVERY_MS} ago or is being read. */
  read(): void {
    if (this.reading || Date.now() - this.readAt < SLOT_MAP_EVERY_MS) return;
    this.reading = true;
    this.readAt = Date.now();
    let reply: Promise<unknown>;
    try {
      reply = this.client.customCommand(['CLUSTER', 'SLOTS'], { route: 'randomNode', decoder: DECODE_STRINGS });
    } catch {
      reply = Promise.reject();
    }
    reply
      .then(
        (ranges) => this.update(ranges),
        () => undefined,
      )
      .finally(() => {
        this.reading = false;
      });
  }

  /** A `CLUSTER SLOTS` reply: `[start, end, [host, port, id, ...], ...replicas]` per range. */
  private update(ranges: unknown): void {
    if (!Array.isArray(ranges)) return;
    this.loaded = true;
    const byAddress = new Map<string, GlideNode>();
    this.nodes.fill(undefined);
    for (const range of ranges) {
      if (!Array.isArray(range) || !Array.isArray(range[2])) continue;
      const [start, end, [host, port]] = range as [number, number, [unknown, unknown]];
      // An empty host means "the address you reached me at": unknown here, so no node batch for it.
      if (typeof host !== 'string' || host === '' || typeof port !== 'number') continue;
      const address = `${host}:${port}`;
      let node = byAddress.get(address);
      if (node === undefined) {
        node = { route: { type: 'routeByAddress', host, port } };
        byAddress.set(address, node);
      }
      for (let slot = Number(start); slot <= Number(end) && slot < SLOTS; slot++) this.nodes[slot] = node;
    }
  }
}

function glideClusterAdapter(client: GlideClusterClient, useFunctions: boolean): RedisClientAdapter {
  const { state, release } = sharedState(client, () => {
    const policies = new MemoryPolicies();
    // Every master's INFO, keyed by address.
    client.customCommand(['INFO'], { route: 'allPrimaries', decoder: DECODE_STRINGS }).then(
      (byNode) => {
        if (typeof byNode !== 'object' || byNode === null) return;
        for (const info of Object.values(byNode)) policies.read(() => Promise.resolve(info));
      },
      () => undefined,
    );
    const functions = new ScriptFunctions((code) =>
      client.customCommand(['FUNCTION', 'LOAD', 'REPLACE', code], { route: 'allPrimaries', decoder: DECODE_STRINGS }),
    );
    return { slots: new GlideSlotMap(client), functions };
  });
  const { slots } = state;
  const functions = useFunctions ? state.functions : undefined;
  const send = (args: string[]) => client.customCommand(args, { decoder: DECODE_STRINGS });
  const routing: ClusterRouting = {
    keyPrefix: '',
    nodeOf: (slot) => slots.nodeOf(slot),
    runOnNode: (node: ClusterNode, script, argv) => {
      const { route } = node as GlideNode;
      return evaluate(
        (args) => client.customCommand(args, { route, decoder: DECODE_STRINGS }),
        script.nodeBatchLua,
        { keys: [], argv, functions },
        () => slots.read(),
      );
    },
    mapStale: () => slots.read(),
  };
  return {
    // GLIDE's cluster client keeps a connection per node and holds a command for a node that is
    // down until its requestTimeout: whether one node is down says nothing of the others.
    unavailable: () => undefined,
    whenConnected: () => undefined,
    run: (lua, keys, argv) => evaluate(send, lua, { keys, argv, functions }),
    runBatch: (script: CheckScript, keys, argv) => evaluate(send, script.batchLua, { keys, argv, functions }),
    cluster: true,
    routing,
    del: (key) =>
      send(['DEL', key]).then(undefined, (error: unknown) => {
        throw glideFailure(error);
      }),
    connectionsMade: () => 0,
    release,
  };
}
