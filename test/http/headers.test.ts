/**
 * Header styles, byte for byte: unit tests of the header writer with hand-made decisions
 * (the exact strings of the spec), then the same styles over a real Express app backed
 * by Redis, where the numbers come from real decisions.
 */
import express from 'express';
import type { Redis } from 'ioredis';
import request from 'supertest';
import type { Decision, TierDecision } from '../../src/core/types';
import { RedisStore, rateLimit } from '../../src/express';
import { createHeaderWriter, type HeadersOption, policyNames, secondsUntil } from '../../src/http/headers';
import type { Tier } from '../../src/tiers';
import { manualClock, redisClient, uniquePrefix } from '../helpers/redis';

const NOW = 1_700_000_000_000;

function tierDecision(limit: number, window: number, remaining: number, resetIn: number): TierDecision {
  return { limit, window, estimated: limit - remaining, remaining, retryAfterMs: remaining > 0 ? 0 : resetIn, resetAt: NOW + resetIn };
}

/** A decision whose binding tier is `binding`, as the limiter would report it. */
function decisionOf(tiers: TierDecision[], binding = 0, allowed = true): Decision {
  const top = tiers[binding];
  return {
    allowed,
    identifier: 'ip:203.0.113.7',
    limit: top.limit,
    window: top.window,
    remaining: top.remaining,
    estimated: top.estimated,
    ratio: top.estimated / top.limit,
    resetAt: top.resetAt,
    retryAfterMs: allowed ? 0 : top.resetAt - NOW,
    tier: binding,
    tiers,
    now: NOW,
    cost: 1,
    counted: allowed,
    blocked: false,
    shadow: false,
    cached: false,
  };
}

/**
 * Parses a Structured Field List (RFC 9651, section 4.2) of String items whose parameters are
 * non-negative Integers: the part of the syntax revision 10 of the draft uses. Throws on anything else.
 */
function structuredList(value: string): { name: string; params: Record<string, number> }[] {
  const member = /^"((?:[^"\\]|\\["\\])*)"((?:;[a-z*][a-z0-9_.*-]*=\d{1,15})*)(?:, |$)/;
  const items: { name: string; params: Record<string, number> }[] = [];
  for (let rest = value; rest.length > 0; ) {
    const match = member.exec(rest);
    if (match === null) throw new Error(`not a List of String items with Integer parameters: ${value}`);
    const params: Record<string, number> = {};
    for (const param of match[2].split(';').slice(1)) {
      const [key, number] = param.split('=');
      if (key in params) throw new Error(`parameter ${key} twice in ${value}`);
      params[key] = Number(number);
    }
    items.push({ name: match[1], params });
    rest = rest.slice(match[0].length);
  }
  if (items.length === 0) throw new Error('an empty List');
  return items;
}

/** Runs a writer and returns the headers it set, in order. */
function written(
  option: HeadersOption | undefined,
  tiers: Tier[],
  decision: Decision,
  resetFormat?: 'epoch' | 'delta',
): [string, string][] {
  const writer = createHeaderWriter(option, resetFormat, tiers);
  const headers: [string, string][] = [];
  writer?.(decision, headers, (target, name, value) => target.push([name, value]));
  return headers;
}

const ONE_TIER: Tier[] = [{ limit: 100, window: 60_000 }];
const HALF_USED = decisionOf([tierDecision(100, 60_000, 50, 30_000)]);

describe('header writer (unit)', () => {
  test('legacy (the default): X-RateLimit-* with Reset in epoch seconds of resetAt', () => {
    expect(written(undefined, ONE_TIER, HALF_USED)).toEqual([
      ['X-RateLimit-Limit', '100'],
      ['X-RateLimit-Remaining', '50'],
      ['X-RateLimit-Reset', String((NOW + 30_000) / 1000)],
    ]);
    expect(written('legacy', ONE_TIER, HALF_USED)).toEqual(written(undefined, ONE_TIER, HALF_USED));
  });

  test('legacy epoch Reset rounds a fractional second up', () => {
    const decision = decisionOf([tierDecision(100, 60_000, 0, 1_001)]);
    expect(written('legacy', ONE_TIER, decision)).toContainEqual(['X-RateLimit-Reset', String(NOW / 1000 + 2)]);
  });

  test("legacy with resetFormat 'delta': Reset is whole seconds from now, rounded up", () => {
    expect(written('legacy', ONE_TIER, HALF_USED, 'delta')).toContainEqual(['X-RateLimit-Reset', '30']);
    const decision = decisionOf([tierDecision(100, 60_000, 0, 29_001)]);
    expect(written('legacy', ONE_TIER, decision, 'delta')).toContainEqual(['X-RateLimit-Reset', '30']);
  });

  test('draft-6: RateLimit-Limit/Remaining/Reset and RateLimit-Policy: 100;w=60', () => {
    expect(written('draft-6', ONE_TIER, HALF_USED)).toEqual([
      ['RateLimit-Policy', '100;w=60'],
      ['RateLimit-Limit', '100'],
      ['RateLimit-Remaining', '50'],
      ['RateLimit-Reset', '30'],
    ]);
  });

  test('draft-7: RateLimit: limit=100, remaining=50, reset=30 and the policy', () => {
    expect(written('draft-7', ONE_TIER, HALF_USED)).toEqual([
      ['RateLimit-Policy', '100;w=60'],
      ['RateLimit', 'limit=100, remaining=50, reset=30'],
    ]);
  });

  test('ietf, one tier: "default" policy and RateLimit item', () => {
    expect(written('ietf', ONE_TIER, HALF_USED)).toEqual([
      ['RateLimit-Policy', '"default";q=100;w=60'],
      ['RateLimit', '"default";r=50;t=30'],
    ]);
  });

  test('ietf, several tiers: one item per tier, named by window, each with its own numbers', () => {
    const tiers: Tier[] = [
      { limit: 10, window: 1_000 },
      { limit: 1000, window: 3_600_000 },
    ];
    const decision = decisionOf([tierDecision(10, 1_000, 0, 400), tierDecision(1000, 3_600_000, 990, 0)], 0, false);
    expect(written('ietf', tiers, decision)).toEqual([
      ['RateLimit-Policy', '"1s";q=10;w=1, "1h";q=1000;w=3600'],
      ['RateLimit', '"1s";r=0;t=1, "1h";r=990;t=0'],
    ]);
  });

  test('ietf writes what revision 10 defines: Structured Field lists of String items, q and w (whole seconds, at least 1) on each policy, r and t on each limit', () => {
    const tiers: Tier[] = [
      { limit: 5, window: 500 },
      { limit: 10, window: 1_500 },
      { limit: 100, window: 60_000 },
      { limit: 200, window: 60_000 },
      { limit: 0, window: 86_400_000 },
    ];
    const decision = decisionOf(
      [
        tierDecision(5, 500, 0, 499),
        tierDecision(10, 1_500, 3, 1_001),
        tierDecision(100, 60_000, 100, 0),
        tierDecision(200, 60_000, 17, 59_999),
        tierDecision(0, 86_400_000, 0, 0),
      ],
      0,
      false,
    );
    const headers = Object.fromEntries(written('ietf', tiers, decision));
    expect(Object.keys(headers)).toEqual(['RateLimit-Policy', 'RateLimit']);
    const policies = structuredList(headers['RateLimit-Policy']);
    const limits = structuredList(headers.RateLimit);
    const names = policies.map((policy) => policy.name);
    expect(new Set(names).size).toBe(tiers.length);
    expect(limits.map((limit) => limit.name)).toEqual(names);
    policies.forEach(({ params }, i) => {
      expect(Object.keys(params)).toEqual(['q', 'w']);
      expect(params.q).toBe(tiers[i].limit);
      expect(params.w).toBe(Math.max(1, Math.round(tiers[i].window / 1000)));
    });
    limits.forEach(({ params }, i) => {
      expect(Object.keys(params)).toEqual(['r', 't']);
      expect(params.r).toBe(decision.tiers[i].remaining);
      expect(params.t).toBe(secondsUntil(decision.tiers[i].resetAt, NOW));
    });
  });

  test('draft-6/draft-7 policies list every tier', () => {
    const tiers: Tier[] = [
      { limit: 10, window: 1_000 },
      { limit: 1000, window: 3_600_000 },
    ];
    const decision = decisionOf([tierDecision(10, 1_000, 5, 0), tierDecision(1000, 3_600_000, 995, 0)]);
    expect(written('draft-7', tiers, decision)).toContainEqual(['RateLimit-Policy', '10;w=1, 1000;w=3600']);
  });

  test('policy names: "default" for one tier, window labels, de-duplicated when two tiers share a window', () => {
    expect(policyNames([{ limit: 1, window: 60_000 }])).toEqual(['default']);
    expect(
      policyNames([
        { limit: 1, window: 1_000 },
        { limit: 5, window: 86_400_000 },
        { limit: 9, window: 1_500 },
      ]),
    ).toEqual(['1s', '1d', '1500ms']);
    expect(
      policyNames([
        { limit: 1, window: 60_000 },
        { limit: 2, window: 60_000 },
      ]),
    ).toEqual(['1m-0', '1m-1']);
  });

  test('an array writes every listed style; a custom function gets the decision and a setter', () => {
    const custom = jest.fn((decision: Decision, set: (name: string, value: string) => void) =>
      set('X-Custom', `${decision.remaining}/${decision.limit}`),
    );
    expect(written(['legacy', 'draft-7', custom], ONE_TIER, HALF_USED)).toEqual([
      ['X-RateLimit-Limit', '100'],
      ['X-RateLimit-Remaining', '50'],
      ['X-RateLimit-Reset', String((NOW + 30_000) / 1000)],
      ['RateLimit-Policy', '100;w=60'],
      ['RateLimit', 'limit=100, remaining=50, reset=30'],
      ['X-Custom', '50/100'],
    ]);
    expect(custom).toHaveBeenCalledWith(HALF_USED, expect.any(Function));
  });

  test('false and an empty array write nothing', () => {
    expect(createHeaderWriter(false, undefined, ONE_TIER)).toBeUndefined();
    expect(createHeaderWriter([], undefined, ONE_TIER)).toBeUndefined();
  });

  test('bad styles and reset formats throw a TypeError naming the option', () => {
    expect(() => createHeaderWriter('draft-8' as never, undefined, ONE_TIER)).toThrow(/^headers: /);
    expect(() => createHeaderWriter(['legacy', 'nope'] as never, undefined, ONE_TIER)).toThrow(/^headers: /);
    expect(() => createHeaderWriter(true as never, undefined, ONE_TIER)).toThrow(/^headers: /);
    expect(() => createHeaderWriter('legacy', 'iso' as never, ONE_TIER)).toThrow(/^resetFormat: /);
  });

  test('secondsUntil rounds up and never goes negative', () => {
    expect(secondsUntil(NOW + 1, NOW)).toBe(1);
    expect(secondsUntil(NOW + 1000, NOW)).toBe(1);
    expect(secondsUntil(NOW + 1001, NOW)).toBe(2);
    expect(secondsUntil(NOW, NOW)).toBe(0);
    expect(secondsUntil(NOW - 5000, NOW)).toBe(0);
  });
});

describe('header styles over Express and Redis', () => {
  const WINDOW = 60_000;
  const START = NOW - (NOW % WINDOW); // a window boundary
  let client: Redis;
  beforeAll(() => {
    client = redisClient();
  });
  afterAll(() => client.quit());

  /**
   * 99 of 100 used at the window start, then one request 30 s in: it fits exactly
   * (remaining 0), and the next would fit 600 ms after the next window starts, when
   * the previous window's 100 weigh 99.
   */
  async function lastOfWindow(headers: HeadersOption, limits?: { limit: number; window: number }[]) {
    const clock = manualClock(START);
    const decisions: Decision[] = [];
    const options = limits ? { limits } : { limit: 100, window: WINDOW };
    const middleware = rateLimit({
      store: new RedisStore({ client }),
      ...options,
      prefix: uniquePrefix('hdr'),
      clock: clock.now,
      identify: () => 'client',
      headers,
      onDecision: (decision) => decisions.push(decision),
    });
    await middleware.limiter.check('client', { cost: 99 });
    clock.set(START + 30_000);
    const app = express();
    app.use(middleware);
    app.get('/', (_req, res) => res.send('ok'));
    const response = await request(app).get('/').expect(200);
    return { response, decision: decisions[0] };
  }

  test('draft-7: exact header from a real decision', async () => {
    const { response, decision } = await lastOfWindow('draft-7');
    expect(decision.resetAt).toBe(START + WINDOW + 600);
    expect(response.headers.ratelimit).toBe('limit=100, remaining=0, reset=31');
    expect(response.headers['ratelimit-policy']).toBe('100;w=60');
    expect(response.headers['x-ratelimit-limit']).toBeUndefined();
  });

  test('draft-6: exact headers from a real decision', async () => {
    const { response } = await lastOfWindow('draft-6');
    expect(response.headers['ratelimit-policy']).toBe('100;w=60');
    expect(response.headers['ratelimit-limit']).toBe('100');
    expect(response.headers['ratelimit-remaining']).toBe('0');
    expect(response.headers['ratelimit-reset']).toBe('31');
    expect(response.headers.ratelimit).toBeUndefined();
  });

  test('ietf and legacy together', async () => {
    const { response } = await lastOfWindow(['ietf', 'legacy']);
    expect(response.headers['ratelimit-policy']).toBe('"default";q=100;w=60');
    expect(response.headers.ratelimit).toBe('"default";r=0;t=31');
    expect(response.headers['x-ratelimit-limit']).toBe('100');
    expect(response.headers['x-ratelimit-remaining']).toBe('0');
    expect(response.headers['x-ratelimit-reset']).toBe(String(START / 1000 + 61));
  });

  test('ietf with several limits: one item per tier', async () => {
    const { response } = await lastOfWindow('ietf', [
      { limit: 100, window: WINDOW },
      { limit: 1000, window: 3_600_000 },
    ]);
    expect(response.headers['ratelimit-policy']).toBe('"1m";q=100;w=60, "1h";q=1000;w=3600');
    // The hour tier holds 100 in its current window: a unit comes back 36 s into the next hour,
    // when those 100 weigh 99.
    const now = START + 30_000;
    const hourReset = (Math.floor(now / 3_600_000) + 1) * 3_600_000 + 36_000;
    expect(response.headers.ratelimit).toBe(`"1m";r=0;t=31, "1h";r=900;t=${Math.ceil((hourReset - now) / 1000)}`);
  });
});
