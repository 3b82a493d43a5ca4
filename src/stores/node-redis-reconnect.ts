/**
 * The one place this package relies on how node-redis behaves across a reconnection, beyond
 * what its documentation promises.
 *
 * node-redis never sends a command twice: when a connection drops, the commands written to it
 * and still awaiting their reply are rejected. But with its offline queue on (the default,
 * `disableOfflineQueue: false`), the commands it has not written yet stay queued and are written
 * to the next connection, however long that takes to come: a check made in the instant the
 * connection dropped (queued, not yet flushed to the socket), or routed to a cluster node whose
 * client is still connecting. The limiter may have reported such a check failed long before
 * (at `timeoutMs`), and it would still be counted. So every check carries the abort signal of
 * the current connection epoch, and the epoch ends when a connection is made: node-redis emits
 * `connect` (a cluster, `node-connect`) as soon as the new socket is connected, before its
 * handshake and its queue are written to it, and aborting a queued command removes it from the
 * queue and rejects it. A check is thus only ever written to a connection that was up when it
 * was made. A written command's abort listener is removed by node-redis, so an abort never
 * touches a check Redis is already running.
 *
 * With `disableOfflineQueue: true` node-redis itself rejects every queued command when a
 * connection drops and refuses commands while it is down, so a standalone client created that
 * way needs no signal, and gets none. A cluster's node clients are not visible from here, and a
 * check can wait for a node's first connection even then, so cluster checks always carry it.
 *
 * Verified on node-redis 6.3 and 5.12 (a test pins the installed major version and this
 * behaviour, and fails on an upgrade that changes it). node-redis 5 emits `node-connect` at
 * most for a node client's first connection (5.12 does, 5.0 does not): there, a cluster's
 * reconnections are protected by `defaults: { disableOfflineQueue: true }` alone (see the
 * README).
 */
import { setMaxListeners } from 'node:events';

/** The command options of a check: the adapter's own, and the epoch's abort signal. */
export type EpochOptions<Base extends object> = Base & { readonly abortSignal: AbortSignal };

/** The abort signal of the current connection epoch, renewed (and the old one aborted) on each new connection. */
export class ConnectionEpoch<Base extends object> {
  private controller = new AbortController();
  /** One options object per epoch, so a check allocates none. */
  private current: EpochOptions<Base>;

  /** `base`: the other command options every check carries. */
  constructor(private readonly base: Base) {
    this.current = this.optionsOf(this.controller);
  }

  get options(): EpochOptions<Base> {
    return this.current;
  }

  /** Ends the epoch: every check of it still queued (unwritten) is removed from the queue and rejected. */
  renew(): void {
    const ended = this.controller;
    this.controller = new AbortController();
    this.current = this.optionsOf(this.controller);
    ended.abort();
  }

  private optionsOf(controller: AbortController): EpochOptions<Base> {
    // Every check in flight listens to this one signal: no listener-count warning.
    setMaxListeners(0, controller.signal);
    return { ...this.base, abortSignal: controller.signal };
  }
}

/** The events that mark a new connection: `connect` on a client, `node-connect` on a cluster. */
export function watchConnections(
  client: { on(event: string, listener: () => void): unknown },
  cluster: boolean,
  epoch: ConnectionEpoch<object>,
): void {
  client.on(cluster ? 'node-connect' : 'connect', () => epoch.renew());
}
