/**
 * The batching of one event-loop turn's checks into few script calls, and the arguments of
 * repeated checks built once (so a batch whose checks share them sends them once).
 */
import type { CheckScript, RawReply } from '../../algorithms/types';
import { callEach, type Done } from '../../async';
import { storeErrorOf } from '../../errors';
import { batchArgv, batchReply, FAILED_CHECK, type ScriptCall, scriptArgv } from '../../protocol';
import { sameTiers, type Tier } from '../../tiers';
import { slotOf } from './cluster-slot';

/** Sends one script call for one key, or one batch call for several keys (the batch encoding of `protocol.ts`). */
export interface BatchSender {
  one(script: CheckScript, key: string, argv: readonly (string | number)[]): Promise<unknown>;
  /** Keys of one slot, declared: the client routes (and redirects) the call by its first key. */
  many(script: CheckScript, keys: readonly string[], argv: readonly string[]): Promise<unknown>;
  /** Present when keys live on several nodes (a Cluster). */
  readonly cluster?: ClusterRouting | undefined;
}

/** A Cluster node, as the client adapter knows it: opaque here. */
export type ClusterNode = object;

/** Where a Cluster client sends what: the slot of a key, the node of a slot, and node batches. */
export interface ClusterRouting {
  /** What the client puts before every key it sends (ioredis's `keyPrefix`), so Redis hashes it too. */
  readonly keyPrefix: string;
  /**
   * The node serving `slot` in the client's slot map, when it is connected; `undefined` otherwise
   * (the batch then goes per slot).
   */
  nodeOf(slot: number): ClusterNode | undefined;
  /** Runs a check script's node batch on `node` (ARGV from `batchArgv` with keys, prefixed). */
  runOnNode(node: ClusterNode, script: CheckScript, argv: readonly string[]): Promise<unknown>;
  /**
   * Told when a node batch held checks its node does not serve: the slot map {@link nodeOf} reads
   * is behind the cluster's. For an adapter that keeps its own map; a client's own map follows
   * the `MOVED` answers of the checks sent again.
   */
  mapStale?(): void;
}

/**
 * Redis could not take a node batch script's first line (`#!lua flags=...`): a server older than
 * Redis 7, which has no script flags. Nothing ran; the batch goes again per slot, and every later one too.
 */
function withoutScriptFlags(error: unknown): boolean {
  return error instanceof Error && /shebang|compiling script/i.test(error.message);
}

/**
 * How long node batches pause after one in which no check was served by its node: a slot map far
 * off, or a proxy that spreads commands without keys over its shards. Each such check is sent again
 * alone, so a batch that way costs a round trip more than sending per slot.
 */
const NODE_BATCH_PAUSE_MS = 1_000;

/** Redis refused a node batch's check because the node does not serve its key now: send it alone, with redirections. */
function notServedHere(message: string): boolean {
  return message.includes('non local key') || message.includes('cluster is down');
}

interface Entry {
  readonly script: CheckScript;
  readonly key: string;
  readonly argv: readonly (string | number)[];
  readonly done: Done<RawReply>;
  /** The key's Cluster slot, once computed. */
  slot: number;
}

/**
 * Checks per batch call. A batch goes out as soon as it is this full, so that Redis works on it
 * while this process reads more requests: waiting for the whole turn instead left the server idle
 * while Redis ran one large batch (`npm run bench`, Fastify (a); bench/NOTES.md has the sizes tried).
 * On a Cluster, each node's batch fills to this size on its own.
 */
const FLUSH_AT = 16;

/** The queue, on a Cluster, of checks whose node is not known (or takes no node batch now). */
const NO_NODE: ClusterNode = {};

/**
 * Gathers the checks started in one turn of the event loop and sends them as few script calls:
 * one write, one reply and one script run for up to {@link FLUSH_AT} requests instead of one each.
 * Under load several requests arrive per turn (the server reads many sockets per poll); a check
 * alone goes out at the end of its turn, as before. Each check keeps its own atomicity: the batch
 * script runs the same check for each key in turn, exactly as separate calls would in that order.
 */
export class CheckBatcher {
  private pending: Entry[] = [];
  /** On a Cluster: the pending checks per node. */
  private readonly pendingByNode = new Map<ClusterNode, Entry[]>();
  private scheduled = false;
  /** Epoch ms until which node batches pause (see {@link NODE_BATCH_PAUSE_MS}); 0 when they do not. */
  private nodeBatchesPausedUntil = 0;
  /** False once Redis refused a node batch script's flags: batches go per slot from then on. */
  private nodeBatches = true;

  constructor(private readonly sender: BatchSender) {}

  /** Queues a check; `done` gets its reply once its batch is answered. */
  check(script: CheckScript, key: string, argv: readonly (string | number)[], done: Done<RawReply>): void {
    const entry: Entry = { script, key, argv, done, slot: -1 };
    const { cluster } = this.sender;
    if (cluster === undefined) {
      this.pending.push(entry);
      if (this.pending.length >= FLUSH_AT) {
        const full = this.pending;
        this.pending = [];
        this.flush(full);
        return;
      }
    } else {
      entry.slot = slotOf(cluster.keyPrefix + key);
      const node = this.nodeBatchesPaused() ? NO_NODE : (cluster.nodeOf(entry.slot) ?? NO_NODE);
      const queue = this.pendingByNode.get(node);
      if (queue === undefined) this.pendingByNode.set(node, [entry]);
      else if (queue.push(entry) >= FLUSH_AT) {
        this.pendingByNode.delete(node);
        this.flush(queue);
        return;
      }
    }
    if (!this.scheduled) {
      this.scheduled = true;
      // After the poll phase: every request read in this turn has had its check started by then.
      setImmediate(this.flushTurn);
    }
  }

  private readonly flushTurn = (): void => {
    this.scheduled = false;
    if (this.pending.length > 0) {
      const entries = this.pending;
      this.pending = [];
      this.flush(entries);
    }
    if (this.pendingByNode.size > 0) {
      const queues = [...this.pendingByNode.values()];
      this.pendingByNode.clear();
      for (const entries of queues) this.flush(entries);
    }
  };

  private flush(entries: Entry[]): void {
    // Entries of one script (algorithm) share a call; a limiter rarely mixes algorithms on one store.
    let from = 0;
    while (from < entries.length) {
      const { script } = entries[from];
      let to = from + 1;
      while (to < entries.length && entries[to].script === script) to++;
      const group = to - from === entries.length ? entries : entries.slice(from, to);
      const { cluster } = this.sender;
      if (cluster !== undefined && group.length > 1) this.spread(cluster, script, group);
      else this.send(script, group);
      from = to;
    }
  }

  private nodeBatchesPaused(): boolean {
    if (!this.nodeBatches) return true;
    if (this.nodeBatchesPausedUntil === 0) return false;
    if (Date.now() < this.nodeBatchesPausedUntil) return true;
    this.nodeBatchesPausedUntil = 0;
    return false;
  }

  /**
   * The checks of a Cluster (their slots computed): one call per node for keys of several slots
   * that one node serves (a node batch), one per slot otherwise. With distinct identifiers, keys
   * rarely share a slot (16,384 of them), so without node batches most checks would be calls of
   * their own. Nodes are looked up again: a node may have gone down since its checks were queued.
   */
  private spread(cluster: ClusterRouting, script: CheckScript, group: readonly Entry[]): void {
    const onNodes = !this.nodeBatchesPaused();
    const byNode = new Map<ClusterNode, Entry[]>();
    const bySlot = new Map<number, Entry[]>();
    for (const entry of group) {
      const node = onNodes ? cluster.nodeOf(entry.slot) : undefined;
      if (node === undefined) append(bySlot, entry.slot, entry);
      else append(byNode, node, entry);
    }
    for (const [node, entries] of byNode) {
      if (entries.length > 1 && !oneSlot(entries)) this.sendToNode(cluster, node, script, entries);
      else append(bySlot, entries[0].slot, ...entries);
    }
    for (const entries of bySlot.values()) this.send(script, entries);
  }

  private sendToNode(cluster: ClusterRouting, node: ClusterNode, script: CheckScript, group: readonly Entry[]): void {
    const keys: string[] = new Array(group.length);
    const perKey: (readonly (string | number)[])[] = new Array(group.length);
    for (let i = 0; i < group.length; i++) {
      keys[i] = cluster.keyPrefix + group[i].key;
      perKey[i] = group[i].argv;
    }
    cluster.runOnNode(node, script, batchArgv(perKey, keys)).then(
      (replies) => {
        const elsewhere: Entry[] = [];
        callEach(group, (entry, i) => {
          const text = String((replies as unknown[])[i]);
          if (text.startsWith(FAILED_CHECK)) {
            const message = text.slice(FAILED_CHECK.length);
            if (notServedHere(message)) elsewhere.push(entry);
            else entry.done(storeErrorOf(message));
            return;
          }
          answer(entry, text);
        });
        if (elsewhere.length > 0) cluster.mapStale?.();
        if (elsewhere.length === group.length) this.nodeBatchesPausedUntil = Date.now() + NODE_BATCH_PAUSE_MS;
        // Sent again through the client's routing, which follows MOVED and ASK.
        for (const ofSlot of groupBySlot(elsewhere)) this.send(script, ofSlot);
      },
      (error: unknown) => {
        if (!withoutScriptFlags(error)) {
          callEach(group, (entry) => entry.done(error));
          return;
        }
        this.nodeBatches = false;
        for (const ofSlot of groupBySlot(group)) this.send(script, ofSlot);
      },
    );
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
      (replies) => callEach(group, (entry, i) => answer(entry, String((replies as unknown[])[i]))),
      (error: unknown) => callEach(group, (entry) => entry.done(error)),
    );
  }
}

/** Answers a check with its reply in a batch's answer. */
function answer(entry: Entry, text: string): void {
  let reply: RawReply;
  try {
    reply = batchReply(text);
  } catch (error) {
    entry.done(error);
    return;
  }
  entry.done(undefined, reply);
}

function append<K>(groups: Map<K, Entry[]>, key: K, ...entries: Entry[]): void {
  const group = groups.get(key);
  if (group === undefined) groups.set(key, entries);
  else group.push(...entries);
}

function oneSlot(entries: readonly Entry[]): boolean {
  for (let i = 1; i < entries.length; i++) if (entries[i].slot !== entries[0].slot) return false;
  return true;
}

/** `entries` (their slots computed) split by slot, in order of first appearance: the checks of one key keep their order. */
function groupBySlot(entries: readonly Entry[]): Entry[][] {
  const groups = new Map<number, Entry[]>();
  for (const entry of entries) append(groups, entry.slot, entry);
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
  private precision = 0;
  private blockResets: boolean | undefined = undefined;
  /** A copy of the tiers of `last`: compared by value, since a tiers array could be changed in place. */
  private tiers: readonly Tier[] = [];

  argv(call: ScriptCall): readonly (string | number)[] {
    if (call.now !== undefined || call.countedAt !== 0 || call.actualCost !== 0) return scriptArgv(call);
    if (
      this.last !== undefined &&
      call.cost === this.cost &&
      call.dryRun === this.dryRun &&
      call.blockFor === this.blockFor &&
      call.precision === this.precision &&
      call.blockResets === this.blockResets &&
      sameTiers(call.tiers, this.tiers)
    ) {
      return this.last;
    }
    const argv = scriptArgv(call);
    this.last = argv;
    this.cost = call.cost;
    this.dryRun = call.dryRun;
    this.blockFor = call.blockFor;
    this.precision = call.precision;
    this.blockResets = call.blockResets;
    this.tiers = call.tiers.map(({ limit, window }) => ({ limit, window }));
    return argv;
  }
}
