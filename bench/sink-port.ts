import type { HttpPort } from '../src/http/handler';

/**
 * An `HttpPort` that sends nothing, so that only the shared HTTP path is measured: headers go
 * into a plain object and every outcome, a denial included, ends in `proceed`.
 */
export function sinkPort<Req>(): HttpPort<Req, Record<string, string>> {
  return {
    setHeader(target, name, value) {
      target[name] = value;
    },
    attach() {},
    deny: (_request, _response, _denial, proceed) => proceed(),
    unavailable() {},
    whenDone() {},
    statusOf: () => 200,
    countsHolder: (request) => request as object,
  };
}
