/**
 * The memory policy of each Redis node a store reaches: a node with `maxmemory` set and a policy
 * other than `noeviction` may evict rate-limit keys under memory pressure (every key this package
 * writes has a TTL, so the `volatile-*` policies evict them too), silently giving identifiers their
 * quota back. Read with `INFO` (which works where `CONFIG` is disabled) once a connection to a node
 * is up, never on the path of a check; warned once per Redis server process (its `run_id`) per client.
 */
import { warn } from '../../errors';

/** One `field:value` line of an `INFO` reply. */
function field(info: string, name: string): string | undefined {
  const match = new RegExp(`^${name}:(.*)$`, 'm').exec(info);
  return match?.[1].trim();
}

/** The memory policies of the Redis servers one client reaches: each read at most once per server process. */
export class MemoryPolicies {
  /** The `run_id` of every node already read, warned about or not. */
  private readonly seen = new Set<string>();

  /** Sends `INFO` with `send` and checks its reply; a failure (INFO renamed or refused) is ignored. */
  read(send: () => Promise<unknown>): void {
    let reply: Promise<unknown>;
    try {
      reply = send();
    } catch {
      return;
    }
    reply.then(
      (info) => this.check(String(info)),
      () => undefined,
    );
  }

  /** Reads an `INFO` reply (server and memory sections) and warns if its node can evict. */
  private check(info: string): void {
    const runId = field(info, 'run_id');
    const policy = field(info, 'maxmemory_policy');
    const maxmemory = Number(field(info, 'maxmemory'));
    if (runId === undefined || policy === undefined || this.seen.has(runId)) return;
    this.seen.add(runId);
    if (policy === 'noeviction' || !(maxmemory > 0)) return;
    const port = field(info, 'tcp_port');
    warn(
      'SWL_EVICTING_MEMORY',
      `The Redis server on port ${port} (run_id ${runId}) has maxmemory ${maxmemory} and maxmemory-policy ${policy}: when memory is full it may evict rate-limit keys, giving identifiers their quota back without a word. Use maxmemory-policy noeviction on the Redis that holds rate limits (full memory then fails checks with SWL_STORE_ERROR OOM, handled by failMode), or give it room enough never to evict.`,
    );
  }
}
