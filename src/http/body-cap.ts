// A body cap checked before anything else runs: a request whose Content-Length is over the cap (or is not a number)
// is refused from its headers alone, before authentication (no TokenReview is spent on it), before routing work and
// before any byte of it is read or parsed. A body without a Content-Length (chunked) is cut off at the cap by the
// route's own reader (body-parser's `limit`, the extender's readBody, readCappedBody below), which counts as it reads.
import type { RequestHandler } from 'express';
import type { IncomingMessage } from 'node:http';

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

/** A body read up to a cap: its bytes, a refusal to answer, or `gone` (the client went away: no one to answer). */
export type CappedBody = { ok: true; bytes: Buffer } | { ok: false; status: 413; message: string } | { ok: false; gone: true };

/**
 * Reads a request's body, at most `max` bytes. A body that grows past the cap (one sent without a Content-Length) is
 * refused as soon as it does: reading stops there, and the caller answers with the connection closed, so that the
 * rest of it is never read. (body-parser reads such a body to its end before it answers.)
 */
export function readCappedBody(req: IncomingMessage, max: number): Promise<CappedBody> {
  return new Promise((resolve) => {
    const parts: Buffer[] = [];
    let length = 0;
    const finish = (r: CappedBody) => {
      req.off('data', onData).off('end', onEnd).off('error', onGone).off('aborted', onGone);
      resolve(r);
    };
    const onData = (part: Buffer) => {
      length += part.length;
      if (length <= max) return void parts.push(part);
      req.pause();
      parts.length = 0;
      finish({ ok: false, status: 413, message: `the body is too large (at most ${max} bytes)` });
    };
    const onEnd = () => finish({ ok: true, bytes: parts.length === 1 ? parts[0]! : Buffer.concat(parts, length) });
    const onGone = () => finish({ ok: false, gone: true });
    req.on('data', onData).on('end', onEnd).on('error', onGone).on('aborted', onGone);
  });
}
