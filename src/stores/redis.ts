import { createHash } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { Algorithm, RawReply } from '../algorithms/types';
import { rejectUnknownKeys } from '../options';
import type { Store, StoreCheck } from './types';

/** Options of {@link RedisStore}. */
export interface RedisStoreOptions {
  /**
   * An ioredis `Redis` or `Cluster` instance, dedicated or shared. For a limiter that
   * stays fast while Redis is down, create it with `enableOfflineQueue: false` and
   * `maxRetriesPerRequest: 1` (see the README, "Redis outages").
   */
  client: Redis | Cluster;
}

/** Thrown (and handled by the adapters' `failMode`) when Redis cannot be reached right now. */
export class StoreUnavailableError extends Error {
  override readonly name = 'StoreUnavailableError';
}

type ScriptRunner = (key: string, ...args: (string | number)[]) => Promise<RawReply>;

/** Per client: whether it was ever ready, and the scripts (bodies and SHA-1s) this package runs on it. */
interface ClientState {
  everReady: boolean;
  readonly scripts: Set<string>;
}

const OPTIONS = new Set(['client']);
/** Clients on which this package's scripts are defined, with their state. */
const prepared = new WeakMap<Redis | Cluster, ClientState>();
/** Position of the dry-run flag in an EVAL or EVALSHA of a check: script, 1, key, now, cost, dryRun, ... */
const DRY_RUN_ARG = 5;

function commandName(algorithm: Algorithm): string {
  return `slidingWindowLimiter_${algorithm.name.replace(/-/g, '_')}`;
}

/**
 * Keeps rate-limit state in Redis (standalone or Cluster). Each check is one `EVALSHA`
 * of the algorithm's script, registered with ioredis `defineCommand`, which falls back
 * to `EVAL` by itself when Redis answers `NOSCRIPT` (after a restart or `SCRIPT FLUSH`).
 * Each identifier is one key, so every check touches a single Cluster slot.
 */
export class RedisStore implements Store {
  readonly client: Redis | Cluster;
  readonly needsTimeout = true;
  private readonly connection: ClientState;
  private readonly runners = new Map<Algorithm, ScriptRunner>();

  constructor(options: RedisStoreOptions) {
    if (options === null || typeof options !== 'object') throw new TypeError('RedisStore: expected an options object with a client');
    rejectUnknownKeys(options, OPTIONS, 'RedisStore');
    const { client } = options;
    if (!client || typeof (client as Redis).defineCommand !== 'function' || typeof (client as Redis).del !== 'function') {
      throw new TypeError('client: must be an ioredis Redis or Cluster instance');
    }
    this.client = client;
    let connection = prepared.get(client);
    if (!connection) {
      connection = { everReady: client.status === 'ready', scripts: new Set() };
      const state = connection;
      client.on('ready', () => {
        state.everReady = true;
      });
      client.on('close', () => abandonUnanswered(client, state));
      prepared.set(client, connection);
    }
    this.connection = connection;
  }

  check(algorithm: Algorithm, key: string, { now, cost, dryRun, tiers }: StoreCheck): Promise<RawReply> {
    const status = this.client.status;
    // ioredis queues commands while disconnected and replays them on reconnect, so a
    // check we already failed open could still be counted minutes later. Once the
    // connection has been up, refuse to queue: fail now, count nothing.
    if (status !== 'ready' && this.connection.everReady) {
      return Promise.reject(new StoreUnavailableError(`Redis connection is ${status}`));
    }
    const args: (string | number)[] = [now === undefined ? '' : now, cost, dryRun ? '1' : '0'];
    for (const tier of tiers) args.push(tier.limit, tier.window);
    return this.runner(algorithm)(key, ...args);
  }

  reset(key: string): Promise<void> {
    return this.client.del(key).then(() => undefined);
  }

  private runner(algorithm: Algorithm): ScriptRunner {
    let runner = this.runners.get(algorithm);
    if (!runner) {
      const name = commandName(algorithm);
      const client = this.client as unknown as Record<string, ScriptRunner>;
      if (typeof client[name] !== 'function') {
        this.client.defineCommand(name, { numberOfKeys: 1, lua: algorithm.lua });
      }
      runner = client[name].bind(this.client);
      this.runners.set(algorithm, runner);
      this.connection.scripts.add(algorithm.lua);
      this.connection.scripts.add(createHash('sha1').update(algorithm.lua).digest('hex'));
    }
    return runner;
  }
}

/**
 * When a connection drops, ioredis keeps the commands that were sent but not answered and,
 * with `autoResendUnfulfilledCommands` (on by default), sends them again once it has
 * reconnected, however long that took: a check the limiter has already reported failed
 * (timed out, failed open) would be counted when Redis comes back. This runs on `close`,
 * while those commands are still in the client's `commandQueue` (ioredis replaces the queue
 * only when it connects again): ours fail now, and become dry runs, so that a resent one
 * counts nothing. A Cluster has no such queue; its node connections are not resent.
 */
function abandonUnanswered(client: Redis | Cluster, state: ClientState): void {
  const queue = (client as Partial<Redis>).commandQueue;
  if (queue === undefined) return;
  for (let i = 0; i < queue.length; i++) {
    const command = queue.peekAt(i)?.command;
    if (command === undefined || (command.name !== 'evalsha' && command.name !== 'eval')) continue;
    if (!state.scripts.has(String(command.args[0]))) continue;
    command.args[DRY_RUN_ARG] = '1';
    command.reject(new StoreUnavailableError('Redis connection lost before the check was answered'));
  }
}
