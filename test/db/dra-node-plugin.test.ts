// The agent as the kubelet's DRA plugin (src/agent/dra/, docs/dra-node.md), played by a kubelet: a real gRPC client
// on the plugin's real unix sockets finds it by its registration socket (GetInfo) and prepares claims through the DRA
// v1 service. The controller's side is the real agent API router over the real ledger; the API server's
// ResourceClaims are a map read by both (the one boundary that cannot run here). The atoms' device nodes come from a
// fake NVIDIA host, through the agent's own hand-off code.
import fs from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent } from '../../src/agent/agent.ts';
import type { DeviceSource, NodeDevicesSpec } from '../../src/agent/discovery.ts';
import { DraPlugin } from '../../src/agent/dra/plugin.ts';
import { ClaimPreparer } from '../../src/agent/dra/prepare.ts';
import { draPluginClient, grpc, pluginRegistrationClient, unary } from '../../src/agent/grpc.ts';
import { agentUsernameFor, createAgentApiRouter, NODE_NAME_CLAIM, type AgentApiDeps } from '../../src/agentapi/router.ts';
import { nodeState } from '../../src/agentapi/state.ts';
import { AGENT_API_PREFIX, ClaimPrepareAnswerSchema, type ClaimPrepareAnswer, type ClaimPrepareRequest } from '../../src/agentapi/wire.ts';
import { unauthenticated } from '../../src/http/errors.ts';
import { draDeviceName } from '../../src/core/dra-names.ts';
import type { ClaimHolding } from '../../src/db/claims.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { silentLogger } from '../../src/log.ts';
import { makeNode, makePool } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';
import { allocatedClaim } from '../support/dra-claims.ts';
import { eventually } from '../support/eventually.ts';
import { fakeNvidiaHost } from '../support/nvidia-host.ts';
import { DRA_DRIVER } from '../../src/core/names.ts';

const ctx = useTestDatabase();
const NODE = 'dn-1';
const AGENT = agentUsernameFor('better-compute-system');
const authenticate: AgentApiDeps['authenticate'] = async (token) => {
  if (token.startsWith('agent:')) return { subject: AGENT, extra: { [NODE_NAME_CLAIM]: [token.slice(6)] } };
  throw unauthenticated('the bearer token is not valid');
};

/** The API server's claims, by namespace/name. */
const claims = new Map<string, unknown>();

interface PrepareResponse {
  claims: Record<string, { devices: { request_names: string[]; pool_name: string; device_name: string; cdi_device_ids: string[] }[]; error: string }>;
}

describe('the agent as a DRA kubelet plugin', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-dra-node-'));
  const cdiDir = path.join(dir, 'cdi');
  const node = makeNode(NODE).gpus(2);
  let server: Server;
  let agent: Agent;
  let plugin: DraPlugin;
  let kubelet: grpc.Client;
  let booked: ClaimHolding;
  let freeAtom: string;
  const asked: string[] = [];

  beforeAll(async () => {
    const app = express();
    app.use(AGENT_API_PREFIX, createAgentApiRouter({ db: ctx.db, clock: ctx.clock, log: silentLogger, authenticate, agentUsername: AGENT, readClaim: async (ns, name) => claims.get(`${ns}/${name}`) }));
    server = createServer(app);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}${AGENT_API_PREFIX}`;
    // The controller client's part, over plain HTTP (its TLS and token handling are controller-client.test.ts's).
    const askController = async (uid: string, req: ClaimPrepareRequest): Promise<ClaimPrepareAnswer> => {
      asked.push(uid);
      const res = await fetch(`${url}/nodes/${NODE}/claims/${uid}/prepare`, {
        method: 'POST',
        headers: { authorization: `Bearer agent:${NODE}`, 'content-type': 'application/json' },
        body: JSON.stringify(req),
        signal: AbortSignal.timeout(5000),
      });
      const body = (await res.json()) as { error?: { code: string; message: string } };
      if (!res.ok) throw new Error(`HTTP ${res.status} ${body.error?.code} ${body.error?.message}`);
      return ClaimPrepareAnswerSchema.parse(body);
    };

    const poolId = await makePool('dn').handoff('dra').create(ctx.db);
    await node.create(ctx.db, poolId);
    const r = await new Ledger(ctx.db).bookClaim(
      { id: { claimUid: 'uid-od', namespace: 'acme', claimName: 'od', podUid: 'pod-od', podName: 'p' }, tenantId: 'acme', requests: [{ name: 'gpu', count: 1, class: 'gpu' }], nodeSelector: {}, durationSeconds: null },
      ctx.clock.now(),
    );
    if (!r.ok) throw new Error(r.message);
    booked = r.holding;
    claims.set('acme/od', allocatedClaim(booked));
    freeAtom = [node.gpuUuid(0), node.gpuUuid(1)].find((a) => a !== booked.devices[0]!.atomId)!;

    const spec: NodeDevicesSpec = { gpus: node.report().map((g, i) => ({ ...g, pciBusId: `0000:0${i + 1}:00.0` })), scalars: {} };
    const hostDirs = fakeNvidiaHost(path.join(dir, 'host'), {
      gpus: [0, 1].map((i) => ({ uuid: node.gpuUuid(i), bus: `0000:0${i + 1}:00.0`, minor: i })),
      nodes: ['nvidia0', 'nvidia1', 'nvidiactl', 'nvidia-uvm'],
    });
    const source: DeviceSource = { kind: 'file', discover: async () => spec };
    fs.mkdirSync(path.join(dir, 'device-plugins'));
    agent = new Agent({
      nodeName: NODE,
      devicePluginDir: path.join(dir, 'device-plugins'),
      podResourcesSocket: path.join(dir, 'pod-resources.sock'),
      source,
      backend: { state: () => nodeState(ctx.db, ctx.clock, NODE), admissionDone: async () => undefined },
      log: silentLogger,
      reconcileEveryMs: 3_600_000,
      discoverEveryMs: 3_600_000,
      hostDirs,
    });
    await agent.start();
    const preparer = new ClaimPreparer({ nodeName: NODE, cdiDir, readClaim: async (ns, name) => claims.get(`${ns}/${name}`), askController, handoff: (atoms) => agent.draHandoff(atoms), log: silentLogger });
    plugin = new DraPlugin({ pluginDir: path.join(dir, 'plugins', DRA_DRIVER), registryDir: path.join(dir, 'plugins_registry'), preparer, log: silentLogger, checkEveryMs: 50 });
    await plugin.start();

    // The kubelet's plugin watcher: finds the registration socket, asks who it is, says it took it.
    const registration = pluginRegistrationClient(path.join(dir, 'plugins_registry', `${DRA_DRIVER}-reg.sock`));
    const info = await unary<unknown, { type: string; name: string; endpoint: string; supported_versions: string[] }>(registration, 'GetInfo', {});
    expect(info).toEqual({ type: 'DRAPlugin', name: DRA_DRIVER, endpoint: path.join(dir, 'plugins', DRA_DRIVER, 'dra.sock'), supported_versions: ['v1.DRAPlugin'] });
    await unary(registration, 'NotifyRegistrationStatus', { plugin_registered: true, error: '' });
    registration.close();
    kubelet = draPluginClient(info.endpoint);
  });

  afterAll(async () => {
    kubelet?.close();
    await plugin?.stop();
    await agent?.stop();
    server?.closeAllConnections();
    await new Promise<void>((r) => (server ? server.close(() => r()) : r()));
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const prepare = (...cs: { uid: string; name: string }[]) =>
    unary<unknown, PrepareResponse>(kubelet, 'NodePrepareResources', { claims: cs.map((c) => ({ namespace: 'acme', ...c })) });
  const specFile = (uid: string) => path.join(cdiDir, `bettercompute.io-claim_${uid}.json`);

  it('prepares a claim the ledger booked: CDI devices in the answer, one spec with the atoms for the claim', async () => {
    const atom = booked.devices[0]!.atomId;
    const minor = atom === node.gpuUuid(0) ? 0 : 1;
    const r = await prepare({ uid: 'uid-od', name: 'od' });
    expect(r.claims['uid-od']).toEqual({
      devices: [{ request_names: ['gpu'], pool_name: NODE, device_name: draDeviceName(atom), cdi_device_ids: ['bettercompute.io/claim=uid-od'] }],
      error: '',
    });
    const text = fs.readFileSync(specFile('uid-od'), 'utf8');
    expect(JSON.parse(text)).toEqual({
      cdiVersion: '0.6.0',
      kind: 'bettercompute.io/claim',
      devices: [
        {
          name: 'uid-od',
          containerEdits: {
            env: [`BETTERCOMPUTE_ATOMS=${atom}`, `NVIDIA_VISIBLE_DEVICES=${atom}`],
            deviceNodes: [`/dev/nvidia${minor}`, '/dev/nvidiactl', '/dev/nvidia-uvm'].map((p) => ({ path: p, hostPath: p, permissions: 'rw' })),
          },
        },
      ],
    });
    // Twice: the same answer and the same bytes; no temporary file left.
    expect(await prepare({ uid: 'uid-od', name: 'od' })).toEqual(r);
    expect(fs.readFileSync(specFile('uid-od'), 'utf8')).toBe(text);
    expect(fs.readdirSync(cdiDir)).toEqual(['bettercompute.io-claim_uid-od.json']);
  });

  it('a claim the controller refuses (CLAIM_NOT_BOOKED) gets an error and no spec; the other claim of the call is prepared', async () => {
    const forged = { ...allocatedClaim(booked), metadata: { name: 'forged', namespace: 'acme', uid: 'uid-forged' } };
    forged.status.allocation = { ...forged.status.allocation, devices: { results: [{ request: 'gpu', driver: DRA_DRIVER, pool: NODE, device: draDeviceName(freeAtom) }] } };
    claims.set('acme/forged', forged);
    const r = await prepare({ uid: 'uid-forged', name: 'forged' }, { uid: 'uid-od', name: 'od' });
    expect(r.claims['uid-forged']!.devices).toEqual([]);
    expect(r.claims['uid-forged']!.error).toMatch(/CLAIM_NOT_BOOKED/);
    expect(r.claims['uid-od']!.error).toBe('');
    expect(fs.existsSync(specFile('uid-forged'))).toBe(false);
  });

  it('a claim whose uid is not the one by that name is refused before the controller is asked', async () => {
    asked.length = 0;
    const r = await prepare({ uid: 'uid-other', name: 'od' });
    expect(r.claims['uid-other']!.error).toMatch(/has uid uid-od, not uid-other/);
    expect(asked).toEqual([]);
    expect(fs.existsSync(specFile('uid-other'))).toBe(false);
    const none = await prepare({ uid: 'uid-none', name: 'none' });
    expect(none.claims['uid-none']!.error).toMatch(/no ResourceClaim by that name/);
  });

  it('unprepare removes the spec; a second unprepare is fine', async () => {
    await prepare({ uid: 'uid-od', name: 'od' });
    expect(fs.existsSync(specFile('uid-od'))).toBe(true);
    const u = { claims: [{ namespace: 'acme', uid: 'uid-od', name: 'od' }] };
    expect(await unary(kubelet, 'NodeUnprepareResources', u)).toEqual({ claims: { 'uid-od': { error: '' } } });
    expect(fs.existsSync(specFile('uid-od'))).toBe(false);
    expect(await unary(kubelet, 'NodeUnprepareResources', u)).toEqual({ claims: { 'uid-od': { error: '' } } });
  });

  it('sockets that vanish (a kubelet that restarts) are served again', async () => {
    fs.rmSync(plugin.registrationSocket);
    fs.rmSync(plugin.draSocket);
    await eventually(async () => {
      const registration = pluginRegistrationClient(plugin.registrationSocket);
      try {
        expect(await unary<unknown, { name: string }>(registration, 'GetInfo', {}, 1000)).toMatchObject({ name: DRA_DRIVER });
      } finally {
        registration.close();
      }
      const again = draPluginClient(plugin.draSocket);
      try {
        const r = await unary<unknown, PrepareResponse>(again, 'NodePrepareResources', { claims: [{ namespace: 'acme', uid: 'uid-od', name: 'od' }] }, 1000);
        expect(r.claims['uid-od']!.error).toBe('');
      } finally {
        again.close();
      }
    }, 5000);
  });
});
