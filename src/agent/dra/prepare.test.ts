// The DRA plugin's refusals, with the API server's claim and the controller's answer as plain functions: every failure
// is the claim's error and leaves no spec (not even an earlier one); the kubelet's call is bounded.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import type { ClaimPrepareAnswer } from '../../agentapi/wire.ts';
import type { ContainerAllocateResponse } from '../../core/device-list.ts';
import { silentLogger } from '../../log.ts';
import { draPluginClient, grpc, unary } from '../grpc.ts';
import { DraPlugin, MAX_CLAIMS_PER_CALL } from './plugin.ts';
import { ClaimPreparer, type ClaimPreparerDeps } from './prepare.ts';

const NODE = 'n1';
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bc-dra-prepare-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const claimObject = (uid: string, results: { request: string; driver?: string; pool?: string; device: string }[]) => ({
  metadata: { name: 'c', namespace: 'ns', uid },
  spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName: 'gpu.bettercompute.io' } }] } },
  status: { allocation: { devices: { results: results.map((r) => ({ driver: 'gpu.bettercompute.io', pool: NODE, ...r })) } } },
});
const answerFor = (uid: string, devices: { request: string; device: string; atomId: string }[]): ClaimPrepareAnswer => ({ claimUid: uid, bookedTo: { kind: 'pod', podUid: 'p' }, end: null, devices });
const HANDED: ContainerAllocateResponse = { envs: { BETTERCOMPUTE_ATOMS: 'GPU-a' }, mounts: [], devices: [], annotations: {}, cdi_devices: [] };

describe('ClaimPreparer refusals', () => {
  let cdiDir: string;
  let claim: unknown;
  let answer: () => Promise<ClaimPrepareAnswer>;
  let asked: number;
  const preparer = (over: Partial<ClaimPreparerDeps> = {}) =>
    new ClaimPreparer({
      nodeName: NODE,
      cdiDir,
      readClaim: async () => claim,
      askController: async () => {
        asked++;
        return answer();
      },
      handoff: async () => HANDED,
      log: silentLogger,
      ...over,
    });
  const ref = { namespace: 'ns', uid: 'u1', name: 'c' };

  beforeEach(() => {
    cdiDir = fs.mkdtempSync(path.join(dir, 'cdi-'));
    claim = claimObject('u1', [{ request: 'gpu', device: 'gpu-a' }]);
    answer = async () => answerFor('u1', [{ request: 'gpu', device: 'gpu-a', atomId: 'GPU-a' }]);
    asked = 0;
  });

  it('prepared, then refused by the controller: the earlier spec is removed', async () => {
    const p = preparer();
    expect(await p.prepare(ref)).toMatchObject({ devices: [{ device_name: 'gpu-a', cdi_device_ids: ['bettercompute.io/claim=u1'] }] });
    expect(fs.existsSync(p.specFile('u1'))).toBe(true);
    answer = () => Promise.reject(new Error('HTTP 409 CLAIM_OUTSIDE_WINDOW reservation r does not hold its atoms now'));
    expect(await p.prepare(ref)).toEqual({ error: expect.stringMatching(/CLAIM_OUTSIDE_WINDOW/) as string });
    expect(fs.readdirSync(cdiDir)).toEqual([]);
  });

  it("the controller's devices must be the allocation's, and its answer for this claim", async () => {
    answer = async () => answerFor('u1', [{ request: 'gpu', device: 'gpu-b', atomId: 'GPU-b' }]);
    expect(await preparer().prepare(ref)).toEqual({ error: expect.stringMatching(/not the allocation's/) as string });
    answer = async () => answerFor('u1', [{ request: 'gpu', device: 'gpu-a', atomId: 'GPU-a' }, { request: 'gpu', device: 'gpu-b', atomId: 'GPU-b' }]);
    expect(await preparer().prepare(ref)).toHaveProperty('error');
    answer = async () => answerFor('u2', [{ request: 'gpu', device: 'gpu-a', atomId: 'GPU-a' }]);
    expect(await preparer().prepare(ref)).toHaveProperty('error');
    expect(fs.readdirSync(cdiDir)).toEqual([]);
  });

  it('nothing of ours on this node, or no claim read: refused before the controller is asked', async () => {
    claim = claimObject('u1', [{ request: 'gpu', device: 'gpu-a', pool: 'n2' }, { request: 'gpu', device: 'x', driver: 'gpu.nvidia.com' }]);
    expect(await preparer().prepare(ref)).toEqual({ error: expect.stringMatching(/no device of ours in pool n1/) as string });
    claim = { metadata: { name: 'c' } };
    expect(await preparer().prepare(ref)).toEqual({ error: expect.stringMatching(/is not one/) as string });
    expect(await preparer({ readClaim: () => Promise.reject(new Error('the Kubernetes API did not answer within 30000 ms')) }).prepare(ref)).toEqual({
      error: expect.stringMatching(/did not answer/) as string,
    });
    expect(asked).toBe(0);
  });

  it("the kubelet's reference is checked: a uid that is no claim uid, a missing name", async () => {
    expect(await preparer().prepare({ ...ref, uid: '../etc/passwd' })).toHaveProperty('error');
    expect(await preparer().prepare({ namespace: 'ns', uid: 'u1' })).toHaveProperty('error');
    expect(await preparer().unprepare({ ...ref, uid: '../x' })).toHaveProperty('error');
    expect(asked).toBe(0);
  });

  it('a spec that cannot be written is an error and leaves no temporary file', async () => {
    fs.mkdirSync(path.join(cdiDir, 'bettercompute.io-claim_u1.json'));
    fs.writeFileSync(path.join(cdiDir, 'bettercompute.io-claim_u1.json', 'keep'), '');
    expect(await preparer().prepare(ref)).toHaveProperty('error');
    expect(fs.readdirSync(cdiDir)).toEqual(['bettercompute.io-claim_u1.json']);
  });
});

describe('DraPlugin bounds the call', () => {
  it(`more than ${MAX_CLAIMS_PER_CALL} claims, or none listed: INVALID_ARGUMENT`, async () => {
    const base = fs.mkdtempSync(path.join(dir, 'plugin-'));
    const preparer = new ClaimPreparer({ nodeName: NODE, cdiDir: base, readClaim: async () => undefined, askController: () => Promise.reject(new Error('no')), handoff: async () => HANDED, log: silentLogger });
    const plugin = new DraPlugin({ pluginDir: path.join(base, 'p'), registryDir: path.join(base, 'r'), preparer, log: silentLogger });
    await plugin.start();
    const kubelet = draPluginClient(plugin.draSocket);
    try {
      const many = { claims: Array.from({ length: MAX_CLAIMS_PER_CALL + 1 }, (_, i) => ({ namespace: 'ns', uid: `u${i}`, name: 'c' })) };
      await expect(unary(kubelet, 'NodePrepareResources', many)).rejects.toMatchObject({ code: grpc.status.INVALID_ARGUMENT });
      expect(await unary(kubelet, 'NodePrepareResources', { claims: [] })).toEqual({ claims: {} });
      const one = await unary<unknown, { claims: Record<string, { error: string }> }>(kubelet, 'NodePrepareResources', { claims: [{ namespace: 'ns', uid: 'u1', name: 'c' }] });
      expect(one.claims.u1!.error).toMatch(/no ResourceClaim by that name/);
    } finally {
      kubelet.close();
      await plugin.stop();
    }
    expect(fs.existsSync(plugin.draSocket) || fs.existsSync(plugin.registrationSocket)).toBe(false);
  });
});
