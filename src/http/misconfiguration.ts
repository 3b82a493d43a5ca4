/** Warnings about a configuration that would count wrong without failing. */
import type { Limiter } from '../core/types';
import { warn } from '../errors';
import type { Store } from '../stores/types';

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
