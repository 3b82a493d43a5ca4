/**
 * Redis's own count of the commands it ran (`INFO commandstats`), read before and after a
 * measurement by `npm run bench` and `npm run bench:scripts`.
 */
import type { Redis } from 'ioredis';

/** Calls and microseconds of every command since the server started (`INFO commandstats`), and of its script calls (`EVALSHA`, `EVAL`, `FCALL`). */
export interface CommandTotals {
  calls: number;
  scriptCalls: number;
  scriptUsec: number;
}

export async function commandTotals(nodes: readonly Redis[]): Promise<CommandTotals> {
  const totals: CommandTotals = { calls: 0, scriptCalls: 0, scriptUsec: 0 };
  for (const node of nodes) {
    const text = await node.info('commandstats');
    for (const match of text.matchAll(/^cmdstat_([a-z|]+):calls=(\d+),usec=(\d+)/gm)) {
      const [, command, calls, usec] = match;
      // The bench's own INFO calls are not the limiter's.
      if (command === 'info') continue;
      totals.calls += Number(calls);
      if (command === 'evalsha' || command === 'eval' || command === 'fcall') {
        totals.scriptCalls += Number(calls);
        totals.scriptUsec += Number(usec);
      }
    }
  }
  return totals;
}
