// tokenReviewer against a fake API server: the user of an accepted token with its extra (the node-name claim of a
// pod-bound token), nothing for a refused one, and one review per token while cached.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeKubeApi, type FakeKubeApi } from '../../test/support/fake-kube-api.ts';
import { tokenReviewer } from './token-review.ts';

const NODE_CLAIM = 'authentication.kubernetes.io/node-name';
let fake: FakeKubeApi;
beforeAll(async () => {
  fake = await startFakeKubeApi({
    users: {
      'agent-token': { username: 'system:serviceaccount:better-compute-system:better-compute-agent', uid: 'u-a', groups: ['system:serviceaccounts'], extra: { [NODE_CLAIM]: ['node-a'] } },
    },
    allowed: () => false,
  });
});
afterAll(async () => fake.close());

describe('tokenReviewer', () => {
  it("an accepted token: its user and extra; a refused one: undefined; answers reused within the TTL", async () => {
    let t = 0;
    const review = tokenReviewer({ kubeConfig: fake.kubeConfig(), cacheTtlMs: 1000, monotonicNow: () => t });
    fake.seen.length = 0;
    const u = await review('agent-token');
    expect(u).toEqual({
      username: 'system:serviceaccount:better-compute-system:better-compute-agent',
      uid: 'u-a',
      groups: ['system:serviceaccounts'],
      extra: { [NODE_CLAIM]: ['node-a'] },
    });
    expect(await review('forged')).toBeUndefined();
    await review('agent-token');
    expect(fake.seen).toHaveLength(2);
    t = 1001;
    await review('agent-token');
    expect(fake.seen).toHaveLength(3);
    // A refused token is asked about again every time (nothing to reuse).
    expect(await review('forged')).toBeUndefined();
    expect(fake.seen).toHaveLength(4);
  });
});
