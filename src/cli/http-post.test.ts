// The CLI's transport: HTTPS trusting the given CA; a token never sent in clear text to anything but loopback.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listen, type RunningServer } from '../http/server.ts';
import { generateCa, issueServingCert } from '../controller/certs.ts';
import { httpCall } from './capacity.ts';
import { isLoopbackHost, tokenTransportProblem } from './http-post.ts';

describe('tokenTransportProblem', () => {
  it('https anywhere, http only to loopback, no token anything', () => {
    expect(tokenTransportProblem(new URL('https://10.0.0.1:8443/x'), 't')).toBeUndefined();
    expect(tokenTransportProblem(new URL('http://127.0.0.1:8080/x'), 't')).toBeUndefined();
    expect(tokenTransportProblem(new URL('http://localhost:8080/x'), 't')).toBeUndefined();
    expect(tokenTransportProblem(new URL('http://[::1]:8080/x'), 't')).toBeUndefined();
    expect(tokenTransportProblem(new URL('http://10.0.0.1:8080/x'), undefined)).toBeUndefined();
    expect(tokenTransportProblem(new URL('http://10.0.0.1:8080/x'), 't')).toMatch(/clear text to 10\.0\.0\.1:8080/);
    expect(tokenTransportProblem(new URL('http://better-compute-controller.svc:8080/x'), 't')).toMatch(/clear text/);
    expect(isLoopbackHost('127.8.0.1')).toBe(true);
    expect(isLoopbackHost('localhost.example.com')).toBe(false);
  });
});

describe('httpCall over HTTPS', () => {
  const ca = generateCa(Date.now());
  const other = generateCa(Date.now());
  let server: RunningServer;
  const seen: (string | undefined)[] = [];
  beforeAll(async () => {
    server = await listen(
      (req, res) => {
        seen.push(req.headers.authorization);
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ ok: true }));
      },
      { host: '127.0.0.1', port: 0, tls: issueServingCert(ca, ['127.0.0.1'], Date.now()) },
    );
  });
  afterAll(async () => server?.close(0));

  it('trusts the CA given, and only it', async () => {
    expect(await httpCall(server.url, 'tok-1', '/p', {}, { ca: ca.cert })).toEqual({ ok: true });
    expect(seen).toEqual(['Bearer tok-1']);
    await expect(httpCall(server.url, 'tok-2', '/p', {}, { ca: other.cert })).rejects.toMatchObject({ code: 'UNREACHABLE' });
    await expect(httpCall(server.url, 'tok-3', '/p', {})).rejects.toMatchObject({ code: 'UNREACHABLE' });
    expect(seen).toEqual(['Bearer tok-1']);
  });

  it('a token for a plain non-loopback URL is never sent', async () => {
    await expect(httpCall('http://192.0.2.1:8080', 'tok-4', '/p', {})).rejects.toMatchObject({ code: 'TLS_REQUIRED' });
  });
});
