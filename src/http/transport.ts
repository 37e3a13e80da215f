// Bearer tokens only over TLS (ADR 0035): a request that carries an Authorization header on a plain HTTP connection
// is refused unless that connection arrived at a loopback address (the CLI through `kubectl port-forward`, which
// reaches the pod's own loopback; `better-compute serve` on a laptop). Checked on the connection's local address, not
// on what the listener was asked to bind: a plain listener on 0.0.0.0 still takes tokens from 127.0.0.1 and refuses
// them from the pod network.
import net from 'node:net';
import type { RequestHandler } from 'express';
import { peerOf } from './peer.ts';

/** Whether `address` (as a socket reports it, IPv4-mapped IPv6 included) is a loopback address. */
export function isLoopbackAddress(address: string | undefined): boolean {
  if (!address) return false;
  const a = address.toLowerCase().replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/, '');
  if (net.isIPv4(a)) return a.startsWith('127.');
  return a === '::1';
}

/** Whether a token may be taken on this connection: over TLS, or over plain HTTP that arrived at loopback. */
export function tokenTransportAllowed(socket: { encrypted?: boolean; localAddress?: string | undefined }): boolean {
  return socket.encrypted === true || isLoopbackAddress(socket.localAddress);
}

/**
 * Express middleware: a request with an Authorization header on a connection where tokens are not taken gets 403
 * TLS_REQUIRED before the token is looked at (no TokenReview is spent on it, no answer is given for it).
 */
export function requireTokenTransport(): RequestHandler {
  return (req, res, next) => {
    if (req.get('authorization') === undefined || tokenTransportAllowed(peerOf(req))) return next();
    res.set('Connection', 'close');
    res.status(403).json({
      error: {
        code: 'TLS_REQUIRED',
        message: 'bearer tokens are taken only over HTTPS (or plain HTTP on loopback); this one crossed the network in clear text: treat it as exposed',
      },
    });
  };
}
