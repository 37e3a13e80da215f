// One JSON POST from the CLI to the capacity API, over HTTPS (trusting `ca` when given, else the system's CAs) or
// plain HTTP. A bearer token is never sent over plain HTTP to anything but loopback (ADR 0035): the API would refuse
// it, and by then it would have crossed the network in clear text.
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';

export interface ClientTls {
  /** The CA bundle (PEM) that signs the API's certificate: the controller's (ConfigMap better-compute-ca) or yours. */
  ca?: string;
  /** The name the certificate is checked against (and sent as SNI), when the URL's host is not one of its names (an IP). */
  servername?: string;
}

/** Whether a URL's host is this machine's loopback (`localhost`, 127/8, ::1). */
export function isLoopbackHost(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost') return true;
  if (net.isIPv4(h)) return h.startsWith('127.');
  return h === '::1';
}

/** Refuses (returns why) to send a token to `url` over plain HTTP when the host is not loopback. */
export function tokenTransportProblem(url: URL, token: string | undefined): string | undefined {
  if (token === undefined || url.protocol === 'https:' || isLoopbackHost(url.hostname)) return undefined;
  return `refusing to send the token in clear text to ${url.host}: use https:// (--ca-file for the controller's CA) or kubectl port-forward to 127.0.0.1`;
}

export function postJson(url: URL, headers: Record<string, string>, body: string, tls: ClientTls = {}): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const options = { method: 'POST', headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) } };
    const onResponse = (res: http.IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    };
    const req = url.protocol === 'https:' ? https.request(url, { ...options, ...(tls.ca ? { ca: tls.ca } : {}), ...(tls.servername ? { servername: tls.servername } : {}) }, onResponse) : http.request(url, options, onResponse);
    req.setTimeout(60_000, () => req.destroy(new Error('no answer within 60 s')));
    req.on('error', reject);
    req.end(body);
  });
}
