import { createHash } from 'node:crypto';
import { OptionError } from '../errors';
import { describeValue } from '../validate';

/** Identifiers longer than this are replaced by their hash, so keys stay short. */
const MAX_IDENTIFIER_LENGTH = 128;
/** A surrogate outside a pair: encoded as UTF-8 for Redis it becomes U+FFFD, so distinct identifiers would share a key. */
const LONE_SURROGATE = /\p{Surrogate}/u;

/**
 * The store key of `identifier` under `keyPrefix` (`'<prefix>:'`). Long or ill-formed
 * identifiers become `sha256:<hash>`, so keys stay short and distinct identifiers never share one.
 */
function storeKey(keyPrefix: string, identifier: string): string {
  if (typeof identifier !== 'string') {
    throw new OptionError('SWL_INVALID_IDENTIFIER', `identifier: must be a string, got ${describeValue(identifier)}`);
  }
  const illFormed = LONE_SURROGATE.test(identifier);
  if (illFormed || identifier.length > MAX_IDENTIFIER_LENGTH) {
    // An ill-formed identifier is hashed from its UTF-16 code units, which keep it distinct.
    const bytes = illFormed ? Buffer.from(identifier, 'utf16le') : identifier;
    return `${keyPrefix}sha256:${createHash('sha256').update(bytes).digest('base64url')}`;
  }
  return keyPrefix + identifier;
}

/**
 * On a limiter with `concurrency`, an identifier's rate key is `{<prefix>:<identifier>}` and its
 * lease key the same with `:leases`: both start with the same braces, so Redis Cluster hashes them
 * to one slot (the hash tag is the text up to the first `}`, whatever the identifier holds), and the
 * script that decides both bounds touches a single slot.
 */
function rateKeyWithLeases(key: string): string {
  return `{${key}}`;
}

/** The lease key beside a rate key made by {@link rateKeyWithLeases}. */
export function leaseKeyOf(rateKey: string): string {
  return `${rateKey}:leases`;
}

/**
 * The keys of one limiter: `<prefix>:<identifier>` (in braces with `concurrency`), the last one
 * kept. A flood from one identifier asks for the same key request after request; handing back
 * the same string object spares building it and, in the deny cache's Map, hashing it again (V8
 * keeps a string's hash in the string): the largest share of a cached denial's CPU time.
 */
export class KeyCache {
  private readonly keyPrefix: string;
  /** The identifier last asked for, and its key (primed with `''`, so never undefined). */
  private lastIdentifier = '';
  private lastKey: string;

  constructor(
    prefix: string,
    private readonly withLeases: boolean,
  ) {
    this.keyPrefix = `${prefix}:`;
    this.lastKey = this.keyOf('');
  }

  /** The key of `identifier`; throws an `OptionError` for an identifier that is not a string. */
  keyFor(identifier: string): string {
    if (identifier === this.lastIdentifier) return this.lastKey;
    const key = this.keyOf(identifier);
    this.lastIdentifier = identifier;
    this.lastKey = key;
    return key;
  }

  private keyOf(identifier: string): string {
    const key = storeKey(this.keyPrefix, identifier);
    return this.withLeases ? rateKeyWithLeases(key) : key;
  }
}
