/**
 * RepeatedCheckArgv: the arguments of a check are built once while its inputs repeat, and
 * built again as soon as any input differs, including a tier changed in place.
 *
 * CheckBatcher, over a scripted sender. On a standalone server: when a check leaves (at once
 * while nothing is in flight, else with the answer of the call in flight, 10 ms at most), and
 * that a withdrawn check is never sent. On a Cluster: what goes in a node batch, what is sent
 * again when a node cannot run it (before Redis 7) or answers that it does not serve a key, and
 * when a node's checks leave (at the end of a turn, once its node batch in flight was answered,
 * 10 ms at most). The same paths against real servers are in round-trips.test.ts,
 * test/faults/redis-slow.test.ts, cluster-batch.test.ts and test/faults/cluster-reshard.test.ts,
 * except the Redis 6 fallback.
 */
import { ALGORITHMS, type RawReply } from '../../../src/algorithms';
import { StoreError } from '../../../src/errors';
import { FAILED_CHECK, NODE_BATCH_SLOT, type ScriptCall, scriptArgv } from '../../../src/protocol';
import { type BatchSender, CheckBatcher, RepeatedCheckArgv } from '../../../src/stores/redis/batch';
import { slotOf } from '../../../src/stores/redis/cluster-slot';

/** A check's call, from its inputs in ARGV order. */
function call(
  now: number | undefined,
  cost: number,
  dryRun: boolean,
  blockFor: number,
  tiers: readonly { limit: number; window: number }[],
): ScriptCall {
  return { now, cost, dryRun, blockFor, countedAt: 0, actualCost: 0, tiers, precision: 1 };
}

describe('RepeatedCheckArgv', () => {
  test('hands back the same array while cost, dry run, blockFor and the tiers repeat, and equal to scriptArgv', () => {
    const repeated = new RepeatedCheckArgv();
    const tiers = [{ limit: 10, window: 1_000 }];
    const first = repeated.argv(call(undefined, 1, false, 0, tiers));
    expect(first).toEqual(scriptArgv(call(undefined, 1, false, 0, tiers)));
    expect(repeated.argv(call(undefined, 1, false, 0, tiers))).toBe(first);
    // Equal tiers in another array: still the same arguments.
    expect(repeated.argv(call(undefined, 1, false, 0, [{ limit: 10, window: 1_000 }]))).toBe(first);
  });

  test.each([
    [
      'cost',
      (r: RepeatedCheckArgv, t: { limit: number; window: number }[]) => r.argv(call(undefined, 2, false, 0, t)),
      [undefined, 2, false, 0],
    ],
    [
      'dry run',
      (r: RepeatedCheckArgv, t: { limit: number; window: number }[]) => r.argv(call(undefined, 1, true, 0, t)),
      [undefined, 1, true, 0],
    ],
    [
      'blockFor',
      (r: RepeatedCheckArgv, t: { limit: number; window: number }[]) => r.argv(call(undefined, 1, false, 500, t)),
      [undefined, 1, false, 500],
    ],
  ] as const)('builds the arguments again when the %s changes', (_name, change, inputs) => {
    const repeated = new RepeatedCheckArgv();
    const tiers = [{ limit: 10, window: 1_000 }];
    const first = repeated.argv(call(undefined, 1, false, 0, tiers));
    const changed = change(repeated, tiers);
    expect(changed).not.toBe(first);
    expect(changed).toEqual(scriptArgv(call(inputs[0], inputs[1], inputs[2], inputs[3], tiers)));
    expect(repeated.argv(call(undefined, 1, false, 0, tiers))).toEqual(first);
  });

  test('builds the arguments again for other tiers, a tier changed in place, or an injected clock', () => {
    const repeated = new RepeatedCheckArgv();
    const tiers = [{ limit: 10, window: 1_000 }];
    const first = repeated.argv(call(undefined, 1, false, 0, tiers));
    tiers[0].limit = 20;
    const afterChange = repeated.argv(call(undefined, 1, false, 0, tiers));
    expect(afterChange).not.toBe(first);
    expect(afterChange).toEqual(scriptArgv(call(undefined, 1, false, 0, tiers)));
    const two = [
      { limit: 20, window: 1_000 },
      { limit: 100, window: 60_000 },
    ];
    expect(repeated.argv(call(undefined, 1, false, 0, two))).toEqual(scriptArgv(call(undefined, 1, false, 0, two)));
    const clocked = repeated.argv(call(1_700_000_000_000, 1, false, 0, tiers));
    expect(clocked).toEqual(scriptArgv(call(1_700_000_000_000, 1, false, 0, tiers)));
    expect(repeated.argv(call(1_700_000_000_001, 1, false, 0, tiers))[0]).toBe(1_700_000_000_001);
  });
});

/** A reply the test gives when it chooses, or a failure. */
interface Deferred {
  readonly what: string;
  answer(reply: unknown): void;
  fail(error: Error): void;
}

/** Answers every check of a call (`one <key>`, or `<batch> <keys...>`) as allowed, as a batch or a single check would. */
function allowAll(deferred: Deferred): void {
  const keys = deferred.what.split(' ').slice(1);
  deferred.answer(deferred.what.startsWith('one') ? [1, 9, 0] : keys.map(() => '1,9,0'));
}

/** Lets the turn end: the checks queued in it leave (setImmediate is never faked here). */
const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('CheckBatcher on a standalone server: batches clocked by replies', () => {
  const script = ALGORITHMS['sliding-window'].check;
  const argv = scriptArgv(call(undefined, 1, false, 0, [{ limit: 10, window: 1_000 }]));

  /** A sender whose calls the test answers. */
  function heldSender() {
    const calls: Deferred[] = [];
    const deferred = (what: string) => new Promise<unknown>((resolve, reject) => calls.push({ what, answer: resolve, fail: reject }));
    const batchSender: BatchSender = {
      one: (_script, key) => deferred(`one ${key}`),
      many: (_script, keys) => deferred(`many ${keys.join(' ')}`),
    };
    return { batchSender, calls, sent: () => calls.map((c) => c.what) };
  }

  // The time a check waits at most passes only when a test says so.
  beforeEach(() => jest.useFakeTimers({ doNotFake: ['setImmediate'] }));
  afterEach(() => jest.useRealTimers());

  test('a check leaves at once while nothing is in flight; those started meanwhile leave together with its answer', async () => {
    const { batchSender, calls, sent } = heldSender();
    const batcher = new CheckBatcher(batchSender);
    const answers: string[] = [];
    const check = (key: string) => batcher.check(script, key, argv, (error) => answers.push(error ? `${key} failed` : key));
    expect(check('a')).toBeUndefined();
    expect(sent()).toEqual(['one a']);
    expect(check('b')).toBeDefined();
    expect(check('c')).toBeDefined();
    await settle();
    // Not at the end of the turn: they wait for the call in flight.
    expect(sent()).toEqual(['one a']);
    allowAll(calls[0]);
    await settle();
    expect(sent()).toEqual(['one a', 'many b c']);
    expect(answers).toEqual(['a']);
    // A failed call lets the next ones go too.
    check('d');
    calls[1].fail(new Error('connection lost'));
    await settle();
    expect(answers).toEqual(['a', 'b failed', 'c failed']);
    expect(sent()).toEqual(['one a', 'many b c', 'one d']);
    allowAll(calls[2]);
    await settle();
    expect(answers).toEqual(['a', 'b failed', 'c failed', 'd']);
    // Idle again: the next check leaves at once.
    check('e');
    expect(sent()).toHaveLength(4);
  });

  test('sixteen waiting checks leave without waiting for the call in flight', async () => {
    const { batchSender, sent } = heldSender();
    const batcher = new CheckBatcher(batchSender);
    const keys = Array.from({ length: 18 }, (_, i) => `k${i}`);
    for (const key of keys) batcher.check(script, key, argv, () => undefined);
    expect(sent()).toEqual(['one k0', `many ${keys.slice(1, 17).join(' ')}`]);
  });

  test('a check waits 10 ms at most for the call in flight, then leaves on its own', async () => {
    const { batchSender, calls, sent } = heldSender();
    const batcher = new CheckBatcher(batchSender);
    const check = (key: string) => batcher.check(script, key, argv, () => undefined);
    check('a');
    check('b');
    jest.advanceTimersByTime(5);
    check('c');
    jest.advanceTimersByTime(4);
    expect(sent()).toEqual(['one a']);
    // 10 ms after the oldest began to wait.
    jest.advanceTimersByTime(1);
    expect(sent()).toEqual(['one a', 'many b c']);
    // The next one waits for both calls in flight, 10 ms of its own at most.
    check('d');
    allowAll(calls[0]);
    await settle();
    jest.advanceTimersByTime(9);
    expect(sent()).toHaveLength(2);
    jest.advanceTimersByTime(1);
    expect(sent()).toEqual(['one a', 'many b c', 'one d']);
  });

  test('a withdrawn check is never sent nor answered; the others wait as before', async () => {
    const { batchSender, calls, sent } = heldSender();
    const batcher = new CheckBatcher(batchSender);
    const answers: string[] = [];
    const check = (key: string) => batcher.check(script, key, argv, () => answers.push(key));
    check('a');
    const late = check('late');
    check('b');
    late?.withdraw();
    allowAll(calls[0]);
    await settle();
    expect(sent()).toEqual(['one a', 'one b']);
    allowAll(calls[1]);
    await settle();
    expect(answers).toEqual(['a', 'b']);
    // Every check withdrawn: nothing is sent, and the queue is idle again.
    const only = check('c');
    const gone = check('gone');
    gone?.withdraw();
    allowAll(calls[2]);
    await settle();
    expect(only).toBeUndefined();
    expect(sent()).toEqual(['one a', 'one b', 'one c']);
    check('d');
    expect(sent()).toEqual(['one a', 'one b', 'one c', 'one d']);
  });
});

describe('CheckBatcher on a Cluster', () => {
  const script = ALGORITHMS['sliding-window'].check;
  const argv = scriptArgv(call(undefined, 1, false, 0, [{ limit: 10, window: 1_000 }]));
  const node = { name: 'the only node' };
  /** A reply of one check, as a batch answers it. */
  const reply = (key: string) => `1,${key.length},0`;

  /** A sender whose node batches answer with `onNode`, recording what went where. */
  function sender(onNode: (keys: string[]) => Promise<unknown>) {
    const sent: string[] = [];
    const batchSender: BatchSender = {
      one: (_script, key) => {
        sent.push(`one ${key}`);
        return Promise.resolve([1, key.length, 0]);
      },
      many: (_script, keys) => {
        sent.push(`slot ${keys.join(' ')}`);
        return Promise.resolve(keys.map(reply));
      },
      cluster: {
        keyPrefix: '',
        nodeOf: () => node,
        runOnNode: (to, _script, nodeArgv) => {
          expect(to).toBe(node);
          const count = Number(nodeArgv[NODE_BATCH_SLOT.keyCount - 1]);
          const keys = nodeArgv.slice(NODE_BATCH_SLOT.firstKey - 1, NODE_BATCH_SLOT.firstKey - 1 + count);
          sent.push(`node ${keys.join(' ')}`);
          return onNode(keys);
        },
      },
    };
    return { batchSender, sent };
  }

  /** Checks `keys` in one turn; resolves with each check's reply, or its error. */
  function checkAll(batcher: CheckBatcher, keys: string[]): Promise<(RawReply | Error)[]> {
    return Promise.all(
      keys.map(
        (key) =>
          new Promise<RawReply | Error>((resolve) =>
            batcher.check(script, key, argv, (error, raw) => resolve(error ? (error as Error) : raw!)),
          ),
      ),
    );
  }

  // Three keys of three slots (and one twice), all on one node.
  const keys = ['a', 'b', 'c', 'a'];

  test('keys of several slots on one node go in one node batch, each check answered', async () => {
    const { batchSender, sent } = sender((batchKeys) => Promise.resolve(batchKeys.map(reply)));
    expect(await checkAll(new CheckBatcher(batchSender), keys)).toEqual(keys.map((key) => [1, key.length, 0]));
    expect(sent).toEqual(['node a b c a']);
  });

  test('a check withdrawn before the end of its turn is not sent', async () => {
    const { batchSender, sent } = sender((batchKeys) => Promise.resolve(batchKeys.map(reply)));
    const batcher = new CheckBatcher(batchSender);
    const answered: string[] = [];
    for (const key of ['a', 'b', 'c']) batcher.check(script, key, argv, () => answered.push(key))?.withdraw();
    const others = checkAll(batcher, ['d', 'e']);
    expect(await others).toEqual([
      [1, 1, 0],
      [1, 1, 0],
    ]);
    expect(sent).toEqual(['node d e']);
    expect(answered).toEqual([]);
  });

  test('a node without script flags (before Redis 7): the checks go again per slot, answered once each', async () => {
    // What Redis 6 answers to the script's first line, as the client adapters report it.
    const refusal = new StoreError(
      'ERR',
      "Redis answered with an error: ERR Error compiling script (new function): user_script:1: unexpected symbol near '#'",
    );
    const { batchSender, sent } = sender(() => Promise.reject(refusal));
    const batcher = new CheckBatcher(batchSender);
    expect(await checkAll(batcher, keys)).toEqual(keys.map((key) => [1, key.length, 0]));
    expect(sent.splice(0)).toEqual(['node a b c a', 'slot a a', 'one b', 'one c']);
    // And no node batch is tried again.
    expect(await checkAll(batcher, keys)).toEqual(keys.map((key) => [1, key.length, 0]));
    expect(sent).toEqual(['slot a a', 'one b', 'one c']);
  });

  test('a check that failed for another reason fails alone, coded; one the node does not serve goes again alone', async () => {
    const { batchSender, sent } = sender(() =>
      Promise.resolve([
        reply('a'),
        `${FAILED_CHECK}ERR Script attempted to access a non local key in a cluster node`,
        `${FAILED_CHECK}WRONGTYPE Operation against a key holding the wrong kind of value`,
        reply('a'),
      ]),
    );
    const answers = await checkAll(new CheckBatcher(batchSender), keys);
    expect(answers[0]).toEqual([1, 1, 0]);
    expect(answers[1]).toEqual([1, 1, 0]);
    expect(answers[2]).toMatchObject({ name: 'StoreError', code: 'SWL_STORE_ERROR', reply: 'WRONGTYPE' });
    expect(answers[3]).toEqual([1, 1, 0]);
    expect(sent).toEqual(['node a b c a', 'one b']);
  });

  test('after a node batch of which its node served no check, node batches pause for a second', async () => {
    let now = 1_700_000_000_000;
    const clock = jest.spyOn(Date, 'now').mockImplementation(() => now);
    try {
      const notHere = `${FAILED_CHECK}ERR Script attempted to access a non local key in a cluster node`;
      let serve = false;
      const { batchSender, sent } = sender((batchKeys) => Promise.resolve(batchKeys.map((key) => (serve ? reply(key) : notHere))));
      const batcher = new CheckBatcher(batchSender);
      expect(await checkAll(batcher, keys)).toEqual(keys.map((key) => [1, key.length, 0]));
      expect(sent.splice(0)).toEqual(['node a b c a', 'slot a a', 'one b', 'one c']);
      serve = true;
      now += 999;
      await checkAll(batcher, keys);
      expect(sent.splice(0)).toEqual(['slot a a', 'one b', 'one c']);
      now += 1;
      await checkAll(batcher, keys);
      expect(sent.splice(0)).toEqual(['node a b c a']);
    } finally {
      clock.mockRestore();
    }
  });
});

describe('CheckBatcher on a Cluster: node batches clocked by their node’s replies', () => {
  const script = ALGORITHMS['sliding-window'].check;
  const argv = scriptArgv(call(undefined, 1, false, 0, [{ limit: 10, window: 1_000 }]));
  // Keys of several slots on each node: "a…" keys on one, "b…" keys on the other.
  const nodeA = { name: 'A' };
  const nodeB = { name: 'B' };

  /** A two-node sender whose node batches the test answers. */
  function heldNodes() {
    const calls: Deferred[] = [];
    const slotsOfB = new Set<number>();
    const batchSender: BatchSender = {
      one: (_script, key) => Promise.resolve([1, key.length, 0]),
      many: (_script, keys) => Promise.resolve(keys.map(() => '1,9,0')),
      cluster: {
        keyPrefix: '',
        nodeOf: (slot) => (slotsOfB.has(slot) ? nodeB : nodeA),
        runOnNode: (to, _script, nodeArgv) => {
          const count = Number(nodeArgv[NODE_BATCH_SLOT.keyCount - 1]);
          const keys = nodeArgv.slice(NODE_BATCH_SLOT.firstKey - 1, NODE_BATCH_SLOT.firstKey - 1 + count);
          return new Promise<unknown>((resolve, reject) =>
            calls.push({ what: `${to === nodeB ? 'B' : 'A'} ${keys.join(' ')}`, answer: resolve, fail: reject }),
          );
        },
      },
    };
    for (const key of ['b1', 'b2', 'b3', 'b4', 'b5', 'b6']) slotsOfB.add(slotOf(key));
    return { batchSender, calls, sent: () => calls.map((c) => c.what) };
  }

  beforeEach(() => jest.useFakeTimers({ doNotFake: ['setImmediate'] }));
  afterEach(() => jest.useRealTimers());

  test('a node’s checks wait for its batch in flight and leave at the end of the answer’s turn; other nodes do not wait', async () => {
    const { batchSender, calls, sent } = heldNodes();
    const batcher = new CheckBatcher(batchSender);
    const answers: string[] = [];
    const check = (key: string) => batcher.check(script, key, argv, (error) => answers.push(error ? `${key} failed` : key));
    check('a1');
    check('a2');
    expect(sent()).toEqual([]);
    await settle();
    expect(sent()).toEqual(['A a1 a2']);
    // A's batch is in flight: its next checks wait for it over turns; B's leave at the end of their turn.
    check('a3');
    check('b1');
    check('b2');
    await settle();
    check('a4');
    await settle();
    expect(sent()).toEqual(['A a1 a2', 'B b1 b2']);
    allowAll(calls[0]);
    // Those started in the turn of the answer go along.
    check('a5');
    await settle();
    expect(sent()).toEqual(['A a1 a2', 'B b1 b2', 'A a3 a4 a5']);
    expect(answers).toEqual(['a1', 'a2']);
    // A failed batch lets the next ones go too.
    check('a6');
    check('a7');
    calls[2].fail(new Error('connection lost'));
    await settle();
    expect(sent()).toEqual(['A a1 a2', 'B b1 b2', 'A a3 a4 a5', 'A a6 a7']);
    expect(answers).toEqual(['a1', 'a2', 'a3 failed', 'a4 failed', 'a5 failed']);
  });

  test('a node’s checks wait 10 ms at most for its batch in flight, then leave on their own', async () => {
    const { batchSender, sent } = heldNodes();
    const batcher = new CheckBatcher(batchSender);
    const check = (key: string) => batcher.check(script, key, argv, () => undefined);
    check('a1');
    check('a2');
    await settle();
    check('a3');
    check('a4');
    await settle();
    jest.advanceTimersByTime(8);
    await settle();
    expect(sent()).toEqual(['A a1 a2']);
    jest.advanceTimersByTime(2);
    await settle();
    expect(sent()).toEqual(['A a1 a2', 'A a3 a4']);
  });

  test('a held check withdrawn is not sent; sixteen leave without waiting', async () => {
    const { batchSender, calls, sent } = heldNodes();
    const batcher = new CheckBatcher(batchSender);
    const answers: string[] = [];
    const check = (key: string) => batcher.check(script, key, argv, () => answers.push(key));
    check('a1');
    check('a2');
    await settle();
    check('a3');
    check('late')?.withdraw();
    check('a4');
    await settle();
    allowAll(calls[0]);
    // The answer's turn, then its end.
    await settle();
    await settle();
    expect(sent()).toEqual(['A a1 a2', 'A a3 a4']);
    const keys = Array.from({ length: 16 }, (_, i) => `x${i}`);
    for (const key of keys) check(key);
    expect(sent()).toEqual(['A a1 a2', 'A a3 a4', `A ${keys.join(' ')}`]);
    expect(answers).toEqual(['a1', 'a2']);
  });
});
