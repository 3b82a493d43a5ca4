/**
 * An LLM proxy with Express: tokens per API key per minute. Each request reserves its
 * `max_tokens` on arrival and is settled to the upstream's `usage.total_tokens` once its
 * response is over (`costAfter`): unused tokens are given back, extra ones charged.
 * `createApp` is what test/examples.test.ts runs, with its own upstream.
 * Run: REDIS_URL=redis://127.0.0.1:6379 npx ts-node --transpile-only examples/llm-proxy.ts
 */
import express from 'express';
import { Redis } from 'ioredis';
import { byApiKey, type RateLimitMiddleware, RedisStore, rateLimit, type Store } from '../src/express';

/** What the proxy forwards: an OpenAI-style completion request. */
export interface CompletionRequest {
  readonly prompt: string;
  readonly max_tokens: number;
}

/** What the upstream answers, with the tokens it used (prompt and answer together). */
export interface Completion {
  readonly text: string;
  readonly usage: { readonly total_tokens: number };
}

export type Upstream = (request: CompletionRequest) => Promise<Completion>;

/** A stand-in for the model API: one token per word of the prompt, and an answer of at most max_tokens words. */
export const fakeUpstream: Upstream = async ({ prompt, max_tokens }) => {
  const promptTokens = prompt.split(/\s+/).filter(Boolean).length;
  const words = Array.from({ length: Math.min(max_tokens, 20) }, (_, i) => `word${i}`);
  return { text: words.join(' '), usage: { total_tokens: promptTokens + words.length } };
};

export interface LlmProxyOptions {
  readonly prefix?: string;
  readonly tokensPerMinute?: number;
  readonly upstream?: Upstream;
  /** A clock for tests (see the limiter's `clock`). */
  readonly clock?: () => number;
}

export const DEFAULT_MAX_TOKENS = 256;

/** The request body, read as a completion request; undefined when it is not one. */
function completionRequest(body: unknown): CompletionRequest | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const { prompt, max_tokens = DEFAULT_MAX_TOKENS } = body as { prompt?: unknown; max_tokens?: unknown };
  if (typeof prompt !== 'string' || typeof max_tokens !== 'number' || !Number.isSafeInteger(max_tokens) || max_tokens < 1) return undefined;
  return { prompt, max_tokens };
}

export function createApp(store: Store, options: LlmProxyOptions = {}): { app: express.Express; tokens: RateLimitMiddleware } {
  const { prefix = 'llm', tokensPerMinute = 10_000, upstream = fakeUpstream, clock } = options;
  const app = express();
  app.use(express.json());

  // A malformed request, or one asking for more than a whole minute's budget, is the client's
  // mistake: a 400, before the limiter (which would refuse the latter with no Retry-After).
  app.use('/v1/completions', (request, response, next) => {
    const completion = completionRequest(request.body);
    if (completion === undefined) response.status(400).json({ error: 'prompt (a string) and max_tokens (a positive integer) expected' });
    else if (completion.max_tokens > tokensPerMinute) response.status(400).json({ error: `max_tokens is at most ${tokensPerMinute}` });
    else next();
  });

  const tokens = rateLimit({
    store,
    identify: byApiKey(),
    prefix: `${prefix}-tokens`,
    limit: tokensPerMinute,
    window: '1m',
    clock,
    // Reserved on arrival: the most the answer may use.
    cost: (request) => completionRequest(request.body)?.max_tokens ?? DEFAULT_MAX_TOKENS,
    // Settled once the response is over, even when the client went away first: the upstream
    // used its tokens all the same. A failed upstream call used nothing.
    costAfter: (_request, response) => {
      const completion = response.locals.completion as Promise<Completion> | undefined;
      return completion === undefined
        ? 0
        : completion.then(
            (done) => done.usage.total_tokens,
            () => 0,
          );
    },
  });

  app.post('/v1/completions', tokens, async (request, response) => {
    const completion = upstream(completionRequest(request.body) as CompletionRequest);
    response.locals.completion = completion;
    try {
      response.json(await completion);
    } catch {
      response.status(502).json({ error: 'the model is unavailable' });
    }
  });
  return { app, tokens };
}

if (require.main === module) {
  const client = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { enableOfflineQueue: false, maxRetriesPerRequest: 1 });
  createApp(new RedisStore({ client })).app.listen(3000, () => console.log('POST http://localhost:3000/v1/completions with x-api-key'));
}
