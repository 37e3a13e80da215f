// A small HTTP client for API tests: keep-alive on loopback, raw bodies allowed (malformed JSON, odd content types).
import http from 'node:http';

export interface HttpResponse {
  status: number;
  headers: http.IncomingHttpHeaders;
  text: string;
  /** The parsed body, or undefined when it is not JSON. */
  json: unknown;
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
      const r = http.request(url, { method: req.method ?? 'POST', agent: this.agent, headers }, (res) => {
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
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
        });
      });
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

