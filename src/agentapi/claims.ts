// Guard 6 for DRA (ADR 0043): before the kubelet starts a claim's containers, the node's agent asks whether the claim
// may be prepared on its node and with which atoms. Answered from the claim as the API server has it now (read afresh,
// never a cache) and the ledger's live rows for it: the allocation must be ours, for this node, and name exactly the
// atoms the ledger holds for the claim now (a Reservation's: inside its window).
import { ResourceClaimSchema } from '../core/dra-allocate.ts';
import { draDeviceName } from '../core/dra-names.ts';
import type { ClaimHolding } from '../db/claims.ts';
import { type ClaimPrepareAnswer } from './wire.ts';
import { DRA_DRIVER } from '../core/names.ts';

export type ClaimRefusalCode = 'CLAIM_NOT_FOUND' | 'CLAIM_NOT_ALLOCATED' | 'CLAIM_NOT_ON_NODE' | 'CLAIM_NOT_BOOKED' | 'CLAIM_OUTSIDE_WINDOW';
export type PrepareVerdict = { ok: true; answer: ClaimPrepareAnswer } | { ok: false; status: 403 | 404 | 409; code: ClaimRefusalCode; message: string };

const refuse = (status: 403 | 404 | 409, code: ClaimRefusalCode, message: string): PrepareVerdict => ({ ok: false, status, code, message });

/** Whether the allocation's node selector pins exactly `node` (matchFields metadata.name In [node], as we write it). */
function pinsNode(selector: unknown, node: string): boolean {
  const terms = (selector as { nodeSelectorTerms?: unknown } | undefined)?.nodeSelectorTerms;
  if (!Array.isArray(terms) || terms.length !== 1) return false;
  const t = terms[0] as { matchFields?: unknown; matchExpressions?: unknown };
  if (Array.isArray(t.matchExpressions) && t.matchExpressions.length) return false;
  const f = Array.isArray(t.matchFields) && t.matchFields.length === 1 ? (t.matchFields[0] as { key?: unknown; operator?: unknown; values?: unknown }) : undefined;
  return f?.key === 'metadata.name' && f.operator === 'In' && Array.isArray(f.values) && f.values.length === 1 && f.values[0] === node;
}

/** The verdict on preparing claim `claimUid` (read as `raw`) on `node`, given what the ledger holds for it. */
export function judgePrepare(i: { raw: unknown; claimUid: string; node: string; holding: ClaimHolding | undefined }): PrepareVerdict {
  const { claimUid, node, holding } = i;
  const parsed = i.raw === undefined ? undefined : ResourceClaimSchema.safeParse(i.raw);
  if (!parsed?.success || parsed.data.metadata.uid !== claimUid) return refuse(404, 'CLAIM_NOT_FOUND', `no ResourceClaim of uid ${claimUid} by that name`);
  const claim = parsed.data;
  const allocation = claim.status?.allocation;
  const results = allocation?.devices?.results ?? [];
  if (!allocation || results.length === 0) return refuse(409, 'CLAIM_NOT_ALLOCATED', `claim ${claim.metadata.namespace}/${claim.metadata.name} is not allocated`);
  const foreign = results.find((r) => r.driver !== DRA_DRIVER);
  if (foreign) return refuse(403, 'CLAIM_NOT_BOOKED', `device ${foreign.device} of the allocation is of driver ${foreign.driver}, not ${DRA_DRIVER}`);
  if (!pinsNode(allocation.nodeSelector, node) || results.some((r) => r.pool !== node)) {
    return refuse(409, 'CLAIM_NOT_ON_NODE', `claim ${claim.metadata.namespace}/${claim.metadata.name} is not allocated on node ${node}`);
  }
  if (!holding || holding.nodeId !== node) return refuse(403, 'CLAIM_NOT_BOOKED', `the ledger holds no atoms on node ${node} for claim ${claimUid}`);
  const booked = new Map(holding.devices.map((d) => [`${d.request}\n${draDeviceName(d.atomId)}`, d.atomId]));
  const stray = results.find((r) => !booked.has(`${r.request}\n${r.device}`));
  if (stray || new Set(results.map((r) => `${r.request}\n${r.device}`)).size !== booked.size) {
    return refuse(403, 'CLAIM_NOT_BOOKED', stray ? `device ${stray.device} (request ${stray.request}) is not booked to claim ${claimUid}` : `the allocation does not name every atom booked to claim ${claimUid}`);
  }
  if (!holding.now) {
    return holding.owner.kind === 'reservation'
      ? refuse(409, 'CLAIM_OUTSIDE_WINDOW', `reservation ${holding.owner.reservationId} does not hold its atoms now (outside its window)`)
      : refuse(403, 'CLAIM_NOT_BOOKED', `the booking of claim ${claimUid} does not hold now`);
  }
  return {
    ok: true,
    answer: {
      claimUid,
      bookedTo: holding.owner.kind === 'reservation' ? { kind: 'reservation', reservationId: holding.owner.reservationId } : { kind: 'pod', podUid: holding.owner.podUid },
      end: holding.end,
      devices: results.map((r) => ({ request: r.request, device: r.device, atomId: booked.get(`${r.request}\n${r.device}`)! })),
    },
  };
}
