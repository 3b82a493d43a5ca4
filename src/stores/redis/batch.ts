/**
 * The batching of checks into few script calls, and the arguments of repeated checks built once
 * (so a batch whose checks share them sends them once).
 */
import type { CheckScript, RawReply } from '../../algorithms/types';
import { callEach, type Done } from '../../async';
import { storeErrorOf } from '../../errors';
import { batchArgv, batchReply, FAILED_CHECK, type ScriptCall, scriptArgv } from '../../protocol';
import { sameTiers, type Tier } from '../../tiers';
import type { HeldCheck } from '../types';
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

/** A check waiting in a queue until its call leaves. */
class Entry implements HeldCheck {
  /** The key's Cluster slot, once computed. */
  slot = -1;
  /** Set once its caller was answered without it (its deadline passed): it is then never sent. */
  withdrawn = false;

  constructor(
    readonly script: CheckScript,
    readonly key: string,
    readonly argv: readonly (string | number)[],
    readonly done: Done<RawReply>,
  ) {}

  withdraw(): void {
    this.withdrawn = true;
  }
}

/** A Cluster node's pending checks. */
class NodeQueue {
  readonly entries: Entry[];
  /** When the first of them was queued (`performance.now()`). */
  readonly since = performance.now();

  constructor(first: Entry) {
    this.entries = [first];
  }
}

/**
 * Checks per batch call at most. A batch leaves once this full, without waiting any longer, so
 * that Redis works on it while this process reads more requests: waiting for a whole turn left
 * the server idle while Redis ran one large batch (`npm run bench`, Fastify (a); bench/NOTES.md
 * has the sizes tried).
 */
const FLUSH_AT = 16;

/**
 * How long a check waits at most for the call in flight to a standalone server, in ms. Under load
 * a reply comes much sooner. One that does not (a server that stalls, a connection being replaced)
 * no longer holds the checks back: they go on their own, this much later than they would have gone
 * without waiting. So a client's own request timeout still starts about when the check did (GLIDE's
 * `requestTimeout`, which docs/valkey.md sets 50 ms under the limiter's `timeoutMs`).
 */
const HOLD_MS = 10;

/** The queue, on a Cluster, of checks whose node is not known (or take no node batch now). */
const NO_NODE: ClusterNode = {};

/**
 * Gathers checks into few script calls: one write, one reply and one script run for up to
 * {@link FLUSH_AT} requests instead of one each. Each check keeps its own atomicity: the batch
 * script runs the same check for each key in turn, exactly as separate calls would in that order.
 *
 * - **A standalone server: batches clocked by its replies.** A check leaves at once when no call
 *   of this store is in flight; otherwise it waits for the answer ({@link HOLD_MS} at most), and
 *   leaves with every check started meanwhile. A batch is thus as large as the load makes it (one
 *   check on an idle server), and leaves as soon as Redis is ready for it.
 * - **A Cluster: one batch per master, at the end of a turn of the event loop once that master
 *   answered.** The checks started in a turn go at its end, one call per master (a node batch, of
 *   keys of several slots), or per slot when the node is not known; but a master's checks wait while
 *   a node batch of this store to that master is in flight, and leave at the end of the turn of its
 *   answer ({@link HOLD_MS} at most). Sent as soon as the reply came, mid-turn, a master's batch held
 *   only what had come since the last, for more Redis CPU per request (bench/NOTES.md).
 */
export class CheckBatcher {
  /** Standalone: the checks waiting for the calls in flight. */
  private waiting: Entry[] = [];
  /** Standalone: the calls of this store in flight to the server. */
  private inFlight = 0;
  /** Standalone: when the oldest of {@link waiting} began to wait (`performance.now()`). */
  private waitingSince = 0;
  /** Standalone: armed while checks wait, to send them once they waited {@link HOLD_MS}. */
  private holdTimer: NodeJS.Timeout | undefined;
  /** On a Cluster: the pending checks, per node. */
  private readonly pendingByNode = new Map<ClusterNode, NodeQueue>();
  /** On a Cluster: the node batches of this store in flight, per node. */
  private readonly nodeCallsInFlight = new Map<ClusterNode, number>();
  /** On a Cluster: armed while a queue waits for its node's answer, to send it once it waited {@link HOLD_MS}. */
  private nodeHoldTimer: NodeJS.Timeout | undefined;
  private scheduled = false;
  /** Epoch ms until which node batches pause (see {@link NODE_BATCH_PAUSE_MS}); 0 when they do not. */
  private nodeBatchesPausedUntil = 0;
  /** False once Redis refused a node batch script's flags: batches go per slot from then on. */
  private nodeBatches = true;

  /** Standalone: every call is counted in flight until answered, and the waiting checks leave with the last answer. */
  private readonly clocked: boolean;

  constructor(private readonly sender: BatchSender) {
    this.clocked = sender.cluster === undefined;
  }

  /**
   * Queues a check; `done` gets its reply once its batch is answered. Answers the check while it
   * waits to be sent, to be withdrawn once its caller no longer waits, or `undefined` once sent.
   */
  check(script: CheckScript, key: string, argv: readonly (string | number)[], done: Done<RawReply>): HeldCheck | undefined {
    const entry = new Entry(script, key, argv, done);
    const { cluster } = this.sender;
    if (cluster !== undefined) return this.checkOnCluster(cluster, entry);
    const waiting = this.waiting.push(entry);
    if (waiting < FLUSH_AT && this.inFlight > 0) {
      if (waiting === 1) {
        this.waitingSince = performance.now();
        this.holdTimer ??= setTimeout(this.holdExpired, HOLD_MS);
      }
      return entry;
    }
    this.sendWaiting();
    return undefined;
  }

  /** Sends the waiting checks once they waited {@link HOLD_MS} for the server's answer. */
  private readonly holdExpired = (): void => {
    this.holdTimer = undefined;
    if (this.waiting.length === 0) return;
    const left = this.waitingSince + HOLD_MS - performance.now();
    // A timer may fire up to a millisecond early.
    if (left < 1) this.sendWaiting();
    else this.holdTimer = setTimeout(this.holdExpired, left);
  };

  private sendWaiting(): void {
    const entries = stillWanted(this.waiting);
    this.waiting = [];
    if (entries.length > 0) this.flush(entries);
  }

  /** A call counted in flight was answered: the waiting checks leave once none is in flight. */
  private answered(): void {
    if (--this.inFlight === 0 && this.waiting.length > 0) this.sendWaiting();
  }

  private checkOnCluster(cluster: ClusterRouting, entry: Entry): HeldCheck | undefined {
    entry.slot = slotOf(cluster.keyPrefix + entry.key);
    const node = this.nodeBatchesPaused() ? NO_NODE : (cluster.nodeOf(entry.slot) ?? NO_NODE);
    const queue = this.pendingByNode.get(node);
    if (queue === undefined) this.pendingByNode.set(node, new NodeQueue(entry));
    else if (queue.entries.push(entry) >= FLUSH_AT) {
      this.pendingByNode.delete(node);
      this.flush(queue.entries);
      return undefined;
    }
    this.flushAtEndOfTurn();
    return entry;
  }

  private flushAtEndOfTurn(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    // After the poll phase: every request read in this turn has had its check started by then.
    setImmediate(this.flushTurn);
  }

  /** Sends each node's queue, except one whose node has not answered its last batch yet (for {@link HOLD_MS} at most). */
  private readonly flushTurn = (): void => {
    this.scheduled = false;
    const now = performance.now();
    let held: number | undefined;
    for (const [node, queue] of this.pendingByNode) {
      const waited = now - queue.since;
      if (node !== NO_NODE && this.nodeCallsInFlight.has(node) && waited < HOLD_MS - 1) {
        held = Math.min(held ?? HOLD_MS, HOLD_MS - waited);
        continue;
      }
      this.pendingByNode.delete(node);
      this.flush(stillWanted(queue.entries));
    }
    if (held !== undefined && this.nodeHoldTimer === undefined) this.nodeHoldTimer = setTimeout(this.nodeHoldExpired, held);
  };

  private readonly nodeHoldExpired = (): void => {
    this.nodeHoldTimer = undefined;
    this.flushTurn();
  };

  /** A node batch was answered: once none is in flight to its node, the node's queue leaves at the end of this turn. */
  private nodeAnswered(node: ClusterNode): void {
    const left = (this.nodeCallsInFlight.get(node) ?? 1) - 1;
    if (left > 0) {
      this.nodeCallsInFlight.set(node, left);
      return;
    }
    this.nodeCallsInFlight.delete(node);
    if (this.pendingByNode.has(node)) this.flushAtEndOfTurn();
  }

  private flush(entries: readonly Entry[]): void {
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
    this.nodeCallsInFlight.set(node, (this.nodeCallsInFlight.get(node) ?? 0) + 1);
    cluster.runOnNode(node, script, batchArgv(perKey, keys)).then(
      (replies) => {
        this.nodeAnswered(node);
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
        this.nodeAnswered(node);
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
    const { clocked } = this;
    if (group.length === 1) {
      const [only] = group;
      if (clocked) this.inFlight++;
      this.sender.one(script, only.key, only.argv).then(
        (reply) => {
          if (clocked) this.answered();
          only.done(undefined, reply as RawReply);
        },
        (error: unknown) => {
          if (clocked) this.answered();
          only.done(error);
        },
      );
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
    if (clocked) this.inFlight++;
    // Each answer may run the app's own code (the HTTP path goes on to the next handler): one
    // that throws must not leave the rest of the batch unanswered. The checks waiting for this
    // reply leave first, so that Redis works on them while this process answers these.
    this.sender.many(script, keys, argv).then(
      (replies) => {
        if (clocked) this.answered();
        callEach(group, (entry, i) => answer(entry, String((replies as unknown[])[i])));
      },
      (error: unknown) => {
        if (clocked) this.answered();
        callEach(group, (entry) => entry.done(error));
      },
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

/** `entries` without those withdrawn: their callers were answered, and a check sent now would count after that. */
function stillWanted(entries: Entry[]): Entry[] {
  for (let i = 0; i < entries.length; i++) if (entries[i].withdrawn) return entries.filter((entry) => !entry.withdrawn);
  return entries;
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
