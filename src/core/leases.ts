/**
 * Leases of a limiter with `concurrency`: the ids an allowed check takes a slot under, and the
 * handle to that slot that a decision carries (`decision.lease`).
 */
import { randomBytes } from 'node:crypto';
import { RELEASE, RENEW } from '../algorithms/lease';
import type { LeaseScript } from '../algorithms/types';
import type { Lease } from './types';

/** Releases or renews the lease `id` in `leaseKey`: true when it was live. */
export type ChangeLease = (script: LeaseScript, leaseKey: string, id: string) => Promise<boolean>;

/** Lease ids of one limiter: a random tag of its own and a counter, unique across limiters and processes. */
export class LeaseIds {
  private readonly tag = `${randomBytes(6).toString('base64url')}.`;
  private count = 0;

  next(): string {
    this.count++;
    return this.tag + this.count.toString(36);
  }
}

/** A lease an allowed check took: released or renewed through its limiter. */
export class HeldLease implements Lease {
  constructor(
    private readonly change: ChangeLease,
    private readonly leaseKey: string,
    readonly id: string,
  ) {}

  release(): Promise<boolean> {
    return this.change(RELEASE, this.leaseKey, this.id);
  }

  renew(): Promise<boolean> {
    return this.change(RENEW, this.leaseKey, this.id);
  }
}
