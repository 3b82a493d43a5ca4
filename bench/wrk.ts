/**
 * Runs wrk (a separate C process, so the load generator never shares the server's event
 * loop) with a small Lua script, and reads back its summary as JSON.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** How requests identify themselves. */
export type Traffic =
  /** Every request carries `x-id: <id>` (static request: wrk's fastest path). */
  | { kind: 'one'; id: string }
  /** Each request carries an `x-id` drawn uniformly at random from `count` ids `user:0`..`user:<count-1>`. */
  | { kind: 'many'; count: number };

export interface WrkOptions {
  url: string;
  traffic: Traffic;
  threads: number;
  connections: number;
  durationSeconds: number;
  /** Count every response's status in Lua (wrk then parses each response: a little slower). */
  countStatuses: boolean;
  /** Prefix the command with `taskset -c <cpus>`. */
  cpus?: string;
}

export interface WrkResult {
  requests: number;
  durationUs: number;
  requestsPerSecond: number;
  p50Us: number;
  p99Us: number;
  /** Responses with a status >= 400 (counted by wrk itself). */
  errorStatus: number;
  socketErrors: number;
  /** Per status, when `countStatuses`. */
  statuses: Record<string, number> | undefined;
  /** CPU seconds wrk itself used (user + system). */
  cpuSeconds: number;
}

const SCRIPT = `
local traffic = os.getenv("WRK_TRAFFIC")
local count = tonumber(os.getenv("WRK_IDS") or "1")
local countStatuses = os.getenv("WRK_STATUSES") == "1"
wrk.method = "GET"
wrk.path = "/"
local threads = {}
local nextThread = 0

function setup(thread)
  thread:set("threadIndex", nextThread)
  nextThread = nextThread + 1
  table.insert(threads, thread)
end

if traffic == "one" then
  wrk.headers["x-id"] = os.getenv("WRK_ID")
else
  local requests = {}
  function init(args)
    -- Pre-built requests: the per-request cost in wrk is one random draw.
    math.randomseed(os.time() * 1000 + (threadIndex or 0))
    for i = 1, count do
      requests[i] = wrk.format(nil, nil, { ["x-id"] = "user:" .. (i - 1) })
    end
  end
  function request()
    return requests[math.random(count)]
  end
end

if countStatuses then
  statuses = {}
  function response(status, headers, body)
    local key = tostring(status)
    statuses[key] = (statuses[key] or 0) + 1
  end
end

function done(summary, latency, requests)
  local merged = {}
  if countStatuses then
    for _, thread in ipairs(threads) do
      local counted = thread:get("statuses")
      if counted then
        for status, n in pairs(counted) do merged[status] = (merged[status] or 0) + n end
      end
    end
  end
  local parts = {}
  for status, n in pairs(merged) do table.insert(parts, string.format('"%s":%d', status, n)) end
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"requests":%d,"durationUs":%d,"p50Us":%d,"p99Us":%d,"errorStatus":%d,"socketErrors":%d,"statuses":{%s}}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), e.status,
    e.connect + e.read + e.write + e.timeout, table.concat(parts, ",")))
end
`;

let scriptDir: string | undefined;

function scriptPath(): string {
  if (scriptDir === undefined) {
    scriptDir = mkdtempSync(join(tmpdir(), 'swl-bench-'));
    writeFileSync(join(scriptDir, 'bench.lua'), SCRIPT);
    process.on('exit', () => rmSync(scriptDir!, { recursive: true, force: true }));
  }
  return join(scriptDir, 'bench.lua');
}

/** The wrk command line, for the report. */
export function describeWrk(options: Omit<WrkOptions, 'url' | 'traffic' | 'countStatuses'>): string {
  return `${options.cpus === undefined ? '' : `taskset -c ${options.cpus} `}wrk -t${options.threads} -c${options.connections} -d${options.durationSeconds}s --timeout 5s -s bench.lua`;
}

export function runWrk(options: WrkOptions): Promise<WrkResult> {
  const wrkArgs = [
    `-t${options.threads}`,
    `-c${options.connections}`,
    `-d${options.durationSeconds}s`,
    '--timeout',
    '5s',
    '-s',
    scriptPath(),
    options.url,
  ];
  const commandLine = options.cpus === undefined ? ['wrk', ...wrkArgs] : ['taskset', '-c', options.cpus, 'wrk', ...wrkArgs];
  // Through bash, whose `times` then tells the CPU time wrk used.
  const command = 'bash';
  const args = ['-c', '"$@"; status=$?; times; exit $status', 'bash', ...commandLine];
  const env = {
    ...process.env,
    WRK_TRAFFIC: options.traffic.kind,
    WRK_ID: options.traffic.kind === 'one' ? options.traffic.id : '',
    WRK_IDS: options.traffic.kind === 'many' ? String(options.traffic.count) : '1',
    WRK_STATUSES: options.countStatuses ? '1' : '0',
  };
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      const line = stdout.split('\n').find((l) => l.startsWith('WRK_JSON '));
      if (code !== 0 || line === undefined) {
        reject(new Error(`wrk failed (exit ${code}): ${stderr || stdout}`));
        return;
      }
      const parsed = JSON.parse(line.slice('WRK_JSON '.length)) as Omit<WrkResult, 'requestsPerSecond' | 'cpuSeconds'>;
      // `times`: the shell's user and system time, then its children's (wrk's).
      const times =
        stdout
          .trim()
          .split('\n')
          .slice(-1)[0]
          .match(/(\d+)m([\d.]+)s/g) ?? [];
      const cpuSeconds = times.reduce((sum, t) => {
        const [, minutes, seconds] = /(\d+)m([\d.]+)s/.exec(t)!;
        return sum + Number(minutes) * 60 + Number(seconds);
      }, 0);
      resolve({
        ...parsed,
        cpuSeconds,
        statuses: options.countStatuses ? parsed.statuses : undefined,
        requestsPerSecond: parsed.requests / (parsed.durationUs / 1e6),
      });
    });
  });
}
