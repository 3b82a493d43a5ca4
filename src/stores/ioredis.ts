/**
 * The ioredis client behind a {@link RedisStore}: `Redis`, `Cluster`, and API-compatible
 * forks such as iovalkey. Everything ioredis-specific stays in this file and in
 * `ioredis-command-queue.ts`; the types here are structural, so the package's declarations
 * do not need ioredis installed.
 */
import { createHash } from 'node:crypto';
import type { CheckScript } from '../algorithms/types';
import { StoreUnavailableError } from '../errors';
import { abandonUnansweredChecks } from './ioredis-command-queue';
import type { RedisClientAdapter } from './redis-client';

/** The parts of an ioredis `Redis` or `Cluster` this package uses. */
export interface IoredisClient {
  readonly status: string;
  /** `true` on a `Cluster`, whose keys live on several nodes. */
  readonly isCluster?: boolean;
  evalsha(sha: string, numberOfKeys: number, ...args: (string | number)[]): Promise<unknown>;
  eval(lua: string, numberOfKeys: number, ...args: (string | number)[]): Promise<unknown>;
  del(...keys: string[]): Promise<number>;
  on(event: 'ready' | 'close', listener: () => void): unknown;
}

/** Per client, shared by every store on it: whether it was ever ready, and this package's scripts (bodies and SHA-1s). */
interface ClientState {
  everReady: boolean;
  readonly scripts: { readonly single: Set<string>; readonly batch: Set<string> };
  /** SHA-1 of each script body sent on this client. */
  readonly shas: Map<string, string>;
}

const states = new WeakMap<IoredisClient, ClientState>();

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

/**
 * Runs scripts with the client's own `evalsha`, and `eval` when Redis answers `NOSCRIPT`
 * (after a restart or `SCRIPT FLUSH`); defines nothing on the client. Batches of checks run on
 * standalone clients only: a Cluster's keys live on several nodes.
 */
export function ioredisAdapter(client: IoredisClient): RedisClientAdapter {
  let state = states.get(client);
  if (state === undefined) {
    const created: ClientState = {
      everReady: client.status === 'ready',
      scripts: { single: new Set(), batch: new Set() },
      shas: new Map(),
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
    run: (script, key, argv) => evaluate(client, clientState, script.lua, 'single', 1, [key], argv),
    runBatch:
      client.isCluster === true
        ? undefined
        : (script: CheckScript, keys, argv) => evaluate(client, clientState, script.batchLua, 'batch', keys.length, keys, argv),
    del: (key) => client.del(key),
  };
}

/** `EVALSHA` of `lua`, and `EVAL` when Redis answers `NOSCRIPT` (after a restart or `SCRIPT FLUSH`). */
function evaluate(
  client: IoredisClient,
  state: ClientState,
  lua: string,
  kind: 'single' | 'batch',
  numberOfKeys: number,
  keys: readonly string[],
  argv: readonly (string | number)[],
): Promise<unknown> {
  let sha = state.shas.get(lua);
  if (sha === undefined) {
    sha = createHash('sha1').update(lua).digest('hex');
    state.shas.set(lua, sha);
    state.scripts[kind].add(lua);
    state.scripts[kind].add(sha);
  }
  return client.evalsha(sha, numberOfKeys, ...keys, ...argv).then(undefined, (error: unknown) => {
    if (error instanceof Error && error.message.startsWith('NOSCRIPT')) return client.eval(lua, numberOfKeys, ...keys, ...argv);
    throw error;
  });
}
