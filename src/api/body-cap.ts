// A body cap checked before anything else runs: a request whose Content-Length is over the cap (or is not a number)
// is refused from its headers alone, before authentication (no TokenReview is spent on it), before routing work and
// before any byte of it is read or parsed. A body without a Content-Length (chunked) is cut off at the cap by the
// route's own reader (body-parser's `limit`, the extender's readBody), which counts as it reads.
import type { RequestHandler } from 'express';

/** True when the request declares a body larger than `max` bytes (or a Content-Length that is not a number). */
export function declaresBodyOver(headers: { 'content-length'?: string | undefined }, max: number): boolean {
  const declared = headers['content-length'];
  if (declared === undefined) return false;
  return !(/^\d+$/.test(declared) && Number(declared) <= max);
}

/**
 * Express middleware: a declared body over `max` gets `status` with `{"error":{"code","message"}}` and the connection
 * closed (the body is never read, so it must not be taken for the next request).
 */
export function capDeclaredBody(max: number, o: { status?: number; code?: string } = {}): RequestHandler {
  const status = o.status ?? 413;
  const code = o.code ?? 'PAYLOAD_TOO_LARGE';
  return (req, res, next) => {
    if (!declaresBodyOver(req.headers, max)) return next();
    res.set('Connection', 'close');
    res.status(status).json({ error: { code, message: `the body is too large (at most ${max} bytes)` } });
  };
}
