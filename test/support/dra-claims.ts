// ResourceClaims as the controller's allocator writes them, for the tests of the prepare endpoint and the node plugin.
import { allocationFor, ResourceClaimSchema } from '../../src/core/dra-allocate.ts';
import type { ClaimHolding } from '../../src/db/claims.ts';

/** The claim object the allocator would write for a holding: its requests, and status.allocation of its devices. */
export function allocatedClaim(h: ClaimHolding) {
  const base = ResourceClaimSchema.parse({
    metadata: { name: h.claimName, namespace: h.namespace, uid: h.claimUid },
    spec: { devices: { requests: [...new Set(h.devices.map((d) => d.request))].map((n) => ({ name: n, exactly: { deviceClassName: 'gpu.bettercompute.io' } })) } },
  });
  const a = allocationFor(base, h, Date.parse('2026-01-01T00:00:00Z'));
  if (!a.ok) throw new Error(a.message);
  return { ...base, status: { allocation: a.allocation } };
}
