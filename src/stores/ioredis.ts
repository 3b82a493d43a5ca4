/**
 * The ioredis client behind a {@link RedisStore}: `Redis`, `Cluster`, and API-compatible
 * forks such as iovalkey. Everything ioredis-specific stays in this file and in
 * `ioredis-command-queue.ts`; the types here are structural, so the package's declarations
 * do not need ioredis installed.
 */
import { createHash } from 'node:crypto';
import type { CheckScript, Script } from '../algorithms/types';
import { StoreUnavailableError } from '../errors';
import { abandonUnansweredChecks } from './ioredis-command-queue';
import type { RedisClientAdapter } from './redis-client';

/** The parts of an ioredis `Redis` or `Cluster` this package uses. */
export interface IoredisClient {
  readonly status: string;
  /** `true` on a `Cluster`, whose keys live on several nodes. */
  readonly isCluster?: boolean;
  defineCommand(name: string, definition: { numberOfKeys?: number; lua: string }): void;
  del(...keys: string[]): Promise<number>;
  on(event: 'ready' | 'close', listener: () => void): unknown;
}

type ScriptRunner = (...args: (string | number)[]) => Promise<unknown>;

/** Per client, shared by every store on it: whether it was ever ready, and this package's scripts (bodies and SHA-1s). */
interface ClientState {
  everReady: boolean;
  readonly scripts: { readonly single: Set<string>; readonly batch: Set<string> };
  readonly runners: Map<string, ScriptRunner>;
}

const states = new WeakMap<IoredisClient, ClientState>();

export function isIoredisClient(client: unknown): client is IoredisClient {
  const candidate = client as Partial<IoredisClient> | null;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.defineCommand === 'function' &&
    typeof candidate.del === 'function' &&
    typeof candidate.on === 'function'
  );
}

/**
 * Runs scripts with `defineCommand`, which sends `EVALSHA` and falls back to `EVAL` by itself
 * when Redis answers `NOSCRIPT` (after a restart or `SCRIPT FLUSH`).
 */
export function ioredisAdapter(client: IoredisClient): RedisClientAdapter {
  let state = states.get(client);
  if (state === undefined) {
    const created: ClientState = {
      everReady: client.status === 'ready',
      scripts: { single: new Set(), batch: new Set() },
      runners: new Map(),
    };
    client.on('ready', () => {
      created.everReady = true;
    });
    client.on('close', () =>
      abandonUnansweredChecks(
        client,
        created.scripts,
        () => new StoreUnavailableError('Redis connection lost before the check was answered'),
      ),
    );
    states.set(client, created);
    state = created;
  }
  const clientState = state;
  return {
    // ioredis queues commands while disconnected and replays them on reconnect, so a check
    // already failed open could still be counted minutes later. Once the connection has been
    // up, refuse to queue: fail now, count nothing.
    unavailable: () => (client.status !== 'ready' && clientState.everReady ? `Redis connection is ${client.status}` : undefined),
    run: (script, key, argv) => runnerFor(client, clientState, script.lua, 'single')(key, ...argv),
    runBatch:
      client.isCluster === true
        ? undefined
        : (script: CheckScript, keys, argv) => runnerFor(client, clientState, script.batchLua, 'batch')(keys.length, ...keys, ...argv),
    del: (key) => client.del(key),
  };
}

/**
 * The command running `lua` on this client, defined once. A single-key script takes its key
 * first; a batch script takes the number of keys first (`numberOfKeys` left to the call).
 */
function runnerFor(client: IoredisClient, state: ClientState, lua: string, kind: 'single' | 'batch'): ScriptRunner {
  let runner = state.runners.get(lua);
  if (runner === undefined) {
    const sha = createHash('sha1').update(lua).digest('hex');
    const name = `slidingWindowLimiter_${sha}`;
    const commands = client as unknown as Record<string, ScriptRunner>;
    if (typeof commands[name] !== 'function') client.defineCommand(name, kind === 'single' ? { numberOfKeys: 1, lua } : { lua });
    runner = commands[name].bind(client);
    state.runners.set(lua, runner);
    state.scripts[kind].add(lua);
    state.scripts[kind].add(sha);
  }
  return runner;
}
