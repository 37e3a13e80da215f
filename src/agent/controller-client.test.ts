// The agent's client of the controller's agent API: where it connects, which certificate it accepts, which token it
// sends, and that a controller that does not answer costs at most the timeout.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClaimPrepareAnswer, NodeState } from '../agentapi/wire.ts';
import { controllerUrlFromEnv, loadConfig } from '../config.ts';
import { ControllerCallError, ControllerClient } from './controller-client.ts';

const SERVER_NAME = 'better-compute-controller.better-compute-system.svc';

describe('where the agent finds the controller', () => {
  it('BETTER_COMPUTE_CONTROLLER_URL wins; else the Service environment of the port named webhook', () => {
    expect(controllerUrlFromEnv({ BETTER_COMPUTE_CONTROLLER_URL: 'https://c.example:9443', BETTER_COMPUTE_CONTROLLER_SERVICE_HOST: '10.0.0.9', BETTER_COMPUTE_CONTROLLER_SERVICE_PORT_WEBHOOK: '9443' })).toBe(
      'https://c.example:9443',
    );
    expect(controllerUrlFromEnv({ BETTER_COMPUTE_CONTROLLER_SERVICE_HOST: '10.96.0.12', BETTER_COMPUTE_CONTROLLER_SERVICE_PORT_WEBHOOK: '9443' })).toBe('https://10.96.0.12:9443');
    expect(controllerUrlFromEnv({ BETTER_COMPUTE_CONTROLLER_SERVICE_HOST: 'fd00::12', BETTER_COMPUTE_CONTROLLER_SERVICE_PORT_WEBHOOK: '9443' })).toBe('https://[fd00::12]:9443');
    // The Service's other ports (the capacity API's plain HTTP) are not the agent API.
    expect(controllerUrlFromEnv({ BETTER_COMPUTE_CONTROLLER_SERVICE_HOST: '10.96.0.12', BETTER_COMPUTE_CONTROLLER_SERVICE_PORT: '8080' })).toBeUndefined();
    expect(controllerUrlFromEnv({})).toBeUndefined();
  });

  it('the CA file, the certificate name (from the namespace) and the token file have in-cluster defaults', () => {
    const c = loadConfig({ BETTER_COMPUTE_CONTROLLER_SERVICE_HOST: '10.96.0.12', BETTER_COMPUTE_CONTROLLER_SERVICE_PORT_WEBHOOK: '9443' });
    expect(c).toMatchObject({
      controllerUrl: 'https://10.96.0.12:9443',
      controllerCaFile: '/etc/better-compute/ca/ca.crt',
      controllerServerName: SERVER_NAME,
      agentTokenFile: '/var/run/secrets/kubernetes.io/serviceaccount/token',
    });
    expect(loadConfig({ POD_NAMESPACE: 'gpu-system' }).controllerServerName).toBe('better-compute-controller.gpu-system.svc');
    // The DRA kubelet plugin: off unless asked for; the kubelet's and CDI's usual directories.
    expect(loadConfig({})).toMatchObject({
      agentDra: false,
      draPluginDir: '/var/lib/kubelet/plugins/gpu.bettercompute.io',
      pluginsRegistryDir: '/var/lib/kubelet/plugins_registry',
      cdiDir: '/var/run/cdi',
      draSliceResyncMs: 60_000,
    });
    expect(loadConfig({ BETTER_COMPUTE_AGENT_DRA: 'true', BETTER_COMPUTE_CDI_DIR: '/etc/cdi', BETTER_COMPUTE_DRA_SLICE_RESYNC: '5s' })).toMatchObject({
      agentDra: true,
      cdiDir: '/etc/cdi',
      draSliceResyncMs: 5000,
    });
    expect(() => loadConfig({ BETTER_COMPUTE_AGENT_DRA: 'yes' })).toThrow();
    expect(loadConfig({ BETTER_COMPUTE_CONTROLLER_SERVER_NAME: 'ctl.test', BETTER_COMPUTE_AGENT_TOKEN_FILE: '/t', BETTER_COMPUTE_CONTROLLER_CA_FILE: '/ca' })).toMatchObject({
      controllerServerName: 'ctl.test',
      agentTokenFile: '/t',
      controllerCaFile: '/ca',
    });
  });

  it('refuses a URL that is not https', () => {
    expect(() => new ControllerClient({ url: 'http://10.0.0.1:9443', nodeName: 'n', caFile: '/ca', serverName: SERVER_NAME, tokenFile: '/t' })).toThrow(/https/);
  });
});

const hasOpenssl = (() => {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

const STATE: NodeState = {
  now: 1_700_000_000_000,
  atoms: [{ id: 'GPU-a', class: 'gpu', parentId: null, healthy: true }],
  reservations: [],
  admission: { podUid: 'uid-1', namespace: 'ns', podName: 'p', atoms: ['GPU-a'] },
};

const ANSWER: ClaimPrepareAnswer = { claimUid: 'uid-c', bookedTo: { kind: 'pod', podUid: 'pod-1' }, end: null, devices: [{ request: 'gpu', device: 'gpu-a', atomId: 'GPU-a' }] };

describe.skipIf(!hasOpenssl)('the agent API client over TLS (needs openssl for test certificates)', () => {
  let dir: string;
  let server: https.Server;
  let url: string;
  const seen: { method?: string; url?: string; authorization?: string; body?: string }[] = [];
  let hang = false;

  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const client = (over: Partial<ConstructorParameters<typeof ControllerClient>[0]> = {}) =>
    new ControllerClient({ url, nodeName: 'node-a', caFile: path.join(dir, 'ca.crt'), serverName: SERVER_NAME, tokenFile: path.join(dir, 'token'), timeoutMs: 2000, ...over });

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-agent-client-'));
    const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
    for (const ca of ['ca', 'other-ca']) {
      openssl('req', '-x509', ...ec, '-keyout', `${ca}.key`, '-out', `${ca}.crt`, '-days', '1', '-subj', `/CN=${ca}`, '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign');
    }
    openssl('req', ...ec, '-keyout', 'tls.key', '-out', 'tls.csr', '-subj', '/CN=better-compute-controller');
    fs.writeFileSync(path.join(dir, 'ext'), `subjectAltName=DNS:${SERVER_NAME}\nextendedKeyUsage=serverAuth\n`);
    openssl('x509', '-req', '-in', 'tls.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'tls.crt', '-days', '1', '-extfile', 'ext');
    fs.writeFileSync(path.join(dir, 'token'), 'token-1\n');
    server = https.createServer({ key: fs.readFileSync(path.join(dir, 'tls.key')), cert: fs.readFileSync(path.join(dir, 'tls.crt')) }, (req, res) => {
      seen.push({ method: req.method, url: req.url, authorization: req.headers.authorization });
      if (hang) return; // never answers
      if (req.url?.includes('/claims/')) {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          seen.at(-1)!.body = `${req.headers['content-type']} ${Buffer.concat(chunks).toString('utf8')}`;
          res.setHeader('content-type', 'application/json');
          if (req.url === '/agent/v1/nodes/node-a/claims/uid-c/prepare') res.end(JSON.stringify(ANSWER));
          else {
            res.statusCode = 403;
            res.end(JSON.stringify({ error: { code: 'CLAIM_NOT_BOOKED', message: 'device gpu-1 is not booked to claim uid-x' } }));
          }
        });
        return;
      }
      res.setHeader('content-type', 'application/json');
      if (req.headers.authorization !== 'Bearer token-1' && req.headers.authorization !== 'Bearer token-2') {
        res.statusCode = 403;
        res.end(JSON.stringify({ error: { code: 'FORBIDDEN', message: 'not the agent of node-a' } }));
      } else if (req.method === 'GET' && req.url === '/agent/v1/nodes/node-a/state') res.end(JSON.stringify(STATE));
      else if (req.method === 'POST' && req.url === '/agent/v1/nodes/node-a/admissions/uid-1/done') res.end(JSON.stringify({ dropped: true }));
      else if (req.url === '/agent/v1/nodes/node-bad/state') res.end('{"now":"yesterday"}');
      else {
        res.statusCode = 404;
        res.end(JSON.stringify({ error: { code: 'NOT_FOUND', message: 'no' } }));
      }
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `https://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  });
  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise((r) => server?.close(r));
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it("reads its node's state by IP, checking the certificate against the service name, with the token of the moment", async () => {
    const c = client();
    try {
      expect(await c.state()).toEqual(STATE);
      expect(seen.at(-1)).toEqual({ method: 'GET', url: '/agent/v1/nodes/node-a/state', authorization: 'Bearer token-1' });
      fs.writeFileSync(path.join(dir, 'token'), 'token-2');
      await c.admissionDone('uid-1');
      expect(seen.at(-1)).toEqual({ method: 'POST', url: '/agent/v1/nodes/node-a/admissions/uid-1/done', authorization: 'Bearer token-2' });
      fs.writeFileSync(path.join(dir, 'token'), 'token-1\n');
    } finally {
      c.close();
    }
  });

  it("DRA prepare: posts the claim's name as JSON; the answer is checked, a refusal carries its code", async () => {
    const c = client();
    try {
      expect(await c.prepareClaim('uid-c', { namespace: 'ns', name: 'c' })).toEqual(ANSWER);
      expect(seen.at(-1)).toEqual({ method: 'POST', url: '/agent/v1/nodes/node-a/claims/uid-c/prepare', authorization: 'Bearer token-1', body: 'application/json {"namespace":"ns","name":"c"}' });
      const e = (await c.prepareClaim('uid-x', { namespace: 'ns', name: 'x' }).catch((x: unknown) => x)) as ControllerCallError;
      expect(e).toBeInstanceOf(ControllerCallError);
      expect([e.status, e.code]).toEqual([403, 'CLAIM_NOT_BOOKED']);
    } finally {
      c.close();
    }
  });

  it('refuses a certificate for another name, or signed by another CA', async () => {
    const before = seen.length;
    for (const c of [client({ serverName: 'better-compute-controller.elsewhere.svc' }), client({ caFile: path.join(dir, 'other-ca.crt') })]) {
      try {
        await expect(c.state()).rejects.toBeInstanceOf(ControllerCallError);
      } finally {
        c.close();
      }
    }
    expect(seen.length).toBe(before);
  });

  it("the controller's refusal and a malformed answer are errors", async () => {
    fs.writeFileSync(path.join(dir, 'wrong-token'), 'token-of-another-pod');
    const c = client({ tokenFile: path.join(dir, 'wrong-token') });
    try {
      const e = (await c.state().catch((x: unknown) => x)) as ControllerCallError;
      expect(e).toBeInstanceOf(ControllerCallError);
      expect([e.status, e.code]).toEqual([403, 'FORBIDDEN']);
    } finally {
      c.close();
    }
    const d = client({ nodeName: 'node-bad' });
    try {
      await expect(d.state()).rejects.toThrow(/unexpected answer/);
    } finally {
      d.close();
    }
  });

  it('a controller that accepts the request but never answers: the call fails at its timeout', async () => {
    hang = true;
    const c = client({ timeoutMs: 300 });
    try {
      const t0 = performance.now();
      await expect(c.state()).rejects.toThrow(/no answer within 300 ms/);
      expect(performance.now() - t0).toBeLessThan(2000);
    } finally {
      hang = false;
      c.close();
    }
  });
});

describe('a controller that never finishes the handshake', () => {
  it('the call fails at its timeout', async () => {
    const sockets: net.Socket[] = [];
    const silent = net.createServer((s) => sockets.push(s)); // accepts, says nothing
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-agent-client-'));
    fs.writeFileSync(path.join(dir, 'token'), 't');
    fs.writeFileSync(path.join(dir, 'ca.crt'), '');
    const c = new ControllerClient({
      url: `https://127.0.0.1:${(silent.address() as net.AddressInfo).port}`,
      nodeName: 'node-a',
      caFile: path.join(dir, 'ca.crt'),
      serverName: SERVER_NAME,
      tokenFile: path.join(dir, 'token'),
      timeoutMs: 300,
    });
    try {
      const t0 = performance.now();
      await expect(c.state()).rejects.toThrow(/no answer within 300 ms/);
      expect(performance.now() - t0).toBeLessThan(2000);
      expect(sockets.length).toBe(1);
    } finally {
      c.close();
      for (const s of sockets) s.destroy();
      await new Promise((r) => silent.close(r));
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
