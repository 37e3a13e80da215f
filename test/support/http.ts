// A small HTTP client for API tests: keep-alive on loopback, raw bodies allowed (malformed JSON, odd content types);
// and one-off requests over HTTP or HTTPS (a CA to trust, the name to check it against) for the controller's listeners.
import type { X509Certificate } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type { TLSSocket } from 'node:tls';

export interface HttpResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  /** The parsed body, or undefined when it is not JSON. */
  json: unknown;
  /** HTTPS: the certificate the server presented. */
  peer?: X509Certificate;
}

export interface HttpRequest {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  /** A string or Buffer is sent as is; anything else as JSON. */
  body?: unknown;
  token?: string;
}

export class HttpClient {
  readonly agent: http.Agent;

  constructor(
    readonly baseUrl: string,
    readonly defaultToken?: string,
    maxSockets = 16,
  ) {
    this.agent = new http.Agent({ keepAlive: true, maxSockets });
  }

  request(req: HttpRequest): Promise<HttpResponse> {
    const url = new URL(req.path, this.baseUrl);
    const raw = req.body === undefined ? undefined : typeof req.body === 'string' || Buffer.isBuffer(req.body) ? req.body : JSON.stringify(req.body);
    const headers: Record<string, string> = {};
    if (raw !== undefined && !(typeof req.body === 'string' || Buffer.isBuffer(req.body))) headers['content-type'] = 'application/json';
    const token = req.token ?? this.defaultToken;
    if (token) headers.authorization = `Bearer ${token}`;
    Object.assign(headers, req.headers);
    return new Promise((resolve, reject) => {
      const r = http.request(url, { method: req.method ?? 'POST', agent: this.agent, headers }, (res) => collect(res, resolve, reject));
      r.on('error', reject);
      if (raw !== undefined) r.end(raw);
      else r.end();
    });
  }

  /** POST a JSON body to a path. */
  post(path: string, body: unknown, token?: string): Promise<HttpResponse> {
    return this.request({ path, body, ...(token !== undefined ? { token } : {}) });
  }

  close(): void {
    this.agent.destroy();
  }
}


function collect(res: http.IncomingMessage, resolve: (r: HttpResponse) => void, reject: (e: Error) => void): void {
  const chunks: Buffer[] = [];
  res.on('data', (c: Buffer) => chunks.push(c));
  res.on('error', reject);
  res.on('end', () => {
    const text = Buffer.concat(chunks).toString('utf8');
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    const socket = res.socket as TLSSocket | null;
    const peer = socket && 'getPeerX509Certificate' in socket ? socket.getPeerX509Certificate() : undefined;
    resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json, ...(peer ? { peer } : {}) });
  });
}

export interface OneRequest {
  method?: string;
  token?: string;
  /** A string is sent as is, with content-type application/json. */
  body?: string;
  headers?: Record<string, string>;
  /** HTTPS: the CA to trust, and the name the certificate must carry (default localhost). */
  ca?: string | Buffer;
  servername?: string;
  /** HTTPS: a client certificate (PEM) and its key to present. */
  clientCert?: { cert: string; key: string };
  timeoutMs?: number;
}

/** One request on a fresh connection, over HTTP or HTTPS by the URL's scheme. */
export function request(url: string, o: OneRequest = {}): Promise<HttpResponse> {
  const u = new URL(url);
  const lib = u.protocol === 'https:' ? https : http;
  const headers: Record<string, string> = {
    ...(o.token ? { authorization: `Bearer ${o.token}` } : {}),
    ...(o.body !== undefined ? { 'content-type': 'application/json' } : {}),
    ...o.headers,
  };
  return new Promise((resolve, reject) => {
    const req = lib.request(
      u,
      {
        method: o.method ?? 'GET',
        headers,
        agent: false,
        ...(o.ca ? { ca: o.ca, servername: o.servername ?? 'localhost' } : {}),
        ...(o.clientCert ? { cert: o.clientCert.cert, key: o.clientCert.key } : {}),
      },
      (res) => collect(res, resolve, reject),
    );
    req.on('error', reject);
    req.setTimeout(o.timeoutMs ?? 10_000, () => req.destroy(new Error(`no answer from ${url} in ${o.timeoutMs ?? 10_000} ms`)));
    req.end(o.body);
  });
}
