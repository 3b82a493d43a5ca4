/**
 * Differential tests: every algorithm's Lua script (RedisStore) and its TypeScript twin
 * (MemoryStore) must give identical decisions for the same seeded random sequence of
 * checks, peeks, costs, identifiers, clock steps and tier configurations.
 *
 * The clock is injected, but Redis expires keys by its own (real) clock. A key written
 * at fake time t with PX d may vanish after d real milliseconds while the fake clock
 * has not moved; fixed window in particular sets PX of 1 ms right before a boundary.
 * So each Redis check runs in a MULTI with PTTL (checked against the expiry the
 * algorithm promises) and PERSIST, leaving expiry to the logic, which ignores stale
 * state by window index / score anyway.
 *
 * The RedisStore runs on ioredis, node-redis, iovalkey and Valkey GLIDE; the raw Lua comparison
 * uses ioredis.
 */
import { isDeepStrictEqual } from 'node:util';
import type { GlideClient } from '@valkey/valkey-glide';
import type { Redis } from 'ioredis';
import { Redis as IoValkey } from 'iovalkey';
import { createClient, type RedisClientType } from 'redis';
import { createLimiter, type Decision, MemoryStore, RedisStore, type RedisStoreClient } from '../../src';
import { ALGORITHM_NAMES, ALGORITHMS as SCRIPTS } from '../../src/algorithms';
import { readCounters } from '../../src/algorithms/shared';
import type { AlgorithmName, MemoryResult } from '../../src/algorithms/types';
import { BATCH_SLOT, batchArgv, batchReply, scriptArgv } from '../../src/protocol';
import type { Tier } from '../../src/tiers';
import { mulberry32 as seeded } from '../../support/random';
import { addressOf, GLIDE_REQUEST_TIMEOUT_MS, glide, redisClient, redisUrl, uniquePrefix } from '../helpers/redis';

let client: Redis;
let nodeRedis: RedisClientType;
let iovalkey: IoValkey;
let glideClient: GlideClient;
beforeAll(async () => {
  client = redisClient();
  nodeRedis = createClient({ url: redisUrl() });
  await nodeRedis.connect();
  iovalkey = new IoValkey(redisUrl());
  glideClient = await glide().GlideClient.createClient({ addresses: [addressOf(redisUrl())], requestTimeout: GLIDE_REQUEST_TIMEOUT_MS });
});
afterAll(async () => {
  client.disconnect();
  nodeRedis.destroy();
  iovalkey.disconnect();
  glideClient.close();
});

const WINDOWS = [1, 7, 100, 250, 1_000, 1_500, 10_000, 60_000];
const IDENTIFIERS = ['alice', 'bob', 'carol', 'dave'];

function randomTiers(random: () => number, algorithm: AlgorithmName): Tier[] {
  const count = 1 + Math.floor(random() * 3);
  const maxLimit = algorithm === 'sliding-log' ? 12 : 40;
  return Array.from({ length: count }, () => ({
    limit: 1 + Math.floor(random() * (random() < 0.7 ? 6 : maxLimit)),
    window: WINDOWS[Math.floor(random() * WINDOWS.length)],
  }));
}

/** Precisions of \`precise-window\`: buckets as wide as the window, a few wide ones, and the default (mostly exact here). */
const PRECISIONS = [1, 2, 7, 60, 6_000];

/** The precision of a configuration: a random one for \`precise-window\` (the others ignore it, and draw nothing). */
function randomPrecision(random: () => number, algorithm: AlgorithmName): number {
  return algorithm === 'precise-window' ? PRECISIONS[Math.floor(random() * PRECISIONS.length)] : 1;
}

/** The next clock value: same ms, a few ms, around a tier's window boundary, within a window, several windows. */
function nextTime(now: number, tiers: readonly Tier[], random: () => number): number {
  const window = tiers[Math.floor(random() * tiers.length)].window;
  const r = random();
  if (r < 0.3) return now; // same millisecond
  if (r < 0.55) return now + 1 + Math.floor(random() * 5);
  if (r < 0.75) {
    const boundary = (Math.floor(now / window) + 1) * window;
    return Math.max(now, boundary + Math.floor(random() * 5) - 2);
  }
  if (r < 0.95) return now + Math.floor(random() * (window / 4));
  return now + window * (1 + Math.floor(random() * 3)) + Math.floor(random() * window);
}

/** Tiers as options, their windows written in ms: a bare number under 1000 would warn (SWL_SHORT_DURATION). */
function inMs(tiers: readonly Tier[]): { limit: number; window: string }[] {
  return tiers.map((tier) => ({ limit: tier.limit, window: `${tier.window}ms` }));
}

function randomCost(random: () => number, tiers: readonly Tier[]): number {
  const smallest = Math.min(...tiers.map((tier) => tier.limit));
  const r = random();
  if (r < 0.6) return 1;
  if (r < 0.7) return 0;
  return Math.floor(random() * (smallest + 1));
}

/** The algorithms whose counting write may keep the key's expiry. */
const WINDOW_COUNTERS: readonly AlgorithmName[] = ['sliding-window', 'fixed-window'];

/**
 * Whether a counting write keeps the key's expiry: a sliding or fixed window whose tiers, the same
 * as the call's, were each last counted in its current window (`countedIndexes`, the window
 * indexes of the identifier's last counting write, or undefined when its counts are gone) keeps
 * the expiry the write that started those windows set.
 */
function keepsExpiry(
  algorithm: AlgorithmName,
  tiers: readonly Tier[],
  now: number,
  countedIndexes: readonly number[] | undefined,
): boolean {
  if (!WINDOW_COUNTERS.includes(algorithm)) return false;
  return countedIndexes?.length === tiers.length && tiers.every(({ window }, i) => countedIndexes[i] === Math.floor(now / window));
}

/** The PTTL a counting write must leave, per algorithm (a token bucket's: until every bucket is full again). */
function expectedTtl(algorithm: AlgorithmName, tiers: readonly Tier[], now: number, decision: Decision, precision: number): number {
  const longest = Math.max(...tiers.map((tier) => tier.window));
  // Until the newest unit has left every window: a window and a bucket after its bucket.
  if (algorithm === 'precise-window') return Math.max(...tiers.map(({ window }) => window + Math.max(1, Math.floor(window / precision))));
  if (algorithm === 'sliding-window') return 2 * longest;
  if (algorithm === 'sliding-log') return longest;
  if (algorithm === 'token-bucket') {
    // A tier's level in ms is TAT - now = estimated x window / limit, rounded up to whole ms.
    return Math.max(...decision.tiers.map((tier) => Math.ceil(Math.round(tier.estimated * tier.window) / tier.limit)));
  }
  return Math.max(...tiers.map(({ window }) => (Math.floor(now / window) + 1) * window - now));
}

/** The commands that run a script: by SHA-1, by body, or as a function of a loaded library. */
const SCRIPT_CALLS: ReadonlySet<string> = new Set(['EVALSHA', 'EVAL', 'FCALL']);

/**
 * The run's Redis client behind a proxy that turns each script call on one key (`FCALL`,
 * `EVALSHA`, or `EVAL` after `NOSCRIPT`) into `MULTI; <script>; PTTL key; PERSIST key; EXEC`:
 * the RedisStore code path (argument layout, FCALL or EVALSHA, the fallbacks) is unchanged, and
 * the expiry is read and removed atomically with the write, before Redis' real clock can expire
 * the key.
 */
function persistingClient(redis: Redis, ttl: { last: number | undefined }): Redis {
  return new Proxy(redis, {
    get(target, property) {
      const value = Reflect.get(target, property, target) as unknown;
      if (property === 'evalsha' || property === 'eval' || property === 'fcall') {
        // A lease check has two keys (the counts, then the leases): both are persisted, and
        // `ttl.last` is the first's. The leases' own expiry is by score, in the virtual clock.
        return async (script: string, numberOfKeys: number, ...keysAndArgs: (string | number)[]) => {
          const keys = keysAndArgs.slice(0, Number(numberOfKeys)) as string[];
          if (keys.length < 1 || keys.length > 2) return target[property](script, numberOfKeys, ...keysAndArgs);
          const multi = target.multi();
          multi[property](script, numberOfKeys, ...keysAndArgs);
          multi.pttl(keys[0]);
          for (const key of keys) multi.persist(key);
          const results = (await multi.exec())!;
          for (const [error] of results) if (error) throw error;
          ttl.last = results[1][1] as number;
          return results[0][1];
        };
      }
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/**
 * The same for node-redis: its `sendCommand` of a script (FCALL, EVALSHA, or EVAL after NOSCRIPT) is
 * sent as `MULTI; <script>; PTTL key; PERSIST key; EXEC`. A script's error (NOSCRIPT) is thrown
 * as node-redis would throw it outside a MULTI, so the store's fallback to EVAL runs as usual.
 */
function persistingNodeRedis(redis: RedisClientType, ttl: { last: number | undefined }): RedisClientType {
  return new Proxy(redis, {
    get(target, property) {
      const value = Reflect.get(target, property, target) as unknown;
      if (property === 'sendCommand') {
        return async (args: string[], options?: object) => {
          if (!SCRIPT_CALLS.has(args[0])) return target.sendCommand(args, options);
          const key = args[3];
          let results: unknown[];
          try {
            results = await target.multi().addCommand(args).pTTL(key).persist(key).exec();
          } catch (error) {
            const { replies, errorIndexes } = error as { replies?: unknown[]; errorIndexes?: number[] };
            if (replies === undefined || errorIndexes === undefined) throw error;
            throw replies[errorIndexes[0]];
          }
          ttl.last = results[1] as number;
          return results[0];
        };
      }
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/**
 * The same for GLIDE: its `customCommand` of a script (FCALL, EVALSHA, or EVAL after NOSCRIPT) is sent
 * as an atomic batch (`MULTI ... EXEC`) with the PTTL and PERSIST. A script's error (NOSCRIPT) is
 * thrown as GLIDE would throw it outside a batch, so the store's fallback to EVAL runs as usual.
 */
function persistingGlide(redis: GlideClient, ttl: { last: number | undefined }): GlideClient {
  return new Proxy(redis, {
    get(target, property) {
      const value = Reflect.get(target, property, target) as unknown;
      if (property === 'customCommand') {
        return async (args: string[], options?: object) => {
          if (!SCRIPT_CALLS.has(args[0])) return target.customCommand(args, options);
          const keys = args.slice(3, 3 + Number(args[2]));
          const batch = new (glide().Batch)(true).customCommand(args).pttl(keys[0]);
          for (const key of keys) batch.persist(key);
          const results = (await target.exec(batch, false))!;
          if (results[0] instanceof Error) throw results[0];
          ttl.last = results[1] as number;
          return results[0];
        };
      }
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

const ALGORITHMS: readonly AlgorithmName[] = ALGORITHM_NAMES;

/**
 * The PTTL the last persisted script call found, shared by the persisting clients below. Each
 * client is wrapped once: a store on a new wrapper of the same client would add its connection
 * listeners to that client again.
 */
const ttl: { last: number | undefined } = { last: undefined };
let wrappedIoredis: Redis | undefined;
let wrappedNodeRedis: RedisClientType | undefined;
let wrappedIovalkey: Redis | undefined;
let wrappedGlide: GlideClient | undefined;

function persistingIoredis(): Redis {
  wrappedIoredis ??= persistingClient(client, ttl);
  return wrappedIoredis;
}

function persistingNodeRedisClient(): RedisClientType {
  wrappedNodeRedis ??= persistingNodeRedis(nodeRedis, ttl);
  return wrappedNodeRedis;
}

/** The clients, each with the store running checks as functions (the default); ioredis with scripts only too. */
const STORE_CLIENTS: [string, () => RedisStoreClient, boolean][] = [
  ['ioredis', persistingIoredis, true],
  ['ioredis with functions: false', persistingIoredis, false],
  ['node-redis', persistingNodeRedisClient, true],
  // iovalkey is ioredis's API: the same proxy.
  ['iovalkey', () => (wrappedIovalkey ??= persistingClient(iovalkey as unknown as Redis, ttl)), true],
  ['glide', () => (wrappedGlide ??= persistingGlide(glideClient, ttl)), true],
];

/** Expects each count named in `minimums` to be above its minimum; the failure names every one that is not. */
function expectAbove<Name extends string>(counts: Record<Name, number>, minimums: Partial<Record<Name, number>>): void {
  const short = (Object.keys(minimums) as Name[]).filter((name) => !(counts[name] > minimums[name]!));
  expect(Object.fromEntries(short.map((name) => [name, `${counts[name]}, not above ${minimums[name]}`]))).toEqual({});
}

describe.each(STORE_CLIENTS)('RedisStore on %s', (_name, persisting, functions) => {
  describe.each(ALGORITHMS)('%s: RedisStore and MemoryStore decide identically', (algorithm) => {
    test('seeded random sequence of checks and peeks over random tier configurations', async () => {
      const seed = 0x5eed + ALGORITHMS.indexOf(algorithm);
      const random = seeded(seed);
      const counts = {
        steps: 0,
        allowed: 0,
        denied: 0,
        peeks: 0,
        multiTier: 0,
        writes: 0,
        resets: 0,
        refunds: 0,
        ownLimits: 0,
        blocks: 0,
        wipingBlocks: 0,
        keptExpiries: 0,
      };
      ttl.last = undefined;
      const redisClientWithTtl = persisting();
      for (let config = 0; config < 12; config++) {
        const tiers = randomTiers(random, algorithm);
        // Start near a window boundary for some configurations and at small epoch values for others
        // (where now - window is negative).
        let now = config % 4 === 0 ? Math.floor(random() * 50) : 1_700_000_000_000 + Math.floor(random() * 100_000);
        const clock = () => now;
        const redisStore = new RedisStore({ client: redisClientWithTtl, functions });
        // A third of the configurations block denied identifiers (blockFor), half of those wiping
        // the counts for the block (afterBlock: 'reset').
        const blockFor = config % 3 === 2 ? 1 + Math.floor(random() * 2 * Math.max(...tiers.map((tier) => tier.window))) : 0;
        const precision = randomPrecision(random, algorithm);
        const afterBlock = config % 6 === 5 ? 'reset' : undefined;
        const common = {
          limits: inMs(tiers),
          algorithm,
          ...(algorithm === 'precise-window' ? { precision } : {}),
          clock,
          denyCacheSize: 0,
          blockFor: blockFor === 0 ? undefined : `${blockFor}ms`,
          afterBlock,
        } as const;
        const prefix = uniquePrefix('diff');
        const onRedis = createLimiter({ ...common, store: redisStore, prefix });
        const inMemory = createLimiter({ ...common, store: new MemoryStore({ sweepIntervalMs: 0 }), prefix });
        const history: string[] = [];
        const countedBy = new Map<string, Decision[]>();
        const expiry = new Map<string, number>();
        const countedIndexes = new Map<string, number[]>();
        const blockedUntil = new Map<string, number>();
        for (let step = 0; step < 300; step++) {
          now = nextTime(now, tiers, random);
          const id = IDENTIFIERS[Math.floor(random() * IDENTIFIERS.length)];
          // Keys are persisted in Redis (see persistingClient); expire them on the virtual clock, as
          // the MemoryStore does, so a key written with short windows is gone for both alike.
          if ((expiry.get(id) ?? Infinity) <= now) {
            await client.del(onRedis.keyFor(id));
            expiry.delete(id);
            countedIndexes.delete(id);
          }
          if (random() < 0.01) {
            history.push(`${now} reset ${id}`);
            await Promise.all([onRedis.reset(id), inMemory.reset(id)]);
            expiry.delete(id);
            countedIndexes.delete(id);
            blockedUntil.delete(id);
            counts.resets++;
            continue;
          }
          const counted = countedBy.get(id) ?? [];
          if (counted.length > 0 && random() < 0.08) {
            // Refund a decision of this identifier counted earlier: the latest, or an older one
            // whose window may have rolled since.
            const [decision] = counted.splice(Math.floor(random() * counted.length), 1);
            history.push(`${now} refund ${id} counted at ${decision.now} cost ${decision.cost}`);
            await Promise.all([onRedis.refund(id, decision), inMemory.refund(id, decision)]);
            counts.refunds++;
            continue;
          }
          const peek = random() < 0.2;
          // Sometimes this call brings its own limits: the plan changed (same windows, other limits),
          // or a window changed.
          const r = random();
          const callTiers =
            r < 0.08
              ? tiers.map((tier) => ({ ...tier, limit: 1 + Math.floor(random() * 30) }))
              : r < 0.1
                ? randomTiers(random, algorithm)
                : tiers;
          const cost = randomCost(random, callTiers);
          history.push(
            `${now} ${peek ? 'peek' : 'check'} ${id} cost ${cost}${callTiers === tiers ? '' : ` limits ${JSON.stringify(callTiers)}`}`,
          );
          ttl.last = undefined;
          const method = peek ? 'peek' : 'check';
          const options = callTiers === tiers ? { cost } : { cost, limits: inMs(callTiers) };
          if (callTiers !== tiers) counts.ownLimits++;
          const fromRedis: Decision = await onRedis[method](id, options);
          const fromMemory: Decision = await inMemory[method](id, options);
          if (fromRedis.counted) countedBy.set(id, [...counted.slice(-5), fromRedis]);
          if (!isDeepStrictEqual(fromRedis, fromMemory)) {
            throw new Error(
              `seed ${seed}, config ${JSON.stringify(tiers)}, step ${step}: decisions differ\n` +
                `last steps:\n  ${history.slice(-12).join('\n  ')}\n` +
                `redis:  ${JSON.stringify(fromRedis)}\nmemory: ${JSON.stringify(fromMemory)}`,
            );
          }
          if (fromRedis.counted && keepsExpiry(algorithm, callTiers, now, countedIndexes.get(id))) {
            // The key was persisted after the write that set its expiry: it must still be.
            if (ttl.last !== -1) throw new Error(`seed ${seed}, step ${step}: PTTL ${ttl.last} after a write that keeps the expiry`);
            counts.writes++;
            counts.keptExpiries++;
          } else if (fromRedis.counted) {
            const expected = expectedTtl(algorithm, callTiers, now, fromRedis, precision);
            expiry.set(id, now + expected);
            countedIndexes.set(
              id,
              callTiers.map(({ window }) => Math.floor(now / window)),
            );
            // Read in the same MULTI as the write. Redis does not expire keys inside a MULTI, but
            // PTTL is counted on its real clock: allow for a server that was descheduled meanwhile.
            if (ttl.last! < 0 || ttl.last! > expected || ttl.last! < expected - 50) {
              throw new Error(`seed ${seed}, step ${step}: PTTL ${ttl.last} after a write, expected ${expected}`);
            }
            counts.writes++;
          } else if (fromRedis.blocked && !peek && (blockedUntil.get(id) ?? 0) <= now) {
            // A fresh block: the (persisted) key must live at least blockFor; exactly that when
            // the block wiped the counts, which the denial then shows: nothing counted.
            blockedUntil.set(id, now + blockFor);
            expiry.set(id, afterBlock === 'reset' ? now + blockFor : Math.max(expiry.get(id) ?? 0, now + blockFor));
            if (ttl.last! > blockFor || ttl.last! < blockFor - 50) {
              throw new Error(`seed ${seed}, step ${step}: PTTL ${ttl.last} after a block, expected ${blockFor}`);
            }
            if (afterBlock === 'reset') {
              countedIndexes.delete(id);
              expect(fromRedis.tiers.map((tier) => tier.estimated)).toEqual(callTiers.map(() => 0));
              expect(fromRedis.retryAfterMs).toBe(blockFor);
              counts.wipingBlocks++;
            }
            counts.blocks++;
          } else if (ttl.last !== -1 && ttl.last !== -2) {
            // Nothing was counted, so nothing may have set an expiry on the (persisted or absent) key.
            throw new Error(`seed ${seed}, step ${step}: PTTL ${ttl.last} without a write`);
          }
          counts.steps++;
          if (peek) counts.peeks++;
          if (tiers.length > 1) counts.multiTier++;
          if (fromRedis.allowed) counts.allowed++;
          else counts.denied++;
        }
      }
      if (process.env.DIFF_DEBUG) console.log(algorithm, counts);
      // The sequence must actually exercise both outcomes, multi-tier configurations and writes.
      expectAbove(counts, {
        steps: 3_000,
        denied: 300,
        allowed: counts.steps * 0.3,
        multiTier: 1_000,
        peeks: 300,
        writes: 500,
        refunds: 100,
        ownLimits: 200,
        blocks: 30,
        wipingBlocks: 10,
        ...(WINDOW_COUNTERS.includes(algorithm) ? { keptExpiries: 100 } : {}),
      });
    });
  });
});

/** A decision without its lease, whose id each limiter makes its own: the rest must be equal. */
function withoutLease(decision: Decision): Omit<Decision, 'lease'> {
  const { lease: _lease, ...rest } = decision;
  return rest;
}

describe.each(ALGORITHMS)('%s with a concurrency bound: RedisStore and MemoryStore decide identically', (algorithm) => {
  test('seeded random sequence of checks, peeks, releases and renewals, with and without rate tiers', async () => {
    const seed = 0x1ea5e + ALGORITHMS.indexOf(algorithm);
    const random = seeded(seed);
    const counts = { steps: 0, allowed: 0, refusedByBound: 0, refusedByRate: 0, released: 0, releasedGone: 0, renewed: 0, renewedGone: 0 };
    ttl.last = undefined;
    const redisStore = new RedisStore({ client: persistingIoredis() });
    for (let config = 0; config < 9; config++) {
      const rateless = config % 3 === 0;
      const tiers = randomTiers(random, algorithm);
      const concurrency = 1 + Math.floor(random() * 4);
      const leaseMs = [5, 40, 1_000, 60_000][config % 4];
      let now = 1_700_000_000_000 + Math.floor(random() * 100_000);
      const common = {
        algorithm,
        ...(algorithm === 'precise-window' ? { precision: randomPrecision(random, algorithm) } : {}),
        clock: () => now,
        denyCacheSize: 0,
        concurrency,
        leaseMs,
        ...(rateless ? {} : { limits: inMs(tiers) }),
      } as const;
      const prefix = uniquePrefix('diff-lease');
      const onRedis = createLimiter({ ...common, store: redisStore, prefix });
      const inMemory = createLimiter({ ...common, store: new MemoryStore({ sweepIntervalMs: 0 }), prefix });
      const held: [Decision, Decision][] = [];
      const history: string[] = [];
      const differ = (step: number, what: string, redis: unknown, memory: unknown) =>
        new Error(
          `seed ${seed}, config ${config} (${rateless ? 'no tiers' : JSON.stringify(tiers)}, concurrency ${concurrency}, leaseMs ${leaseMs}), step ${step}: ${what} differ\n` +
            `last steps:\n  ${history.slice(-12).join('\n  ')}\nredis:  ${JSON.stringify(redis)}\nmemory: ${JSON.stringify(memory)}`,
        );
      for (let step = 0; step < 250; step++) {
        now = nextTime(now, rateless ? [{ limit: 1, window: leaseMs * 2 }] : [...tiers, { limit: 1, window: leaseMs * 2 }], random);
        const id = IDENTIFIERS[Math.floor(random() * 2)];
        const r = random();
        if (held.length > 0 && r < 0.3) {
          const [fromRedis, fromMemory] = held.splice(Math.floor(random() * held.length), 1)[0];
          const change = r < 0.2 ? 'release' : 'renew';
          history.push(`${now} ${change} a lease taken at ${fromRedis.now}`);
          const answers = [await fromRedis.lease![change](), await fromMemory.lease![change]()];
          if (answers[0] !== answers[1]) throw differ(step, `${change} answers`, answers[0], answers[1]);
          if (change === 'renew') {
            counts[answers[0] ? 'renewed' : 'renewedGone']++;
            if (answers[0]) held.push([fromRedis, fromMemory]);
          } else counts[answers[0] ? 'released' : 'releasedGone']++;
          continue;
        }
        const peek = r < 0.4;
        const cost = rateless ? (random() < 0.9 ? 1 : 0) : randomCost(random, tiers);
        history.push(`${now} ${peek ? 'peek' : 'check'} ${id} cost ${cost}`);
        const fromRedis = await onRedis[peek ? 'peek' : 'check'](id, { cost });
        const fromMemory = await inMemory[peek ? 'peek' : 'check'](id, { cost });
        if (!isDeepStrictEqual(withoutLease(fromRedis), withoutLease(fromMemory))) throw differ(step, 'decisions', fromRedis, fromMemory);
        if ((fromRedis.lease === undefined) !== (fromMemory.lease === undefined))
          throw differ(step, 'leases', fromRedis.lease, fromMemory.lease);
        if (fromRedis.lease !== undefined) held.push([fromRedis, fromMemory]);
        counts.steps++;
        if (fromRedis.allowed) counts.allowed++;
        else if (fromRedis.concurrency?.refused) counts.refusedByBound++;
        else counts.refusedByRate++;
      }
    }
    if (process.env.DIFF_DEBUG) console.log(algorithm, counts);
    // The sequence must reach every branch: both refusals, and live and gone leases for both changes.
    expectAbove(counts, {
      allowed: 300,
      refusedByBound: 100,
      refusedByRate: 20,
      released: 30,
      releasedGone: 100,
      renewed: 10,
      renewedGone: 50,
    });
  });
});

/** The stored state read back from Redis, in the shape of the TypeScript twin's state: `{ blockedUntil, body }`. */
async function redisState(algorithm: AlgorithmName, key: string): Promise<{ blockedUntil: number; body: number[] }> {
  if (algorithm === 'sliding-log') {
    const entries = await client.zrangebyscore(key, 0, '+inf', 'WITHSCORES');
    const scores: number[] = [];
    for (let i = 1; i < entries.length; i += 2) scores.push(Number(entries[i]));
    const marker = await client.zscore(key, '!');
    return { blockedUntil: marker === null ? 0 : -Number(marker), body: scores };
  }
  // Read as bytes: a precise window's entries are binary.
  const value = (await client.getBuffer(key))?.toString('latin1') ?? null;
  if (value === null) return { blockedUntil: 0, body: [] };
  const [, until, rest] = /^(?:!([0-9a-z]+) ?)?(.*)$/s.exec(value)!;
  if (algorithm === 'precise-window')
    return { blockedUntil: until === undefined ? 0 : parseInt(until, 36), body: [...Buffer.from(rest, 'latin1')] };
  // A token bucket keeps per tier 'm:r' in base 36, or m in decimal: the twin holds [m, r] pairs.
  const body =
    algorithm === 'token-bucket'
      ? rest
          .split(' ')
          .filter(Boolean)
          .flatMap((part) => (part.includes(':') ? part.split(':').map((n) => parseInt(n, 36)) : [Number(part), 0]))
      : readCounters(rest);
  return { blockedUntil: until === undefined ? 0 : parseInt(until, 36), body };
}

/** The twin's state in the same shape. */
function twinState(state: unknown): { blockedUntil: number; body: number[] } {
  const stored = state as { blockedUntil: number; body: number[] | string | undefined } | undefined;
  const body = stored?.body ?? [];
  // A precise window keeps its string, one character per byte.
  return { blockedUntil: stored?.blockedUntil ?? 0, body: typeof body === 'string' ? [...Buffer.from(body, 'latin1')] : [...body] };
}

describe.each(ALGORITHMS)('%s: raw Lua scripts against their TypeScript twins', (algorithm) => {
  // As scripts, and as functions of the algorithm's library.
  test.each(['scripts', 'functions'])(
    '%s: identical replies and identical stored state for a seeded random sequence of checks and settlements',
    async (form) => {
      const scripts = SCRIPTS[algorithm];
      const { functions } = scripts.library;
      await client.function('LOAD', 'REPLACE', scripts.library.code);
      const seed = 0xa11 + ALGORITHMS.indexOf(algorithm);
      const random = seeded(seed);
      let compared = 0;
      let denied = 0;
      let refunds = 0;
      let refunded = 0;
      let charges = 0;
      let blockedChecks = 0;
      let wipingBlocks = 0;
      for (let config = 0; config < 8; config++) {
        const tiers = randomTiers(random, algorithm);
        const precision = randomPrecision(random, algorithm);
        const key = `${uniquePrefix('raw')}:k`;
        let now = config % 2 === 0 ? Math.floor(random() * 20) : 1_700_000_000_000 + Math.floor(random() * 100_000);
        let state: unknown;
        const counted: { at: number; cost: number }[] = [];
        // Half the configurations block a denied identifier for a while (blockFor), half of those
        // wiping its counts for the block (blockResets).
        const blockFor = config % 2 === 1 ? 0 : 1 + Math.floor(random() * 2 * Math.max(...tiers.map((tier) => tier.window)));
        const blockResets = config % 4 === 0;
        for (let step = 0; step < 150; step++) {
          now = nextTime(now, tiers, random);
          const settle = random() < (counted.length > 0 ? 0.2 : 0.03);
          const { lua } = settle ? scripts.settle : scripts.check;
          const dryRun = random() < 0.2;
          let cost: number;
          let actualCost = 0;
          let argv: (string | number)[];
          let result: MemoryResult<unknown>;
          if (settle) {
            // A counted check settled to 0 (a refund), to less or to more; now and then a check that
            // counted nothing (a reservation of 0) settled to its actual cost.
            const [taken] = counted.length > 0 ? counted.splice(Math.floor(random() * counted.length), 1) : [{ at: now, cost: 0 }];
            cost = taken.cost;
            const roll = random();
            actualCost = roll < 0.4 ? 0 : roll < 0.7 ? Math.floor(random() * cost) : cost + 1 + Math.floor(random() * 2 * tiers[0].limit);
            const args = { now, cost, dryRun, blockFor: 0, countedAt: taken.at, actualCost, tiers, precision };
            argv = scriptArgv(args);
            result = scripts.settle.apply(state, args);
          } else {
            cost = randomCost(random, tiers);
            const args = { now, cost, dryRun, blockFor, blockResets, countedAt: 0, actualCost: 0, tiers, precision };
            argv = scriptArgv(args);
            result = scripts.check.apply(state, args);
          }
          // PERSIST in the same MULTI, so Redis' real clock cannot expire what the fake clock still needs.
          const multi = client.multi();
          if (form === 'scripts') multi.eval(lua, 1, key, ...argv);
          else multi.fcall(settle ? functions.settle : functions.check, 1, key, ...argv);
          const results = (await multi.persist(key).exec())!;
          if (results[0][0]) throw results[0][0];
          const fromLua = results[0][1] as number[];
          state = result.state;
          const context = `seed ${seed}, tiers ${JSON.stringify(tiers)}, step ${step}, now ${now}, ${settle ? `settle to ${actualCost}` : 'check'} cost ${cost}, dry ${dryRun}`;
          if (!isDeepStrictEqual(fromLua, [...result.reply])) {
            throw new Error(`${context}: replies differ\nlua: ${JSON.stringify(fromLua)}\nts:  ${JSON.stringify(result.reply)}`);
          }
          const stored = await redisState(algorithm, key);
          const twin = twinState(state);
          if (!isDeepStrictEqual(stored, twin)) {
            throw new Error(`${context}: stored state differs\nredis: ${JSON.stringify(stored)}\nts:    ${JSON.stringify(twin)}`);
          }
          compared++;
          if (settle && actualCost < cost) {
            refunds++;
            if (fromLua[0] > 0) refunded++;
          } else if (settle) {
            if (fromLua[1] > 0 && !dryRun) charges++;
          } else {
            if (fromLua[0] === 0) denied++;
            if (fromLua[2] > 0) blockedChecks++;
            if (blockResets && fromLua[2] === blockFor && !dryRun) wipingBlocks++;
            if (fromLua[0] === 1 && cost > 0 && !dryRun) counted.push({ at: now, cost });
          }
        }
      }
      expect(compared).toBe(8 * 150);
      expect(denied).toBeGreaterThan(100);
      // Settlements that gave something back, that found their window gone, and that charged more.
      expect(refunded).toBeGreaterThan(20);
      expect(refunds - refunded).toBeGreaterThan(5);
      expect(charges).toBeGreaterThan(10);
      expect(blockedChecks).toBeGreaterThan(50);
      expect(wipingBlocks).toBeGreaterThan(5);
    },
  );
});

describe.each(ALGORITHMS)('%s: the batch scripts against the TypeScript twin', (algorithm) => {
  // The batch (keys declared, one slot) and the node batch (keys in ARGV, slots of one node), as
  // scripts and as functions of the algorithm's library (whose top-level values outlive a call).
  test.each(['batch', 'node batch', 'batch function', 'node batch function'])(
    '%s: one call checking several keys (some twice) answers each as the single-key checks would, in order',
    async (form) => {
      const { check, library } = SCRIPTS[algorithm];
      const { functions } = library;
      await client.function('LOAD', 'REPLACE', library.code);
      const random = seeded(0xba7c4 + ALGORITHMS.indexOf(algorithm));
      let compared = 0;
      let batches = 0;
      let sharedBatches = 0;
      let otherTiersCompared = 0;
      for (let config = 0; config < 6; config++) {
        const tiers = randomTiers(random, algorithm);
        // Checks of other limiters on the store, with more or fewer tiers, share batches with these:
        // what one check of a run leaves in the script's tables must not reach the next.
        const otherTiers = tiers.length > 1 ? tiers.slice(1) : [...tiers, { limit: 2 * tiers[0].limit, window: 3 * tiers[0].window }];
        const precision = randomPrecision(random, algorithm);
        const keys = Array.from({ length: 4 }, (_, i) => `${uniquePrefix('batch')}:k${i}`);
        const states = new Map<string, unknown>();
        let now = 1_700_000_000_000 + Math.floor(random() * 100_000);
        const blockFor = config % 2 === 0 ? 0 : 1 + Math.floor(random() * 1_000);
        const blockResets = config % 4 === 3;
        for (let step = 0; step < 40; step++) {
          now = nextTime(now, tiers, random);
          // Some batches have one set of arguments for every key, sent once (ARGV[2] alone).
          const shared = random() < 0.3 ? { cost: randomCost(random, tiers), dryRun: random() < 0.15 } : undefined;
          const entries = Array.from({ length: 1 + Math.floor(random() * 6) }, () => ({
            key: keys[Math.floor(random() * keys.length)],
            cost: shared?.cost ?? randomCost(random, tiers),
            dryRun: shared?.dryRun ?? random() < 0.15,
            tiers: shared === undefined && random() < 0.3 ? otherTiers : tiers,
          }));
          const dryAll = random() < 0.1;
          const sharedArgv =
            shared === undefined
              ? undefined
              : scriptArgv({ now, ...shared, blockFor, blockResets, countedAt: 0, actualCost: 0, tiers, precision });
          const perKey = entries.map(
            (entry) =>
              sharedArgv ??
              scriptArgv({
                now,
                cost: entry.cost,
                dryRun: entry.dryRun,
                blockFor,
                blockResets,
                countedAt: 0,
                actualCost: 0,
                tiers: entry.tiers,
                precision,
              }),
          );
          const entryKeys = entries.map((entry) => entry.key);
          const keysDeclared = !form.startsWith('node');
          const argv = keysDeclared ? batchArgv(perKey) : batchArgv(perKey, entryKeys);
          if (dryAll) argv[BATCH_SLOT.dryRunOverride - 1] = '1';
          if (shared !== undefined && entries.length > 1) sharedBatches++;
          const multi = client.multi();
          if (form === 'batch') multi.eval(check.batchLua, entries.length, ...entryKeys, ...argv);
          else if (form === 'node batch') multi.eval(check.nodeBatchLua, 0, ...argv);
          else if (form === 'batch function') multi.fcall(functions.batch, entries.length, ...entryKeys, ...argv);
          else multi.fcall(functions.nodeBatch, 0, ...argv);
          for (const key of keys) multi.persist(key);
          const results = (await multi.exec())!;
          if (results[0][0]) throw results[0][0];
          const replies = (results[0][1] as string[]).map(batchReply);
          batches++;
          for (const [i, entry] of entries.entries()) {
            const result = check.apply(states.get(entry.key), {
              now,
              cost: entry.cost,
              dryRun: entry.dryRun || dryAll,
              blockFor,
              blockResets,
              countedAt: 0,
              actualCost: 0,
              tiers: entry.tiers,
              precision,
            });
            states.set(entry.key, result.state);
            const context = `config ${config}, step ${step}, entry ${i} of ${entries.length}, ${JSON.stringify(entry)}, dry all ${dryAll}`;
            if (!isDeepStrictEqual(replies[i], [...result.reply])) {
              throw new Error(`${context}: replies differ\nlua: ${JSON.stringify(replies[i])}\nts:  ${JSON.stringify(result.reply)}`);
            }
            compared++;
            if (entry.tiers !== tiers) otherTiersCompared++;
          }
          for (const key of keys) {
            if (!isDeepStrictEqual(await redisState(algorithm, key), twinState(states.get(key)))) {
              throw new Error(`config ${config}, step ${step}: stored state of ${key} differs`);
            }
          }
        }
      }
      expect(batches).toBe(6 * 40);
      expect(sharedBatches).toBeGreaterThan(30);
      expect(compared).toBeGreaterThan(500);
      expect(otherTiersCompared).toBeGreaterThan(100);
    },
  );
});

// The sliding log writes its sorted set at once; the other algorithms keep their state in a string.
const STRING_ALGORITHMS = ALGORITHMS.filter((algorithm) => algorithm !== 'sliding-log');
describe.each(STRING_ALGORITHMS)('%s: a batch function that raised midway', (algorithm) => {
  // A batch holds back a write to a key its next check reads again. When that next check raises
  // (arguments Redis cannot read here), the call fails with the write still held: the library's
  // top-level values outlive the call, and the next call must not carry the write out.
  test('leaves nothing held for the next call to write', async () => {
    const { library } = SCRIPTS[algorithm];
    await client.function('LOAD', 'REPLACE', library.code);
    const argv = scriptArgv({
      now: 1_700_000_000_000,
      cost: 1,
      dryRun: false,
      blockFor: 0,
      blockResets: false,
      countedAt: 0,
      actualCost: 0,
      tiers: [{ limit: 10, window: 60_000 }],
      precision: 100,
    });
    const prefix = uniquePrefix('raised');
    const [held, other] = [`${prefix}:held`, `${prefix}:other`];
    const failing = batchArgv([argv, ['unreadable']]);
    await expect(client.fcall(library.functions.batch, 2, held, held, ...failing)).rejects.toThrow();
    const replies = (await client.fcall(library.functions.batch, 1, other, ...batchArgv([argv]))) as string[];
    expect(batchReply(replies[0])[0]).toBe(1);
    expect(await client.exists(held)).toBe(0);
    expect(await client.exists(other)).toBe(1);
  });
});

describe.each(ALGORITHMS)('%s: a batch call leaves each key the expiry single calls leave', (algorithm) => {
  // A batch reads a key once and writes it once, however many of its checks share the key: the
  // expiries it writes (a count's, a block's kept when longer, a wiping block's) must be those the
  // same checks leave one call at a time. Redis's own clock: the expiries are real.
  const tiers: Tier[] = [{ limit: 2, window: 10_000 }];
  test.each([
    ['no block', 0, false],
    ['a block shorter than the counts live', 3_000, false],
    ['a block longer than the counts live', 90_000, false],
    ['a block that wipes the counts', 3_000, true],
  ] as const)('%s', async (_name, blockFor, blockResets) => {
    const { check } = SCRIPTS[algorithm];
    const argv = scriptArgv({
      now: undefined,
      cost: 1,
      dryRun: false,
      blockFor,
      blockResets,
      countedAt: 0,
      actualCost: 0,
      tiers,
      precision: 100,
    });
    const batched = `${uniquePrefix('expiry-batch')}:k`;
    const single = `${uniquePrefix('expiry-single')}:k`;
    const keys = [batched, batched, batched];
    const replies = ((await client.eval(check.batchLua, keys.length, ...keys, ...batchArgv(keys.map(() => argv)))) as string[]).map(
      batchReply,
    );
    const singles: number[][] = [];
    for (let i = 0; i < keys.length; i++) singles.push((await client.eval(check.lua, 1, single, ...argv)) as number[]);
    // Allowed twice, then denied (and blocked when blockFor is set).
    expect(replies.map((reply) => reply[0])).toEqual(singles.map((reply) => reply[0]));
    expect(replies.map((reply) => reply[0])).toEqual([1, 1, 0]);
    const [batchedTtl, singleTtl] = await Promise.all([client.pttl(batched), client.pttl(single)]);
    expect(batchedTtl).toBeGreaterThan(0);
    expect(Math.abs(batchedTtl - singleTtl)).toBeLessThan(200);
  });
});

describe.each(ALGORITHMS)('%s: a settlement that gives back keeps the expiry', (algorithm) => {
  // Only what was counted changes: the key lives as long as the check made it live, on Redis's clock.
  test('the key expires when it would have without the settlement', async () => {
    const { check, settle } = SCRIPTS[algorithm];
    const tiers: Tier[] = [{ limit: 10, window: 10_000 }];
    const call = { now: undefined, cost: 3, dryRun: false, blockFor: 0, countedAt: 0, actualCost: 0, tiers, precision: 100 };
    const key = `${uniquePrefix('settle-expiry')}:k`;
    const checked = (await client.eval(check.lua, 1, key, ...scriptArgv(call))) as number[];
    expect(checked[0]).toBe(1);
    const before = await client.pttl(key);
    expect(before).toBeGreaterThan(0);
    const settled = (await client.eval(settle.lua, 1, key, ...scriptArgv({ ...call, countedAt: checked[1], actualCost: 1 }))) as number[];
    expect(settled[0]).toBe(2);
    const after = await client.pttl(key);
    expect(after).toBeGreaterThan(0);
    expect(after).toBeLessThanOrEqual(before);
    expect(before - after).toBeLessThan(200);
  });
});
