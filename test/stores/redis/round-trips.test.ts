/**
 * One round trip per check: Redis's MONITOR sees exactly one call per check, peek and refund
 * from the store's client, and no other command, through every client library alike: an FCALL
 * of the algorithm's function once its library is loaded, or with `functions: false` an EVALSHA. After SCRIPT FLUSH, one check costs one EVALSHA answered
 * NOSCRIPT and one EVAL, and the next ones are single EVALSHAs again; after FUNCTION FLUSH, one
 * FCALL answered that the function is missing, the library's load and the script, and the next
 * ones are single FCALLs again. On a redis-server of its own, so no other test file's commands
 * are seen.
 */
import { Redis } from 'ioredis';
import { type AlgorithmName, createLimiter, type Limiter, RedisStore } from '../../../src';
import { type RedisProcess, startRedis } from '../../../support/redis-server';
import { closeClient, REDIS_CLIENTS, type StoreClient } from '../../helpers/redis';

const ALGORITHMS: AlgorithmName[] = ['sliding-window', 'fixed-window', 'sliding-log'];

let server: RedisProcess;
let admin: Redis;
let monitor: Redis;
/** Commands seen by MONITOR since the last `reset()`, by name, leaving out those scripts call and the admin's. */
let seen: Record<string, number> = {};
/** The same for the commands the scripts themselves call. */
let seenInScripts: Record<string, number> = {};
/** How many ARGV each EVALSHA or FCALL seen carried (after the SHA or name, the key count and the keys). */
let callArgv: number[] = [];
beforeAll(async () => {
  server = await startRedis();
  admin = new Redis(server.url);
  await admin.client('SETNAME', 'admin');
  // monitor() opens a connection of its own: the one it is called on is only needed for that.
  const origin = new Redis(server.url);
  monitor = await origin.monitor();
  await origin.quit();
  const adminAddresses = new Set<string>();
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (source === 'lua') {
      const name = args[0].toLowerCase();
      seenInScripts[name] = (seenInScripts[name] ?? 0) + 1;
      return;
    }
    if (adminAddresses.has(source)) return;
    if (args[0].toUpperCase() === 'ECHO' && args[1] === 'admin') {
      adminAddresses.add(source);
      return;
    }
    const name = args[0].toLowerCase();
    seen[name] = (seen[name] ?? 0) + 1;
    if (name === 'evalsha' || name === 'fcall') callArgv.push(args.length - 3 - Number(args[2]));
  });
  await admin.echo('admin');
});
afterAll(async () => {
  monitor.disconnect();
  await admin.quit();
  await server.stop();
});

/** Forgets the commands seen so far, once MONITOR has passed them all on. */
async function reset(): Promise<void> {
  await commandCalls();
  seen = {};
  seenInScripts = {};
  callArgv = [];
}

/** The commands seen, once MONITOR has passed on everything sent before (a marker through the admin connection). */
async function commandCalls(): Promise<Record<string, number>> {
  const marker = `marker-${Date.now()}-${Math.random()}`;
  const arrived = new Promise<void>((resolve) => {
    const listener = (_time: string, args: string[]) => {
      if (args[1] === marker) {
        monitor.off('monitor', listener);
        resolve();
      }
    };
    monitor.on('monitor', listener);
  });
  await admin.echo(marker);
  await arrived;
  return { ...seen };
}

/** The store's two ways of running a check, and the command each check is then seen as. */
const MODES = [
  { mode: 'functions', functions: true, call: 'fcall' },
  { mode: 'scripts', functions: false, call: 'evalsha' },
] as const;

describe.each(REDIS_CLIENTS)('%s', (_name, kind) => {
  let client: StoreClient;
  beforeAll(async () => {
    client = await kind.standalone(server.url);
  });
  afterAll(() => closeClient(client));

  describe.each(MODES)('$mode', ({ mode, functions, call }) => {
    test.each(ALGORITHMS)('%s: one call per check, peek and refund, and one per batch of checks started meanwhile', async (algorithm) => {
      const limiter = createLimiter({
        store: new RedisStore({ client, functions }),
        limit: 5,
        window: '1m',
        algorithm,
        prefix: `rt-${mode}-${kind.name}-${algorithm}`,
        denyCacheSize: 0,
      });
      await limiter.check('warm-up'); // loads the scripts, or the function library
      const counted = await limiter.check('warm-up');
      await limiter.refund('warm-up', counted);
      // The first leaves alone, the others in a batch once it is answered: loads the batch script.
      await Promise.all([limiter.check('warm-up'), limiter.check('warm-up'), limiter.check('warm-up')]);
      await reset();
      for (let i = 0; i < 7; i++) await limiter.check(`id-${i % 2}`); // allowed and denied alike
      await limiter.peek('id-0');
      const decision = await limiter.check('id-2', { cost: 2 });
      await limiter.refund('id-2', decision);
      // Started in one turn of the event loop, 20 checks go out as three calls: the first alone (no
      // call is in flight), the next 16 as a batch (a batch leaves once that full), then the other 3
      // once both are answered.
      const parallel = await Promise.all(Array.from({ length: 20 }, () => limiter.check('parallel')));
      expect(parallel.filter((d) => d.allowed)).toHaveLength(5);
      expect(await commandCalls()).toEqual({ [call]: 7 + 1 + 1 + 1 + 3 });
    });

    /** A limiter of 100 per minute whose batch script is loaded, with the commands seen so far forgotten. */
    async function withBatchScript(prefix: string) {
      const limiter = createLimiter({
        store: new RedisStore({ client, functions }),
        limit: 100,
        window: '1m',
        prefix: `${prefix}-${mode}-${kind.name}`,
      });
      await Promise.all([limiter.check('warm-up'), limiter.check('warm-up'), limiter.check('warm-up')]);
      await reset();
      return limiter;
    }

    /** 17 checks started at once, of `cost(i)`: the first goes alone, the other 16 in one batch call. */
    function firstAloneThenBatch(limiter: Limiter, cost: (i: number) => number = () => 1) {
      return Promise.all(Array.from({ length: 17 }, (_, i) => limiter.check(`id-${i}`, { cost: cost(i) })));
    }

    test('a batch reads Redis TIME once: its checks are decided at one instant', async () => {
      const limiter = await withBatchScript('rt-time');
      const decisions = await firstAloneThenBatch(limiter);
      expect(await commandCalls()).toEqual({ [call]: 2 });
      expect(seenInScripts.time).toBe(2);
      expect(new Set(decisions.slice(1).map((decision) => decision.now)).size).toBe(1);
      await reset();
      await limiter.check('alone');
      await limiter.check('alone');
      await commandCalls();
      expect(seenInScripts.time).toBe(2);
    });

    test('a batch whose checks have the same arguments sends them once; checks of different costs send their own', async () => {
      const limiter = await withBatchScript('rt-argv');
      const same = await firstAloneThenBatch(limiter);
      expect(await commandCalls()).toEqual({ [call]: 2 });
      // The batch's: the dry-run override, then the arguments every key shares.
      expect(callArgv[1]).toBe(2);
      expect(same.map((decision) => decision.remaining)).toEqual(Array.from({ length: 17 }, () => 99));
      await reset();
      const mixed = await firstAloneThenBatch(limiter, (i) => 1 + (i % 2));
      expect(await commandCalls()).toEqual({ [call]: 2 });
      expect(callArgv[1]).toBe(17);
      expect(mixed.map((decision) => decision.remaining)).toEqual(Array.from({ length: 17 }, (_, i) => 98 - (i % 2)));
    });

    test('a batch reads and writes a key once for each run of consecutive checks of it', async () => {
      const limiter = await withBatchScript('rt-busy');
      // The first goes alone; the batch's 16 hold three runs of one key each: busy x8, other x4, busy x4.
      const ids = [
        'busy',
        ...Array.from({ length: 8 }, () => 'busy'),
        ...Array.from({ length: 4 }, () => 'other'),
        ...Array.from({ length: 4 }, () => 'busy'),
      ];
      const decisions = await Promise.all(ids.map((id) => limiter.check(id)));
      expect(await commandCalls()).toEqual({ [call]: 2 });
      expect(seenInScripts.get).toBe(1 + 3);
      expect(seenInScripts.set).toBe(1 + 3);
      expect(decisions.map((decision) => decision.remaining)).toEqual([
        ...Array.from({ length: 9 }, (_, i) => 99 - i),
        99,
        98,
        97,
        96,
        90,
        89,
        88,
        87,
      ]);
      expect(await admin.get(`rt-busy-${mode}-${kind.name}:busy`)).toMatch(/:d:0$/);
    });
  });

  test('after SCRIPT FLUSH: one EVALSHA answered NOSCRIPT and one EVAL, then one EVALSHA per check again', async () => {
    const limiter = createLimiter({
      store: new RedisStore({ client, functions: false }),
      limit: 5,
      window: '1m',
      prefix: `rt-flush-${kind.name}`,
    });
    await limiter.check('a');
    await admin.script('FLUSH');
    await reset();
    await limiter.check('a');
    expect(await commandCalls()).toEqual({ evalsha: 1, eval: 1 });
    await reset();
    await limiter.check('a');
    await limiter.check('b');
    expect(await commandCalls()).toEqual({ evalsha: 2 });
  });

  test('after FUNCTION FLUSH: one FCALL answered that the function is missing, the load and the script, then one FCALL per check again', async () => {
    const limiter = createLimiter({ store: new RedisStore({ client }), limit: 5, window: '1m', prefix: `rt-function-flush-${kind.name}` });
    await limiter.check('a');
    await limiter.check('a');
    await admin.function('FLUSH');
    await admin.script('FLUSH');
    await reset();
    expect((await limiter.check('a')).remaining).toBe(2);
    expect(await commandCalls()).toEqual({ fcall: 1, function: 1, evalsha: 1, eval: 1 });
    await reset();
    expect((await limiter.check('a')).remaining).toBe(1);
    await limiter.check('b');
    expect(await commandCalls()).toEqual({ fcall: 2 });
  });

  test('with functions: false, nothing is loaded on the server', async () => {
    await admin.function('FLUSH');
    const limiter = createLimiter({
      store: new RedisStore({ client, functions: false }),
      limit: 5,
      window: '1m',
      prefix: `rt-no-functions-${kind.name}`,
    });
    await limiter.check('a');
    await Promise.all([limiter.check('a'), limiter.check('a'), limiter.check('a')]);
    expect(await admin.function('LIST')).toEqual([]);
  });
});
