/**
 * The one piece of ioredis internals the store relies on (the command queue, in src/stores/redis/ioredis.ts),
 * in ioredis and in its fork iovalkey. These tests fail loudly when an upgrade of either changes
 * it: re-verify the abandonment of unanswered checks (the Redis-killed fault tests) before adding
 * a version here.
 */
import { readFileSync } from 'node:fs';
import { Redis as Ioredis, type RedisOptions } from 'ioredis';
import { Redis as IoValkey } from 'iovalkey';
import { Warnings } from '../../../src/errors';
import { abandonUnansweredChecks, commandQueueOf } from '../../../src/stores/redis/ioredis';
import { type ScriptKind, shaOf } from '../../../src/stores/redis/redis-client';
import { redisUrl } from '../../helpers/redis';

type Redis = Ioredis;

/**
 * Each library, the versions whose queues were verified (the major version; iovalkey, still 0.x,
 * by minor), and how to make its client.
 */
const LIBRARIES: [string, { verified: RegExp; make: (options?: RedisOptions) => Redis }][] = [
  ['ioredis', { verified: /^6\./, make: (options = {}) => new Ioredis(redisUrl(), options) }],
  ['iovalkey', { verified: /^0\.4\./, make: (options = {}) => new IoValkey(redisUrl(), options as object) as unknown as Redis }],
];

/** Recognises `lua` (by body or SHA-1) as a script of this package of `kind`, as the store recognises its own. */
function kindOf(lua: string, kind: ScriptKind): (bodyOrSha: string) => ScriptKind | undefined {
  const sha = shaOf(lua);
  return (bodyOrSha) => (bodyOrSha === lua || bodyOrSha === sha ? kind : undefined);
}

describe.each(LIBRARIES)('%s', (library, { verified, make }) => {
  let client: Redis;
  beforeAll(() => {
    client = make();
  });
  afterAll(() => client.quit());

  test(`the installed ${library} is a version whose command queue was verified`, () => {
    const { version } = JSON.parse(readFileSync(require.resolve(`${library}/package.json`), 'utf8')) as { version: string };
    expect(version).toMatch(verified);
  });

  test('commandQueue holds sent, unanswered commands as { command: { name, args, reject } }', async () => {
    await client.ping();
    const queue = commandQueueOf(client);
    expect(queue).toBeDefined();
    // BLPOP on an empty list waits at Redis: the command stays in the queue, unanswered.
    const pending = client.blpop(`queue-shape-${process.pid}`, 1);
    const item = queue!.peekAt(queue!.length - 1);
    expect(item?.command?.name).toBe('blpop');
    expect(Array.isArray(item?.command?.args)).toBe(true);
    expect(typeof item?.command?.reject).toBe('function');
    await pending;
  });

  test('abandoning rejects only our scripts and turns them into dry runs', async () => {
    const lua = "return redis.call('BLPOP', KEYS[1], ARGV[3])";
    const ours = kindOf(lua, 'single'); // taken for one of this package's single-key scripts
    const check = client.eval(lua, 1, `queue-ours-${process.pid}`, '', 1, '0');
    const theirs = client.blpop(`queue-theirs-${process.pid}`, 1);
    const queue = commandQueueOf(client)!;
    const queued = queue.peekAt(queue.length - 2)?.command;
    abandonUnansweredChecks(client, ours);
    await expect(check).rejects.toMatchObject({ code: 'SWL_STORE_UNAVAILABLE' });
    expect(queued?.args[5]).toBe('1');
    await expect(theirs).resolves.toBeNull();
  });

  test('abandoning a batch sets its dry-run override, the first argument after its keys', async () => {
    await client.ping();
    const lua = "return redis.call('BLPOP', KEYS[1], 1)";
    const ours = kindOf(lua, 'batch');
    const keys = [`queue-batch-a-${process.pid}`, `queue-batch-b-${process.pid}`];
    const batch = client.eval(lua, keys.length, ...keys, '0', 4, '', 1, '0', 0);
    const queue = commandQueueOf(client)!;
    const queued = queue.peekAt(queue.length - 1)?.command;
    abandonUnansweredChecks(client, ours);
    await expect(batch).rejects.toMatchObject({ code: 'SWL_STORE_UNAVAILABLE' });
    // eval, numkeys, the two keys, then the override
    expect(queued?.args.slice(0, 5)).toEqual([lua, '2', ...keys, '1']);
  });

  test('an unknown queue shape is left alone, with one SWL_IOREDIS_QUEUE_UNSUPPORTED warning per client state', () => {
    const warn = jest.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    try {
      const state = new Warnings();
      expect(commandQueueOf({ commandQueue: [] }, 'commandQueue', state)).toBeUndefined();
      expect(commandQueueOf({ commandQueue: {} }, 'commandQueue', state)).toBeUndefined();
      expect(commandQueueOf({}, 'commandQueue', state)).toBeUndefined();
      expect(warn).toHaveBeenCalledTimes(1);
      expect(warn.mock.calls[0][1]).toMatchObject({ code: 'SWL_IOREDIS_QUEUE_UNSUPPORTED' });
    } finally {
      warn.mockRestore();
    }
  });

  test('abandoning reaches the offline queue too: a check written onto an ended socket is failed and made a dry run', async () => {
    // Not connected yet: ioredis puts every command in its offline queue, as it does for one
    // written in the instant between the socket ending and its `close` event.
    const offline = make({ lazyConnect: true });
    try {
      const lua = "return redis.call('GET', KEYS[1])";
      const check = offline.eval(lua, 1, `offline-ours-${process.pid}`, '', 1, '0');
      const queue = commandQueueOf(offline, 'offlineQueue');
      expect(queue?.length).toBe(1);
      const queued = queue!.peekAt(0)?.command;
      abandonUnansweredChecks(offline, kindOf(lua, 'single'));
      await expect(check).rejects.toMatchObject({ code: 'SWL_STORE_UNAVAILABLE' });
      expect(queued?.args[5]).toBe('1');
    } finally {
      offline.disconnect();
    }
  });
});
