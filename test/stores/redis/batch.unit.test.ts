/**
 * RepeatedCheckArgv: the arguments of a check are built once while its inputs repeat, and
 * built again as soon as any input differs, including a tier changed in place.
 *
 * CheckBatcher on a Cluster, over a scripted sender: what goes in a node batch, and what is sent
 * again when a node cannot run it (before Redis 7) or answers that it does not serve a key. The
 * same paths against a real cluster are in cluster-batch.test.ts, except the Redis 6 fallback.
 */
import { ALGORITHMS, type RawReply } from '../../../src/algorithms';
import { StoreError } from '../../../src/errors';
import { FAILED_CHECK, NODE_BATCH_SLOT, type ScriptCall, scriptArgv } from '../../../src/protocol';
import { type BatchSender, CheckBatcher, RepeatedCheckArgv } from '../../../src/stores/redis/batch';

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
