// Who is at the other end of a request: the connection's peer address, whether it came over TLS, whether its client
// certificate was verified, and the address it arrived at. Read from the request's socket, except for the webhook
// listener, whose TLS is terminated in a thread of its own (tls-front.ts, ADR 0048): there the front tells the event
// loop about the client's connection, and the loop's request carries it.
import type { IncomingMessage } from 'node:http';
import type { TLSSocket } from 'node:tls';

export interface Peer {
  /** The TCP peer's address (as the socket reports it). */
  address: string | undefined;
  /** The address the connection arrived at. */
  localAddress: string | undefined;
  /** Over TLS. */
  encrypted: boolean;
  /** A client certificate that the listener's client CA verified. */
  authorized: boolean;
}

const PEER = Symbol('better-compute.peer');

type WithPeer = IncomingMessage & { [PEER]?: Peer };

/** The request's peer: what the TLS front said about the client's connection, else the request's own socket. */
export function peerOf(req: IncomingMessage): Peer {
  const told = (req as WithPeer)[PEER];
  if (told) return told;
  const s = req.socket as Partial<TLSSocket> | undefined;
  return { address: s?.remoteAddress, localAddress: s?.localAddress, encrypted: s?.encrypted === true, authorized: s?.authorized === true };
}

/** Marks the request as coming from `peer` (the TLS front's client), for peerOf. */
export function setPeer(req: IncomingMessage, peer: Peer): void {
  (req as WithPeer)[PEER] = peer;
}
