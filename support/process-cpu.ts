/**
 * CPU time of another process, from Linux's /proc: the bench reads it for its server
 * children and for redis-server.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

export const CLOCK_TICKS = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

/** CPU seconds a process has used (user + system, all its threads); 0 when it cannot be read. */
export function processCpu(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return 0;
  }
}
