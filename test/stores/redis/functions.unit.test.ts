/**
 * ScriptFunctions and evalScript, over a scripted sender: when a function library is loaded, when
 * a check runs as `FCALL` and when as `EVALSHA`, what a missing function and a refused or failed
 * load lead to. The same paths against real servers are in round-trips.test.ts, noscript.test.ts
 * and functions.test.ts.
 */
import { ALGORITHMS } from '../../../src/algorithms';
import { RELEASE } from '../../../src/algorithms/lease';
import type { FunctionLibrary } from '../../../src/algorithms/types';
import { evalScript, type ScriptCommand, ScriptFunctions, shaOf } from '../../../src/stores/redis/redis-client';

const { check } = ALGORITHMS['sliding-window'];
const { library } = ALGORITHMS['sliding-window'];

/** A library loader whose loads the test settles, and a clock the test sets. */
function loader() {
  const loads: { code: string; settle(error?: Error): Promise<void> }[] = [];
  let time = 1_000_000;
  const functions = new ScriptFunctions(
    (code) =>
      new Promise<void>((resolve, reject) => {
        loads.push({
          code,
          settle: async (error) => {
            if (error === undefined) resolve();
            else reject(error);
            await new Promise((next) => setImmediate(next));
          },
        });
      }),
    () => time,
  );
  return {
    functions,
    loads,
    advance(ms: number) {
      time += ms;
    },
  };
}

/** A sender that answers every command with its name, or fails the commands named in `failing` with their error. */
function sender(failing: Partial<Record<ScriptCommand, Error>> = {}) {
  const sent: [ScriptCommand, string][] = [];
  const send = (command: ScriptCommand, script: string) => {
    sent.push([command, script]);
    const error = failing[command];
    return error === undefined ? Promise.resolve(command) : Promise.reject(error);
  };
  return { sent, send };
}

describe('ScriptFunctions', () => {
  test('a library is loaded once, when first asked for; until it is, its scripts run as scripts', async () => {
    const { functions, loads } = loader();
    expect(functions.loaded(library)).toBe(false);
    expect(functions.loaded(library)).toBe(false);
    expect(loads.map((load) => load.code)).toEqual([library.code]);
    await loads[0].settle();
    expect(functions.loaded(library)).toBe(true);
    expect(loads).toHaveLength(1);
  });

  test('each library is loaded on its own', async () => {
    const { functions, loads } = loader();
    const other: FunctionLibrary = ALGORITHMS['fixed-window'].library;
    functions.loaded(library);
    functions.loaded(other);
    expect(loads.map((load) => load.code)).toEqual([library.code, other.code]);
    await loads[1].settle();
    expect(functions.loaded(other)).toBe(true);
    expect(functions.loaded(library)).toBe(false);
  });

  test('a refused load (Redis 6, an ACL, a renamed command) is never tried again', async () => {
    for (const refusal of [
      "ERR unknown command 'FUNCTION', with args beginning with: 'LOAD' 'REPLACE'",
      "NOPERM this user has no permissions to run the 'function|load' command",
      'An error was signalled by the server: - ResponseError: unknown command',
      'An error was signalled by the server: - PermissionDenied: no permissions',
    ]) {
      const { functions, loads, advance } = loader();
      functions.loaded(library);
      await loads[0].settle(new Error(refusal));
      advance(60_000);
      expect(functions.loaded(library)).toBe(false);
      expect(functions.loaded(ALGORITHMS['fixed-window'].library)).toBe(false);
      expect(loads).toHaveLength(1);
    }
  });

  test('a load that failed otherwise (a connection lost) is tried again a second later', async () => {
    const { functions, loads, advance } = loader();
    functions.loaded(library);
    await loads[0].settle(new Error('Connection is closed.'));
    advance(999);
    expect(functions.loaded(library)).toBe(false);
    expect(loads).toHaveLength(1);
    advance(1);
    expect(functions.loaded(library)).toBe(false);
    expect(loads).toHaveLength(2);
    await loads[1].settle();
    expect(functions.loaded(library)).toBe(true);
  });

  test('a load that throws instead of rejecting counts as failed', () => {
    const functions = new ScriptFunctions(() => {
      throw new TypeError('client.call is not a function');
    });
    expect(functions.loaded(library)).toBe(false);
  });

  test('a lost library is loaded again at once, or a second later when it was lost less than a second before', async () => {
    const { functions, loads, advance } = loader();
    functions.loaded(library);
    await loads[0].settle();
    functions.lost(library);
    expect(loads).toHaveLength(2);
    expect(functions.loaded(library)).toBe(false);
    await loads[1].settle();
    expect(functions.loaded(library)).toBe(true);
    // Lost again 999 ms later (a node the loads do not reach): no load for a second.
    advance(999);
    functions.lost(library);
    functions.lost(library);
    expect(loads).toHaveLength(2);
    expect(functions.loaded(library)).toBe(false);
    advance(1_000);
    expect(functions.loaded(library)).toBe(false);
    expect(loads).toHaveLength(3);
    await loads[2].settle();
    // Lost once more, more than a second after the last loss: at once.
    advance(1_000);
    functions.lost(library);
    expect(loads).toHaveLength(4);
  });
});

describe('evalScript', () => {
  test('without functions, or before the library is loaded: EVALSHA', async () => {
    const { functions } = loader();
    for (const withFunctions of [undefined, functions]) {
      const { sent, send } = sender();
      await expect(evalScript(check.lua, send, undefined, withFunctions)).resolves.toBe('EVALSHA');
      expect(sent).toEqual([['EVALSHA', shaOf(check.lua)]]);
    }
  });

  test('once the library is loaded: FCALL of the function of each script form', async () => {
    const { functions, loads } = loader();
    functions.loaded(library);
    await loads[0].settle();
    const { sent, send } = sender();
    for (const lua of [check.lua, check.batchLua, check.nodeBatchLua]) await evalScript(lua, send, undefined, functions);
    expect(sent).toEqual([
      ['FCALL', library.functions.check],
      ['FCALL', library.functions.batch],
      ['FCALL', library.functions.nodeBatch],
    ]);
  });

  test("the lease check and the settlement: their library's functions; a lease's release: a script", async () => {
    const { functions, loads } = loader();
    functions.loaded(library);
    await loads[0].settle();
    const { sent, send } = sender();
    const { leaseCheck, settle } = ALGORITHMS['sliding-window'];
    for (const lua of [leaseCheck.lua, settle.lua, RELEASE.lua]) await evalScript(lua, send, undefined, functions);
    expect(sent).toEqual([
      ['FCALL', library.functions.leaseCheck],
      ['FCALL', library.functions.settle],
      ['EVALSHA', shaOf(RELEASE.lua)],
    ]);
  });

  test('a missing function: the script runs instead, and the library is loaded again', async () => {
    const { functions, loads } = loader();
    functions.loaded(library);
    await loads[0].settle();
    const { sent, send } = sender({ FCALL: new Error('ERR Function not found') });
    await expect(evalScript(check.lua, send, undefined, functions)).resolves.toBe('EVALSHA');
    expect(sent.map(([command]) => command)).toEqual(['FCALL', 'EVALSHA']);
    expect(loads).toHaveLength(2);
  });

  test('any other error of FCALL is the check’s error: nothing is sent again', async () => {
    const { functions, loads } = loader();
    functions.loaded(library);
    await loads[0].settle();
    const { sent, send } = sender({ FCALL: new Error('OOM command not allowed when used memory > maxmemory') });
    await expect(evalScript(check.lua, send, (error) => error as Error, functions)).rejects.toThrow(/OOM/);
    expect(sent.map(([command]) => command)).toEqual(['FCALL']);
    expect(functions.loaded(library)).toBe(true);
  });
});
