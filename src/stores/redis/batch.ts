/**
 * The batching of one event-loop turn's checks into few script calls, and the arguments of
 * repeated checks built once (so a batch whose checks share them sends them once).
 */
import type { CheckScript, RawReply } from '../../algorithms/types';
import { callEach, type Done } from '../../async';
import { batchArgv, batchReply, type ScriptCall, scriptArgv } from '../../protocol';
import { sameTiers, type Tier } from '../../tiers';
import { slotOf } from './cluster-slot';

/** Sends one script call for one key, or one batch call for several keys (the batch encoding of `protocol.ts`). */
export interface BatchSender {
  one(script: CheckScript, key: string, argv: readonly (string | number)[]): Promise<unknown>;
  many(script: CheckScript, keys: readonly string[], argv: readonly string[]): Promise<unknown>;
}

interface Entry {
  readonly script: CheckScript;
  readonly key: string;
  readonly argv: readonly (string | number)[];
  readonly done: Done<RawReply>;
}

/**
 * Checks per batch call. A batch goes out as soon as it is this full, so that Redis works on it
 * while this process reads more requests: waiting for the whole turn instead left the server idle
 * while Redis ran one large batch (`npm run bench`, Fastify (a); bench/NOTES.md has the sizes tried).
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

  constructor(
    private readonly sender: BatchSender,
    /** Keys live on several nodes: a batch call holds the keys of one cluster slot. */
    private readonly bySlot = false,
  ) {}

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
      const group = to - from === entries.length ? entries : entries.slice(from, to);
      if (this.bySlot && group.length > 1) for (const ofSlot of groupBySlot(group)) this.send(script, ofSlot);
      else this.send(script, group);
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
    const perKey: (readonly (string | number)[])[] = new Array(group.length);
    for (let i = 0; i < group.length; i++) {
      keys[i] = group[i].key;
      perKey[i] = group[i].argv;
    }
    // Checks holding the same arguments array (see RepeatedCheckArgv) send it once.
    const argv = batchArgv(perKey);
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

/**
 * `entries` split by cluster slot, in order of first appearance (the checks of one key keep their
 * order: a key has one slot). With distinct identifiers, keys rarely share a slot (16,384 of them)
 * and most groups hold one check; one busy identifier, or identifiers under one hash tag, share one.
 */
function groupBySlot(entries: readonly Entry[]): Entry[][] {
  const groups = new Map<number, Entry[]>();
  for (const entry of entries) {
    const slot = slotOf(entry.key);
    const group = groups.get(slot);
    if (group === undefined) groups.set(slot, [entry]);
    else group.push(entry);
  }
  return [...groups.values()];
}

/**
 * The ARGV of a check, handing back the same array while its inputs repeat (no injected clock,
 * one cost, the same limits: the usual run of checks), so that it is not built again per check
 * and a batch of checks holding the same array sends it once. Treat the array as read-only.
 */
export class RepeatedCheckArgv {
  private last: readonly (string | number)[] | undefined;
  private cost = 0;
  private dryRun = false;
  private blockFor = 0;
  /** A copy of the tiers of `last`: compared by value, since a tiers array could be changed in place. */
  private tiers: readonly Tier[] = [];

  argv(call: ScriptCall): readonly (string | number)[] {
    if (call.now !== undefined || call.countedAt !== 0 || call.actualCost !== 0) return scriptArgv(call);
    if (
      this.last !== undefined &&
      call.cost === this.cost &&
      call.dryRun === this.dryRun &&
      call.blockFor === this.blockFor &&
      sameTiers(call.tiers, this.tiers)
    ) {
      return this.last;
    }
    const argv = scriptArgv(call);
    this.last = argv;
    this.cost = call.cost;
    this.dryRun = call.dryRun;
    this.blockFor = call.blockFor;
    this.tiers = call.tiers.map(({ limit, window }) => ({ limit, window }));
    return argv;
  }
}
