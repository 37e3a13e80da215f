// The DRA plugin's pure part: which results a node prepares, the claim's CDI spec, the kubelet's answer.
import { describe, expect, it } from 'vitest';
import { containerAllocateResponse, DEFAULT_DEVICE_LIST_SETTINGS } from './device-list.ts';
import { ResourceClaimSchema } from './dra-allocate.ts';
import { claimCdiFileName, claimCdiName, claimCdiSpec, ourResults, preparedDevices, sameDevices } from './dra-cdi.ts';

const claim = (results: { request: string; driver: string; pool: string; device: string }[]) =>
  ResourceClaimSchema.parse({ metadata: { name: 'c', namespace: 'ns', uid: 'u-1' }, spec: {}, status: { allocation: { devices: { results } } } });

describe('DRA claim preparation (pure)', () => {
  it("takes only our driver's results in this node's pool", () => {
    const c = claim([
      { request: 'gpu', driver: 'gpu.bettercompute.io', pool: 'n1', device: 'a' },
      { request: 'gpu', driver: 'gpu.nvidia.com', pool: 'n1', device: 'b' },
      { request: 'gpu', driver: 'gpu.bettercompute.io', pool: 'n2', device: 'c' },
    ]);
    expect(ourResults(c, 'n1')).toEqual([{ request: 'gpu', pool: 'n1', device: 'a' }]);
    expect(ourResults(ResourceClaimSchema.parse({ metadata: { name: 'c', namespace: 'ns', uid: 'u' }, spec: {} }), 'n1')).toEqual([]);
  });

  it('the same devices: same pairs, none more, none fewer, no repeats', () => {
    const r = [{ request: 'gpu', pool: 'n', device: 'a' }, { request: 'gpu', pool: 'n', device: 'b' }];
    expect(sameDevices(r, [{ request: 'gpu', device: 'b' }, { request: 'gpu', device: 'a' }])).toBe(true);
    expect(sameDevices(r, [{ request: 'gpu', device: 'a' }])).toBe(false);
    expect(sameDevices(r, [{ request: 'gpu', device: 'a' }, { request: 'other', device: 'b' }])).toBe(false);
    expect(sameDevices([r[0]!, r[0]!], [{ request: 'gpu', device: 'a' }])).toBe(false);
  });

  it('the CDI spec carries the device-plugin hand-over: env sorted, device nodes; sorted atoms give the same bytes', () => {
    const handed = containerAllocateResponse(
      { resource: 'gpu.bettercompute.io', atoms: [{ id: 'GPU-b', visible: 'GPU-b', deviceNodes: ['/dev/nvidia1'] }, { id: 'GPU-a', visible: 'GPU-a', deviceNodes: ['/dev/nvidia0'] }], controlNodes: ['/dev/nvidiactl'] },
      { ...DEFAULT_DEVICE_LIST_SETTINGS, strategies: ['envvar'] },
    );
    const spec = claimCdiSpec('0f1e-uid', handed);
    expect(spec).toEqual({
      cdiVersion: '0.6.0',
      kind: 'bettercompute.io/claim',
      devices: [
        {
          name: '0f1e-uid',
          containerEdits: {
            env: ['BETTERCOMPUTE_ATOMS=GPU-a,GPU-b', 'NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b'],
            deviceNodes: ['/dev/nvidia0', '/dev/nvidia1', '/dev/nvidiactl'].map((p) => ({ path: p, hostPath: p, permissions: 'rw' })),
          },
        },
      ],
    });
    expect(claimCdiFileName('0f1e-uid')).toBe('bettercompute.io-claim_0f1e-uid.json');
    expect(preparedDevices('0f1e-uid', [{ request: 'gpu', pool: 'n', device: 'a' }])).toEqual([
      { request_names: ['gpu'], pool_name: 'n', device_name: 'a', cdi_device_ids: ['bettercompute.io/claim=0f1e-uid'] },
    ]);
  });

  it('a uid that cannot name a CDI device gives none', () => {
    expect(claimCdiName('u-')).toBeUndefined();
    expect(() => claimCdiSpec('u-', { envs: {}, mounts: [], devices: [], annotations: {}, cdi_devices: [] })).toThrow(/CDI/);
  });
});
