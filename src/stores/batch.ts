import { batchArgv, batchReply } from '../algorithms/prelude';
import type { CheckScript, RawReply } from '../algorithms/types';
import { callEach, type Done } from '../callback';

/** Sends one script call for one key, or one batch call for several keys (see `checkLua` in `algorithms/prelude.ts`). */
export interface BatchSender {
  one(script: CheckScript, key: string, argv: readonly (string | number)[]): Promise<unknown>;
  many(script: CheckScript, keys: readonly string[], argv: readonly (string | number)[]): Promise<unknown>;
}

interface Entry {
  readonly script: CheckScript;
  readonly key: string;
  readonly argv: readonly (string | number)[];
  readonly done: Done<RawReply>;
}

/**
 * Checks per batch call. A batch goes out as soon as it is this full, so that Redis works on it
 * while this process reads more requests; waiting for the whole turn instead left the server
 * idle while Redis ran one large batch (measured with `npm run bench`, Fastify (a) over ioredis:
 * 0.43 of bare Fastify when a batch waited for the end of its turn, 0.56 flushed at 8, 0.59 at 16,
 * 0.43 at 32).
 */
const FLUSH_AT = 16;

/**
 * Gathers the checks started in one turn of the event loop and sends them as few script calls:
 * one write, one reply and one script run for up to {@link FLUSH_AT} requests instead of one each.
 * Under load several requests arrive per turn (the server reads many sockets per poll); a check
 * alone goes out at the end of its turn, as before. Each check keeps its own atomicity: the batch
 * script runs the same check for each key in turn, exactly as separate calls would in that order.
 */
export class CheckBatcher {
  private pending: Entry[] = [];
  private scheduled = false;

  constructor(private readonly sender: BatchSender) {}

  /** Queues a check; `done` gets its reply once its batch is answered. */
  check(script: CheckScript, key: string, argv: readonly (string | number)[], done: Done<RawReply>): void {
    this.pending.push({ script, key, argv, done });
    if (this.pending.length >= FLUSH_AT) {
      this.flush();
    } else if (!this.scheduled) {
      this.scheduled = true;
      // After the poll phase: every request read in this turn has had its check started by then.
      setImmediate(this.flushTurn);
    }
  }

  private readonly flushTurn = (): void => {
    this.scheduled = false;
    this.flush();
  };

  private flush(): void {
    const entries = this.pending;
    if (entries.length === 0) return;
    this.pending = [];
    // Entries of one script (algorithm) share a call; a limiter rarely mixes algorithms on one store.
    let from = 0;
    while (from < entries.length) {
      const { script } = entries[from];
      let to = from + 1;
      while (to < entries.length && entries[to].script === script) to++;
      this.send(script, to - from === entries.length ? entries : entries.slice(from, to));
      from = to;
    }
  }

  private send(script: CheckScript, group: readonly Entry[]): void {
    if (group.length === 1) {
      const [only] = group;
      this.sender.one(script, only.key, only.argv).then((reply) => only.done(undefined, reply as RawReply), only.done);
      return;
    }
    const keys: string[] = new Array(group.length);
    // The store hands out one arguments array while a check's inputs repeat: checks holding the
    // same one send it once (fewer arguments for the client to encode and for Redis to parse).
    const first = group[0].argv;
    let shared = true;
    for (let i = 0; i < group.length; i++) {
      keys[i] = group[i].key;
      if (group[i].argv !== first) shared = false;
    }
    let argv: string[];
    if (shared) argv = ['0', batchArgv(first)];
    else {
      argv = new Array(group.length + 1);
      argv[0] = '0';
      for (let i = 0; i < group.length; i++) argv[i + 1] = batchArgv(group[i].argv);
    }
    // Each answer may run the app's own code (the HTTP path goes on to the next handler): one
    // that throws must not leave the rest of the batch unanswered.
    this.sender.many(script, keys, argv).then(
      (replies) =>
        callEach(group, (entry, i) => {
          let reply: RawReply;
          try {
            reply = batchReply(String((replies as unknown[])[i]));
          } catch (error) {
            entry.done(error);
            return;
          }
          entry.done(undefined, reply);
        }),
      (error: unknown) => callEach(group, (entry) => entry.done(error)),
    );
  }
}
