/**
 * The ioredis client behind a {@link RedisStore}: `Redis`, `Cluster`, and API-compatible
 * forks such as iovalkey. Everything ioredis-specific stays in this file and in
 * `ioredis-command-queue.ts`; the types here are structural, so the package's declarations
 * do not need ioredis installed.
 */
import { createHash } from 'node:crypto';
import type { Script } from '../algorithms/types';
import { StoreUnavailableError } from '../errors';
import { abandonUnansweredChecks } from './ioredis-command-queue';
import type { RedisClientAdapter } from './redis-client';

/** The parts of an ioredis `Redis` or `Cluster` this package uses. */
export interface IoredisClient {
  readonly status: string;
  defineCommand(name: string, definition: { numberOfKeys?: number; lua: string }): void;
  del(...keys: string[]): Promise<number>;
  on(event: 'ready' | 'close', listener: () => void): unknown;
}

type ScriptRunner = (key: string, ...argv: (string | number)[]) => Promise<unknown>;

/** Per client, shared by every store on it: whether it was ever ready, and this package's scripts (bodies and SHA-1s). */
interface ClientState {
  everReady: boolean;
  readonly scripts: Set<string>;
  readonly runners: Map<Script<unknown>, ScriptRunner>;
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
    const created: ClientState = { everReady: client.status === 'ready', scripts: new Set(), runners: new Map() };
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
    run: (script, key, argv) => runnerFor(client, clientState, script)(key, ...argv),
    del: (key) => client.del(key),
  };
}

function runnerFor(client: IoredisClient, state: ClientState, script: Script<unknown>): ScriptRunner {
  let runner = state.runners.get(script);
  if (runner === undefined) {
    const sha = createHash('sha1').update(script.lua).digest('hex');
    const name = `slidingWindowLimiter_${sha}`;
    const commands = client as unknown as Record<string, ScriptRunner>;
    if (typeof commands[name] !== 'function') client.defineCommand(name, { numberOfKeys: 1, lua: script.lua });
    runner = commands[name].bind(client);
    state.runners.set(script, runner);
    state.scripts.add(script.lua);
    state.scripts.add(sha);
  }
  return runner;
}
