/** Warnings about what would otherwise go wrong in silence: counting wrong, or failing open unheard. */
import type { Limiter } from '../core/types';
import { type Warnings, warn } from '../errors';
import type { Store } from '../stores/types';
import type { FailMode } from './http-options';

/** Prefixes in use per store, with the limits counted under each. */
const prefixesInUse = new WeakMap<Store, Map<string, string>>();

/** Warns (`SWL_SHARED_PREFIX`) when `limiter` counts into the same keys as an earlier limiter with other limits. */
export function warnOnSharedPrefix(limiter: Limiter): void {
  let prefixes = prefixesInUse.get(limiter.store);
  if (prefixes === undefined) {
    prefixes = new Map();
    prefixesInUse.set(limiter.store, prefixes);
  }
  const shape = `${limiter.algorithm} ${limiter.tiers.map((tier) => `${tier.limit}/${tier.window}`).join(',')}`;
  const existing = prefixes.get(limiter.prefix);
  if (existing !== undefined && existing !== shape) {
    warn(
      'SWL_SHARED_PREFIX',
      `Two rate limiters share the store and the prefix '${limiter.prefix}' with different limits (${existing} and ${shape}): they count into the same keys. Give each its own prefix.`,
    );
  }
  prefixes.set(limiter.prefix, shape);
}

/**
 * What a request keeps of each limiter that counted it, newest first: for resetting by request,
 * and for noticing one request counted twice.
 */
export interface CountedBy {
  readonly limiter: Limiter;
  readonly identifier: string;
  readonly next: CountedBy | undefined;
}

/**
 * Warns (`SWL_COUNTED_TWICE`, once per `warnings`: the newest limiter's) when the newest entry of a request's
 * {@link CountedBy} list counted the same key of the same store as an earlier one: two limiters
 * with one prefix, or one limiter mounted twice, on the path of one request.
 */
export function warnIfCountedTwice(newest: CountedBy, warnings: Warnings): void {
  const { limiter, identifier } = newest;
  for (let earlier = newest.next; earlier !== undefined; earlier = earlier.next) {
    if (earlier.identifier !== identifier || earlier.limiter.store !== limiter.store || earlier.limiter.prefix !== limiter.prefix) continue;
    warnings.once(
      'SWL_COUNTED_TWICE',
      () =>
        `One request was counted twice against the key of '${identifier}' under the prefix '${limiter.prefix}', by two limiters sharing a store and a prefix (or one limiter mounted twice on its path): each request costs 2. Give each limiter its own prefix, or mount it once.`,
    );
    return;
  }
}

const FAILING: Record<FailMode, string> = {
  open: "let through unlimited (failMode: 'open')",
  closed: "refused with 503 (failMode: 'closed')",
  local: "limited by this process alone (failMode: 'local')",
};

const STORE_FAILING_EVERY_MS = 60_000;

/**
 * Warns (`SWL_STORE_FAILING`) of a store failure that no `onError` hears: on the first, then at
 * most once a minute while failures continue (per `warnings`: per limiter), so a failing-open
 * limiter is never silent.
 */
export function warnStoreFailing(error: unknown, failMode: FailMode, warnings: Warnings): void {
  warnings.atMostEvery('SWL_STORE_FAILING', STORE_FAILING_EVERY_MS, Date.now(), () => {
    const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    return `The rate limit store failed (${message}); requests are ${FAILING[failMode]} while it fails. Pass onError to handle store failures (this warning repeats at most once a minute).`;
  });
}
