// Which failed Bindings may still have landed (their writes are kept) and which were refused (their writes undone).
import { describe, expect, it } from 'vitest';
import { KubeCallTimeoutError } from '../kube/client.ts';
import { bindingMayHaveLanded } from './binder.ts';
import { BindError } from './deps.ts';
import { KubeStatusError } from './kube.ts';

describe('bindingMayHaveLanded', () => {
  it('no answer, or one that says the server may have written it: kept', () => {
    expect(bindingMayHaveLanded(new KubeCallTimeoutError(5000))).toBe(true);
    expect(bindingMayHaveLanded(Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }))).toBe(true);
    expect(bindingMayHaveLanded(new KubeStatusError(504, 'Timeout: request did not complete within the allotted timeout'))).toBe(true);
    expect(bindingMayHaveLanded(new KubeStatusError(500, 'Internal error'))).toBe(true);
  });

  it('a refusal, a request never sent, or our own verdict: undone', () => {
    expect(bindingMayHaveLanded(new KubeStatusError(409, 'pod is already assigned to node'))).toBe(false);
    expect(bindingMayHaveLanded(new KubeStatusError(503, 'the API server is unavailable'))).toBe(false);
    expect(bindingMayHaveLanded(new KubeStatusError(403, 'forbidden'))).toBe(false);
    expect(bindingMayHaveLanded(Object.assign(new Error('connect ECONNREFUSED 10.96.0.1:443'), { code: 'ECONNREFUSED' }))).toBe(false);
    expect(bindingMayHaveLanded(Object.assign(new Error('fetch failed'), { cause: { code: 'ENOTFOUND' } }))).toBe(false);
    expect(bindingMayHaveLanded(new BindError('WaitingForPod: pod a/b'))).toBe(false);
  });
});
