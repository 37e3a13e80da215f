// Requests limited per source address (ADR 0036), in front of a listener's app: a source past its bucket gets 429
// RATE_LIMITED with Retry-After (whole seconds) before routing, body reading or any token review. The address is the
// TCP peer's: inside the cluster kube-proxy keeps it; behind an ingress or a load balancer that does not, every user
// shares one bucket (raise the limit there).
import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import { systemClock } from '../clock.ts';
import { TokenBuckets, type TokenBucketOptions } from '../core/token-bucket.ts';
import { peerOf } from './peer.ts';

export interface SourceLimit extends TokenBucketOptions {
  /** Requests that are never limited (the kubelet's probes, the API server's admission calls). */
  exempt?: (req: IncomingMessage) => boolean;
  /** Called on each refusal (a metric). */
  onLimited?: (source: string) => void;
  /** Monotonic ms; default the process's clock (src/clock.ts). */
  now?: () => number;
}

/** The IPv4-mapped form and the plain one are one source. */
export function sourceKey(address: string | undefined): string {
  return (address ?? 'unknown').replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/i, '');
}

export function limitBySource(handler: RequestListener, limit: SourceLimit): RequestListener {
  const buckets = new TokenBuckets(limit);
  const now = limit.now ?? (() => systemClock.now());
  return (req: IncomingMessage, res: ServerResponse) => {
    if (limit.exempt?.(req)) return handler(req, res);
    const source = sourceKey(peerOf(req).address);
    const verdict = buckets.take(source, now());
    if (verdict.allowed) return handler(req, res);
    limit.onLimited?.(source);
    const body = JSON.stringify({ error: { code: 'RATE_LIMITED', message: `too many requests from ${source}; retry later` } });
    // The body was not read: the connection goes, so that it is not taken for the next request.
    res.writeHead(429, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(body),
      'retry-after': String(Math.max(1, Math.ceil(verdict.retryAfterMs / 1000))),
      connection: 'close',
    });
    res.end(body);
  };
}

/** GET /healthz and /readyz: the kubelet's probes are never limited. */
export const isProbe = (req: IncomingMessage) => req.method === 'GET' && (req.url === '/healthz' || req.url === '/readyz');
