/**
 * The one place this package reaches into ioredis internals.
 *
 * When a connection drops, ioredis keeps the commands that were sent but not answered and,
 * with `autoResendUnfulfilledCommands` (on by default), sends them again once it has
 * reconnected, however long that took: a check the limiter has already reported failed
 * (timed out, failed open) would be counted when Redis comes back. On `close`, while those
 * commands are still in the client's `commandQueue` (ioredis replaces the queue only when it
 * connects again), ours are failed now and turned into dry runs, so that a resent one counts
 * nothing.
 *
 * `commandQueue` is public in ioredis's typings but not documented. Verified on ioredis 6
 * (a test pins the installed major version and this shape, and fails on an upgrade). Where the shape differs,
 * nothing is touched, one `SWL_IOREDIS_QUEUE_UNSUPPORTED` warning is emitted, and the store
 * keeps its documented behaviour: checks are never queued while the connection is down, but
 * a check in flight when it drops may be counted after a reconnect.
 */
import { DRY_RUN_ARGV } from '../algorithms/prelude';
import { warn } from '../errors';

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

/** Position of the dry-run flag in the arguments of an `EVAL`/`EVALSHA`: script, numkeys, key, then ARGV. */
const DRY_RUN_ARG = 2 + DRY_RUN_ARGV;

let warned = false;

/** The client's command queue when it has the shape this module knows; `undefined` for a Cluster (no queue) or another shape. */
export function commandQueueOf(client: object): CommandQueue | undefined {
  const queue = (client as { commandQueue?: unknown }).commandQueue;
  if (queue === undefined) return undefined;
  const candidate = queue as Partial<CommandQueue>;
  if (typeof candidate.length === 'number' && typeof candidate.peekAt === 'function') return queue as CommandQueue;
  if (!warned) {
    warned = true;
    warn(
      'SWL_IOREDIS_QUEUE_UNSUPPORTED',
      "This ioredis version's commandQueue has an unknown shape: checks unanswered when a Redis connection drops may be counted after it reconnects.",
    );
  }
  return undefined;
}

/** This package's scripts on a client, by body and SHA-1: single-key checks (and refunds), and batches of checks. */
export interface OurScripts {
  readonly single: ReadonlySet<string>;
  readonly batch: ReadonlySet<string>;
}

/**
 * Fails every unanswered `EVAL`/`EVALSHA` of one of `ours` in the client's queue with `error`,
 * and turns it into a dry run in case ioredis resends it: the dry-run flag of a single-key call,
 * or a batch's dry-run override (its first argument after the keys).
 */
export function abandonUnansweredChecks(client: object, ours: OurScripts, error: () => Error): void {
  const queue = commandQueueOf(client);
  if (queue === undefined) return;
  for (let i = 0; i < queue.length; i++) {
    const command = queue.peekAt(i)?.command;
    if (command === undefined || (command.name !== 'evalsha' && command.name !== 'eval')) continue;
    if (!Array.isArray(command.args)) continue;
    const script = String(command.args[0]);
    if (ours.single.has(script)) command.args[DRY_RUN_ARG] = '1';
    else if (ours.batch.has(script)) command.args[2 + Number(command.args[1])] = '1';
    else continue;
    command.reject(error());
  }
}
