// Guard 6 for DRA (src/agentapi/claims.ts, POST /agent/v1/nodes/{node}/claims/{uid}/prepare, ADR 0043) over a real
// ledger and a fake claim reader: a claim is prepared only on its node and only with the atoms the ledger holds for
// it now.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentUsernameFor, createAgentApiRouter, NODE_NAME_CLAIM, type AgentApiDeps } from '../../src/agentapi/router.ts';
import { AGENT_API_PREFIX, ClaimPrepareAnswerSchema } from '../../src/agentapi/wire.ts';
import { unauthenticated } from '../../src/http/errors.ts';
import { ResourceClaimSchema } from '../../src/core/dra-allocate.ts';
import { draDeviceName } from '../../src/core/dra-names.ts';
import { advanceClock } from '../../src/db/clock.ts';
import type { ClaimHolding } from '../../src/db/claims.ts';
import { Ledger } from '../../src/db/ledger.ts';
import { silentLogger } from '../../src/log.ts';
import { makeNode, makePool, reservation } from '../support/builders.ts';
import { useTestDatabase } from '../support/db.ts';
import { allocatedClaim } from '../support/dra-claims.ts';
import { DRA_DRIVER } from '../../src/core/names.ts';

const ctx = useTestDatabase();
const AGENT = agentUsernameFor('better-compute-system');
const authenticate: AgentApiDeps['authenticate'] = async (token) => {
  if (token.startsWith('agent:')) return { subject: AGENT, extra: { [NODE_NAME_CLAIM]: [token.slice(6)] } };
  throw unauthenticated('the bearer token is not valid');
};

/** The fake API server's claims, by namespace/name. */
const claims = new Map<string, unknown>();
let url: string;
let server: Server;

function claimObject(uid: string, name: string, results: { request: string; driver?: string; pool: string; device: string }[] | undefined, node = results?.[0]?.pool) {
  return ResourceClaimSchema.parse({
    metadata: { name, namespace: 'acme', uid },
    spec: { devices: { requests: [...new Set((results ?? [{ request: 'gpu' }]).map((r) => r.request))].map((n) => ({ name: n, exactly: { deviceClassName: 'gpu.bettercompute.io' } })) } },
    status: results
      ? { allocation: { devices: { results: results.map((r) => ({ driver: DRA_DRIVER, ...r })) }, nodeSelector: { nodeSelectorTerms: [{ matchFields: [{ key: 'metadata.name', operator: 'In', values: [node] }] }] } } }
      : {},
  });
}

const prepare = async (node: string, uid: string, name: string, token = `agent:${node}`) => {
  const res = await fetch(`${url}/nodes/${node}/claims/${uid}/prepare`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ namespace: 'acme', name }),
  });
  return { status: res.status, body: (await res.json()) as { error?: { code: string } } & Record<string, unknown> };
};

describe('DRA claim prepare (guard 6)', () => {
  let ledger: Ledger;
  let poolId: string;
  let onDemand: ClaimHolding;

  beforeAll(async () => {
    const app = express();
    app.use(
      AGENT_API_PREFIX,
      createAgentApiRouter({ db: ctx.db, clock: ctx.clock, log: silentLogger, authenticate, agentUsername: AGENT, readClaim: async (ns, name) => claims.get(`${ns}/${name}`) }),
    );
    server = createServer(app);
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}${AGENT_API_PREFIX}`;
    ledger = new Ledger(ctx.db);
    poolId = await makePool('prep').handoff('dra').create(ctx.db);
    await makeNode('prep-1').gpus(4).create(ctx.db, poolId);
    await makeNode('prep-2').gpus(4).create(ctx.db, poolId);
    const r = await ledger.bookClaim(
      { id: { claimUid: 'uid-od', namespace: 'acme', claimName: 'od', podUid: 'pod-od', podName: 'p' }, tenantId: 'acme', requests: [{ name: 'gpu', count: 2, class: 'gpu' }], nodeSelector: {}, durationSeconds: null },
      ctx.clock.now(),
    );
    if (!r.ok) throw new Error(r.message);
    onDemand = r.holding;
    claims.set('acme/od', allocatedClaim(onDemand));
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });

  it('a claim allocated as the ledger booked it is prepared with its atoms', async () => {
    const r = await prepare(onDemand.nodeId, 'uid-od', 'od');
    expect(r.status).toBe(200);
    const a = ClaimPrepareAnswerSchema.parse(r.body);
    expect(a).toEqual({
      claimUid: 'uid-od',
      bookedTo: { kind: 'pod', podUid: 'pod-od' },
      end: null,
      devices: onDemand.devices.map((d) => ({ request: 'gpu', device: draDeviceName(d.atomId), atomId: d.atomId })),
    });
  });

  it('a claim whose devices the ledger did not book is refused: 403 CLAIM_NOT_BOOKED', async () => {
    const node = onDemand.nodeId;
    const [{ rows: free }] = [await ctx.db.query(`SELECT id FROM devices WHERE node_id = $1 AND id <> ALL ($2) ORDER BY id LIMIT 1`, [node, onDemand.devices.map((d) => d.atomId)])];
    // A claim the ledger never heard of, allocated by someone else on a free atom.
    claims.set('acme/forged', claimObject('uid-forged', 'forged', [{ request: 'gpu', pool: node, device: draDeviceName(free[0].id) }]));
    expect(await prepare(node, 'uid-forged', 'forged')).toMatchObject({ status: 403, body: { error: { code: 'CLAIM_NOT_BOOKED' } } });
    // A claim of ours whose allocation was rewritten to name another atom, or one atom fewer, or another claim's atom.
    const swapped = allocatedClaim(onDemand);
    swapped.status.allocation = claimObject('uid-od', 'od', [
      { request: 'gpu', pool: node, device: draDeviceName(onDemand.devices[0]!.atomId) },
      { request: 'gpu', pool: node, device: draDeviceName(free[0].id) },
    ]).status!.allocation!;
    claims.set('acme/od', swapped);
    expect(await prepare(node, 'uid-od', 'od')).toMatchObject({ status: 403, body: { error: { code: 'CLAIM_NOT_BOOKED' } } });
    claims.set('acme/od', { ...swapped, status: claimObject('uid-od', 'od', [{ request: 'gpu', pool: node, device: draDeviceName(onDemand.devices[0]!.atomId) }]).status });
    expect(await prepare(node, 'uid-od', 'od')).toMatchObject({ status: 403, body: { error: { code: 'CLAIM_NOT_BOOKED' } } });
    claims.set('acme/copy', { ...allocatedClaim(onDemand), metadata: { name: 'copy', namespace: 'acme', uid: 'uid-copy' } });
    expect(await prepare(node, 'uid-copy', 'copy')).toMatchObject({ status: 403, body: { error: { code: 'CLAIM_NOT_BOOKED' } } });
    // Another driver's device in it.
    claims.set('acme/mixed', claimObject('uid-od', 'mixed', [{ request: 'gpu', driver: 'gpu.nvidia.com', pool: node, device: 'gpu-0' }]));
    expect(await prepare(node, 'uid-od', 'mixed')).toMatchObject({ status: 403, body: { error: { code: 'CLAIM_NOT_BOOKED' } } });
    claims.set('acme/od', allocatedClaim(onDemand));
  });

  it('not found, not allocated, not on this node; and only the node’s own agent may ask', async () => {
    const node = onDemand.nodeId;
    const other = node === 'prep-1' ? 'prep-2' : 'prep-1';
    expect(await prepare(node, 'uid-none', 'none')).toMatchObject({ status: 404, body: { error: { code: 'CLAIM_NOT_FOUND' } } });
    expect(await prepare(node, 'uid-other', 'od')).toMatchObject({ status: 404, body: { error: { code: 'CLAIM_NOT_FOUND' } } });
    claims.set('acme/pending', claimObject('uid-pending', 'pending', undefined));
    expect(await prepare(node, 'uid-pending', 'pending')).toMatchObject({ status: 409, body: { error: { code: 'CLAIM_NOT_ALLOCATED' } } });
    expect(await prepare(other, 'uid-od', 'od')).toMatchObject({ status: 409, body: { error: { code: 'CLAIM_NOT_ON_NODE' } } });
    expect(await prepare(node, 'uid-od', 'od', `agent:${other}`)).toMatchObject({ status: 403, body: { error: { code: 'FORBIDDEN' } } });
    const big = await fetch(`${url}/nodes/${node}/claims/uid-od/prepare`, {
      method: 'POST',
      headers: { authorization: `Bearer agent:${node}`, 'content-type': 'application/json' },
      body: JSON.stringify({ namespace: 'acme', name: 'x'.repeat(2000) }),
    });
    expect(big.status).toBe(413); // over the 1 KiB cap, refused before the token is reviewed
  });

  it("a Reservation's claim is prepared inside its window, refused after: 409 CLAIM_OUTSIDE_WINDOW; released: 403", async () => {
    const rsv = await ledger.reserve(reservation(poolId, { devices: [{ class: 'gpu', count: 1 }], duration: 60 }), ctx.clock.now());
    if (!rsv.ok) throw new Error(rsv.message);
    const r = await ledger.assignClaim({ id: { claimUid: 'uid-rsv', namespace: 'acme', claimName: 'rc', podUid: 'pod-rsv', podName: 'pr' }, reservationId: rsv.reservation.id, tenantId: 'acme', requests: [{ name: 'gpu', count: 1, class: 'any' }] });
    if (!r.ok) throw new Error(r.reason);
    claims.set('acme/rc', allocatedClaim(r.holding));
    const ok = await prepare(r.holding.nodeId, 'uid-rsv', 'rc');
    expect(ok.status).toBe(200);
    expect(ok.body).toMatchObject({ bookedTo: { kind: 'reservation', reservationId: rsv.reservation.id }, end: rsv.reservation.end });
    await advanceClock(ctx.db, 61_000);
    expect(await prepare(r.holding.nodeId, 'uid-rsv', 'rc')).toMatchObject({ status: 409, body: { error: { code: 'CLAIM_OUTSIDE_WINDOW' } } });
    await ledger.releaseClaim('uid-od');
    expect(await prepare(onDemand.nodeId, 'uid-od', 'od')).toMatchObject({ status: 403, body: { error: { code: 'CLAIM_NOT_BOOKED' } } });
  });
});
