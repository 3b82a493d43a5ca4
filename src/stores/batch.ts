import type { CheckScript, RawReply } from '../algorithms/types';

/** Sends one script call for one key, or one batch call for several keys (see `checkLua` in `algorithms/prelude.ts`). */
export interface BatchSender {
  one(script: CheckScript, key: string, argv: readonly (string | number)[]): Promise<unknown>;
  many(script: CheckScript, keys: readonly string[], argv: readonly (string | number)[]): Promise<unknown>;
}

interface Entry {
  readonly script: CheckScript;
  readonly key: string;
  readonly argv: readonly (string | number)[];
  readonly resolve: (reply: RawReply) => void;
  readonly reject: (error: unknown) => void;
}

/** Most checks in one batch call, so one call's arguments stay small. */
const MAX_BATCH = 256;

/**
 * Gathers the checks started in one turn of the event loop and sends them as one script call
 * per algorithm: one write, one reply and one script run for many requests instead of one each.
 * Under load several requests arrive per turn (the server reads many sockets per poll), and the
 * calls' cost was mostly per call, not per key; alone, a check goes out as before, at the end of
 * its turn. Each check keeps its own atomicity: the batch script runs the same check for each key
 * in turn, exactly as separate calls would in that order.
 */
export class CheckBatcher {
  private pending: Entry[] | undefined;

  constructor(private readonly sender: BatchSender) {}

  check(script: CheckScript, key: string, argv: readonly (string | number)[]): Promise<RawReply> {
    return new Promise<RawReply>((resolve, reject) => {
      if (this.pending === undefined) {
        this.pending = [];
        // After the poll phase: every request read in this turn has had its check started by then.
        setImmediate(this.flush);
      }
      this.pending.push({ script, key, argv, resolve, reject });
    });
  }

  private readonly flush = (): void => {
    const entries = this.pending ?? [];
    this.pending = undefined;
    if (entries.length === 1) {
      const [only] = entries;
      this.sender.one(only.script, only.key, only.argv).then((reply) => only.resolve(reply as RawReply), only.reject);
      return;
    }
    const byScript = new Map<CheckScript, Entry[]>();
    for (const entry of entries) {
      const group = byScript.get(entry.script);
      if (group === undefined) byScript.set(entry.script, [entry]);
      else group.push(entry);
    }
    for (const [script, group] of byScript) {
      for (let from = 0; from < group.length; from += MAX_BATCH) this.send(script, group.slice(from, from + MAX_BATCH));
    }
  };

  private send(script: CheckScript, group: readonly Entry[]): void {
    if (group.length === 1) {
      const [only] = group;
      this.sender.one(script, only.key, only.argv).then((reply) => only.resolve(reply as RawReply), only.reject);
      return;
    }
    const keys: string[] = new Array(group.length);
    const argv: (string | number)[] = ['0'];
    for (let i = 0; i < group.length; i++) {
      keys[i] = group[i].key;
      argv.push(group[i].argv.length);
      for (const arg of group[i].argv) argv.push(arg);
    }
    this.sender.many(script, keys, argv).then(
      (replies) => {
        for (let i = 0; i < group.length; i++) group[i].resolve((replies as RawReply[])[i]);
      },
      (error: unknown) => {
        for (const entry of group) entry.reject(error);
      },
    );
  }
}
