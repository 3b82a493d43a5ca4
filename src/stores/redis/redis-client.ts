/**
 * What a {@link RedisStore} needs of a Redis client, and what every client adapter shares: the
 * scripts' SHA-1s and functions, the `FCALL`, `EVALSHA` and `EVAL` fallbacks, the loading of
 * function libraries, the listeners and timers made on a client
 * (removed when its stores close), and the coding of failures. One small adapter per client kind
 * (ioredis.ts, node-redis.ts, glide.ts) implements the rest, so the store logic is written once.
 */
import { createHash } from 'node:crypto';
import { ALGORITHMS } from '../../algorithms';
import { RELEASE, RENEW } from '../../algorithms/lease';
import type { CheckScript, FunctionLibrary } from '../../algorithms/types';
import { callEach } from '../../async';
import { RateLimitTimeoutError, StoreError, StoreUnavailableError, storeErrorOf } from '../../errors';
import type { ClusterRouting } from './batch';

export interface RedisClientAdapter {
  /** Why a command sent now would not go to Redis at once (to fail instead of queueing it), or `undefined`. */
  unavailable(): string | undefined;
  /**
   * Runs a script (`lua`) on its keys, all in one Cluster slot: `FCALL` of its function when the
   * store runs functions and the library is loaded, else `EVALSHA`, falling back to `EVAL` when
   * Redis answers `NOSCRIPT` ({@link evalScript}).
   */
  run(lua: string, keys: readonly string[], argv: readonly (string | number)[]): Promise<unknown>;
  del(key: string): Promise<unknown>;
  /** Runs a check script's batch form on several keys in one call (see `batch.ts`); on a Cluster, keys of one slot. */
  runBatch(script: CheckScript, keys: readonly string[], argv: readonly string[]): Promise<unknown>;
  /** Whether keys live on several nodes (a Cluster): then a batch holds the keys of one slot only. */
  readonly cluster: boolean;
  /** On a Cluster: the slots and nodes of keys, for batches per node (see `batch.ts`). */
  readonly routing?: ClusterRouting | undefined;
  /**
   * While the client makes its first connection (never ready yet, and trying): calls `connected`
   * once it is ready, and answers a function that stops waiting. `undefined` otherwise: the client
   * is ready, or `unavailable()` says why it takes no command.
   */
  whenConnected(connected: () => void): (() => void) | undefined;
  /** How many times the client has become ready: each a connection (re)made. */
  connectionsMade(): number;
  /** This store is done with the client: once every store on it is, the listeners and timers made on it are removed. */
  release(): void;
}

/** What the adapters listen to on a client: any of the clients' event emitters. */
interface Emitter {
  on(event: string, listener: (...args: never[]) => void): unknown;
  off?(event: string, listener: (...args: never[]) => void): unknown;
  removeListener?(event: string, listener: (...args: never[]) => void): unknown;
}

function isEmitter(client: object): client is Emitter {
  return typeof (client as Partial<Emitter>).on === 'function';
}

/** How a client tells it can take commands: the event it emits then, and whether it can now. */
export interface Readiness {
  readonly event: string;
  readonly now: boolean;
}

/** A client ready when its first store comes, as a Valkey GLIDE client is once created. */
const ALWAYS_READY: Readiness = { event: 'ready', now: true };

/**
 * The listeners and timers the stores on one client made on it, made once however many stores
 * share the client, and removed when the last of them is closed.
 */
export class ClientHooks {
  private readonly undo: (() => void)[] = [];
  /**
   * Connections (re)made: ready events seen, on a client that emits them; an adapter whose
   * client emits none counts them itself. The limiter's circuit breaker probes at once after one.
   */
  connectionsMade = 0;
  /** Whether the client was ever ready: when the first store came, or since. */
  everReady: boolean;
  /** Calls waiting for the client's first connection (see `RedisClientAdapter.whenConnected`). */
  private readonly waiting = new Set<() => void>();

  /**
   * `client`: an event emitter, or a client that emits nothing (Valkey GLIDE): then {@link on} is
   * not called. `readiness`: the event it emits once it can take commands, and whether it can now.
   */
  constructor(
    private readonly client: object,
    readiness: Readiness = ALWAYS_READY,
  ) {
    this.everReady = readiness.now;
    if (isEmitter(client)) {
      this.on(readiness.event, () => {
        this.connectionsMade++;
        this.everReady = true;
        if (this.waiting.size === 0) return;
        const connected = [...this.waiting];
        this.waiting.clear();
        // On the next tick: what a waiting call runs must not throw into the client's own event.
        process.nextTick(() => callEach(connected, (go) => go()));
      });
    }
  }

  /** Calls `connected` at the client's next ready event; answers a function that stops waiting. */
  whenReady(connected: () => void): () => void {
    this.waiting.add(connected);
    return () => {
      this.waiting.delete(connected);
    };
  }

  on(event: string, listener: (...args: never[]) => void): void {
    const client = this.client as Emitter;
    client.on(event, listener);
    this.undo.push(() => (client.off ?? client.removeListener)?.call(client, event, listener));
  }

  /** Calls `undo` when the last store on the client is closed (to stop what an adapter runs for the client). */
  onRemove(undo: () => void): void {
    this.undo.push(undo);
  }

  /** Calls `tick` every `ms` (a timer that does not hold the process open). */
  every(ms: number, tick: () => void): void {
    const timer = setInterval(tick, ms);
    timer.unref();
    this.undo.push(() => clearInterval(timer));
  }

  remove(): void {
    for (const undo of this.undo.splice(0)) undo();
  }
}

interface Shared {
  readonly state: unknown;
  readonly hooks: ClientHooks;
  stores: number;
}

/** Per client: the state its adapter keeps, shared by the stores on it (state that belongs to the client). */
const sharedByClient = new WeakMap<object, Shared>();

/**
 * The state an adapter keeps for `client`, made by `make` (with the client's hooks) for the first
 * store on it; `release` is that store's part of closing: the last one removes the hooks.
 * `readiness`: how the client tells it can take commands (by default, ready from the start).
 */
export function sharedState<State>(
  client: object,
  make: (hooks: ClientHooks) => State,
  readiness?: Readiness,
): { readonly state: State; release(): void } {
  let shared = sharedByClient.get(client);
  if (shared === undefined) {
    const hooks = new ClientHooks(client, readiness);
    shared = { state: make(hooks), hooks, stores: 0 };
    sharedByClient.set(client, shared);
  }
  shared.stores++;
  const mine = shared;
  let released = false;
  return {
    state: mine.state as State,
    release: () => {
      if (released) return;
      released = true;
      mine.stores--;
      if (mine.stores > 0) return;
      mine.hooks.remove();
      if (sharedByClient.get(client) === mine) sharedByClient.delete(client);
    },
  };
}

/** A script of this package is called on one key (a check or a settle), or on many (a batch of checks). */
export type ScriptKind = 'single' | 'batch';

const sha1 = (lua: string) => createHash('sha1').update(lua).digest('hex');

/** What this package knows of one of its scripts: its SHA-1, its kind, and the function that runs it, if any. */
interface PackageScript {
  readonly sha: string;
  readonly kind: ScriptKind;
  readonly function?: { readonly name: string; readonly library: FunctionLibrary } | undefined;
}

/**
 * The package's scripts, by body, by SHA-1 and by function name: their SHA-1, kind and function,
 * computed once when this module loads.
 */
const PACKAGE_SCRIPTS: ReadonlyMap<string, PackageScript> = (() => {
  const scripts = new Map<string, PackageScript>();
  const add = (lua: string, kind: ScriptKind, library?: FunctionLibrary, name?: string) => {
    const known = { sha: sha1(lua), kind, function: library && name ? { name, library } : undefined };
    scripts.set(lua, known);
    scripts.set(known.sha, known);
    if (name !== undefined) scripts.set(name, known);
  };
  for (const { check, leaseCheck, settle, library } of Object.values(ALGORITHMS)) {
    const { functions } = library;
    add(check.lua, 'single', library, functions.check);
    add(check.batchLua, 'batch', library, functions.batch);
    add(check.nodeBatchLua, 'batch', library, functions.nodeBatch);
    add(leaseCheck.lua, 'single', library, functions.leaseCheck);
    add(settle.lua, 'single', library, functions.settle);
  }
  add(RELEASE.lua, 'single');
  add(RENEW.lua, 'single');
  return scripts;
})();

/** The SHA-1 of `lua` (the package's scripts' computed once; `known`, its entry when already looked up). */
export function shaOf(lua: string, known = PACKAGE_SCRIPTS.get(lua)): string {
  return known?.sha ?? sha1(lua);
}

/**
 * Whether `script` (the first argument of an `EVAL`, `EVALSHA` or `FCALL`: a body, a SHA-1 or a
 * function name) is one of this package's scripts, and of which kind.
 */
export function packageScriptKind(script: string): ScriptKind | undefined {
  return PACKAGE_SCRIPTS.get(script)?.kind;
}

/** The commands a script is run with: by SHA-1, by body, or as a function of a loaded library (its name). */
export type ScriptCommand = 'EVALSHA' | 'EVAL' | 'FCALL';

/**
 * Runs `lua`: as a function (`FCALL`) when `functions` has its library loaded; otherwise, or when
 * a server answers that it does not have the function, with `EVALSHA` and, when Redis answers
 * `NOSCRIPT` (after a restart or `SCRIPT FLUSH`), with `EVAL`. The fallbacks every client adapter
 * shares. `send` sends one of the three with the function's name, the script's SHA-1 or its body
 * as its first argument (then the key count, keys and arguments as usual), the client's way;
 * `fail` turns the failure of an attempt into the error to reject with.
 */
export function evalScript(
  lua: string,
  send: (command: ScriptCommand, script: string) => Promise<unknown>,
  fail: (error: unknown) => Error = storeFailure,
  functions?: ScriptFunctions,
): Promise<unknown> {
  const known = PACKAGE_SCRIPTS.get(lua);
  const sha = shaOf(lua, known);
  const fn = known?.function;
  if (functions === undefined || fn === undefined || !functions.loaded(fn.library)) return evalBySha(lua, sha, send, fail);
  return send('FCALL', fn.name).then(undefined, (error: unknown) => {
    if (!isFunctionNotFound(error)) throw fail(error);
    functions.lost(fn.library);
    return evalBySha(lua, sha, send, fail);
  });
}

function evalBySha(
  lua: string,
  sha: string,
  send: (command: ScriptCommand, script: string) => Promise<unknown>,
  fail: (error: unknown) => Error,
): Promise<unknown> {
  return send('EVALSHA', sha).then(undefined, (error: unknown) => {
    if (!isNoScript(error)) throw fail(error);
    return send('EVAL', lua).then(undefined, (retryError: unknown) => {
      throw fail(retryError);
    });
  });
}

/** A server answered `FCALL` that it has no such function (a node that never loaded it, or `FUNCTION FLUSH`). */
function isFunctionNotFound(error: unknown): boolean {
  return error instanceof Error && error.message.includes('Function not found');
}

/**
 * A server's answer to `FUNCTION LOAD` that says it never will load one: a server older than
 * Redis 7, or one whose ACL or configuration forbids the command (managed services).
 */
function refusesFunctions(error: unknown): boolean {
  const message = error instanceof Error ? error.message : String(error);
  return /unknown command|unknown subcommand|NOPERM|no permissions|PermissionDenied/i.test(message);
}

/**
 * Sends a function library's load to every master of a Cluster; rejects, to be tried again,
 * while the client knows no master yet.
 */
export function loadOnEveryMaster<Master>(masters: readonly Master[], load: (master: Master) => Promise<unknown>): Promise<unknown> {
  if (masters.length === 0) return Promise.reject(new Error('no Cluster master is known yet'));
  return Promise.all(masters.map(load));
}

/**
 * How long after a failed load (not a refusal: a connection lost, a node down) the next is tried,
 * and after a library's loss before another reloads it at once.
 */
const RELOAD_PAUSE_MS = 1_000;

/**
 * Per client: which of this package's function libraries its servers hold, and their loading.
 * A library is loaded (`FUNCTION LOAD REPLACE`, on every master) when a script of it is first
 * run; until it is, and whenever a server says it lacks a function (a node added to a Cluster,
 * `FUNCTION FLUSH`), scripts run with `EVALSHA` and the library is loaded again. A server that
 * refuses `FUNCTION LOAD` (Redis 6, an ACL without it) gets `EVALSHA` for good.
 */
export class ScriptFunctions {
  private readonly loadedLibraries = new Set<string>();
  private readonly loading = new Set<string>();
  /** When each library's last load failed, or it was lost twice within a second (by {@link now}). */
  private readonly failedAt = new Map<string, number>();
  /** When each library was last lost (by {@link now}). */
  private readonly lostAt = new Map<string, number>();
  private refused = false;

  /**
   * `load`: sends `FUNCTION LOAD REPLACE <code>` to every master, and settles once every one has
   * answered. `now`: the clock of the pause after a failed load.
   */
  constructor(
    private readonly load: (code: string) => Promise<unknown>,
    private readonly now: () => number = Date.now,
  ) {}

  /** Whether `library` is loaded; if not, starts loading it (the call at hand runs with `EVALSHA`). */
  loaded(library: FunctionLibrary): boolean {
    if (this.loadedLibraries.has(library.name)) return true;
    this.startLoading(library);
    return false;
  }

  /**
   * A server answered that it does not have a function of `library`: load it again, at once, or a
   * second later when it was lost less than a second ago too (a node the loads do not reach yet,
   * such as a master the client's slot map does not list, is not loaded in a loop).
   */
  lost(library: FunctionLibrary): void {
    if (!this.loadedLibraries.delete(library.name)) return;
    const now = this.now();
    const lostBefore = this.lostAt.get(library.name);
    this.lostAt.set(library.name, now);
    if (lostBefore !== undefined && now - lostBefore < RELOAD_PAUSE_MS) this.failedAt.set(library.name, now);
    this.startLoading(library);
  }

  private startLoading(library: FunctionLibrary): void {
    if (this.refused || this.loading.has(library.name)) return;
    const failedAt = this.failedAt.get(library.name);
    if (failedAt !== undefined && this.now() - failedAt < RELOAD_PAUSE_MS) return;
    this.loading.add(library.name);
    let loading: Promise<unknown>;
    try {
      loading = this.load(library.code);
    } catch (error) {
      loading = Promise.reject(error);
    }
    loading.then(
      () => {
        this.loading.delete(library.name);
        this.failedAt.delete(library.name);
        this.loadedLibraries.add(library.name);
      },
      (error: unknown) => {
        this.loading.delete(library.name);
        this.failedAt.set(library.name, this.now());
        if (refusesFunctions(error)) this.refused = true;
      },
    );
  }
}

/**
 * Redis answered that it does not hold the script (after a restart or `SCRIPT FLUSH`): the
 * client's own error, or a {@link StoreError} an adapter already made of it.
 */
function isNoScript(error: unknown): boolean {
  if (error instanceof StoreError) return error.reply === 'NOSCRIPT';
  return error instanceof Error && error.message.startsWith('NOSCRIPT');
}

/** The classes of Redis error replies: ioredis (and iovalkey) `ReplyError`, node-redis `ErrorReply` and its kinds. */
const REPLY_ERRORS: ReadonlySet<string> = new Set(['ReplyError', 'ErrorReply', 'SimpleError', 'BlobError']);

/**
 * A client's failure as this package reports it: an error reply from Redis becomes a
 * {@link StoreError} (code `SWL_STORE_ERROR`, its first word in `reply`), any other failure (a
 * connection down, refused, reset or closed, a command the client would not queue) a
 * {@link StoreUnavailableError}; the client's error is kept as `cause`.
 */
export function storeFailure(error: unknown): Error {
  if (error instanceof StoreUnavailableError || error instanceof StoreError || error instanceof RateLimitTimeoutError) return error;
  const message = error instanceof Error ? error.message : String(error);
  const kind = error instanceof Error ? error.constructor.name : '';
  if (REPLY_ERRORS.has(kind) || (error instanceof Error && error.name === 'ReplyError')) {
    return storeErrorOf(message, { cause: error });
  }
  // An ioredis Cluster that gave up following redirections (TRYAGAIN while a slot's keys are
  // split by a migration) names Redis's last reply in its message: Redis answered, with that error.
  const redirected = /^Too many Cluster redirections\. Last error: ReplyError: ([A-Z]+)/.exec(message);
  if (redirected !== null) return storeErrorOf(message, { cause: error }, redirected[1]);
  return new StoreUnavailableError(`Redis is unavailable: ${message}`, { cause: error });
}

/** Rethrows a client's failure as {@link storeFailure} reports it. */
export function rethrowStoreFailure(error: unknown): never {
  throw storeFailure(error);
}
