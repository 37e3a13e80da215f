// A small HTTP client for API tests: keep-alive on loopback, raw bodies allowed (malformed JSON, odd content types).
import http from 'node:http';
import { expect } from 'vitest';
import { ERROR_STATUS, type ErrorCode } from '../../src/api/errors.ts';

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

/** Whether a body is exactly `{"error":{"code","message"}}` with a known code and a non-empty message. */
export function isErrorBody(json: unknown): json is { error: { code: ErrorCode; message: string } } {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return false;
  if (Object.keys(json).join() !== 'error') return false;
  const e = (json as { error: unknown }).error;
  if (typeof e !== 'object' || e === null || Array.isArray(e)) return false;
  if (Object.keys(e).sort().join() !== 'code,message') return false;
  const { code, message } = e as { code: unknown; message: unknown };
  return typeof code === 'string' && Object.hasOwn(ERROR_STATUS, code) && typeof message === 'string' && message.length > 0;
}

/** Asserts an error answer with this code (status, content type, exact body shape); returns its message. */
export function expectError(res: HttpResponse, code: ErrorCode): string {
  expect(res.status, res.text).toBe(ERROR_STATUS[code]);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  expect(isErrorBody(res.json), res.text).toBe(true);
  const body = res.json as { error: { code: string; message: string } };
  expect(body.error.code).toBe(code);
  return body.error.message;
}
