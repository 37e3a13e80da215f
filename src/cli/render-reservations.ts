// Human output of `better-compute reservations`: the list table and one reservation's details. Pure: data in, strings out.
import type { ReservationRow } from '../db/reservations.ts';
import type { ReservationView } from '../db/ledger.ts';
import { formatTime, table } from './render.ts';

/** A reservation as the CLI shows it: the ledger's row, its Reservation's name when known, and (get) its allocations. */
export interface ReservationDetails extends ReservationRow {
  /** `namespace/name` of the Reservation resource that booked it, when the cluster could be asked; else null. */
  name: string | null;
  allocations?: ReservationView['allocations'];
  hold?: ReservationView['hold'];
}

function stateText(r: Pick<ReservationDetails, 'state' | 'leaseExpiresAt' | 'spot'>): string {
  const s = r.state === 'held' && r.leaseExpiresAt !== null ? `held until ${formatTime(r.leaseExpiresAt)}` : r.state;
  return r.spot ? `${s}, spot` : s;
}

/** `wide`: also the pool's id, the nodes and the Reservation's uid (the ledger's idempotency key). */
export function renderReservationList(tenantId: string, rows: readonly ReservationDetails[], all: boolean, o: { wide?: boolean } = {}): string {
  const what = all ? 'reservations' : 'live reservations';
  if (rows.length === 0) return `Tenant ${tenantId}: no ${what}\n`;
  const body = table(
    ['ID', 'NAME', 'POOL', 'STATE', 'START', 'END', 'ATOMS', ...(o.wide ? ['POOL ID', 'NODES', 'UID'] : [])],
    rows.map((r) => [
      r.id,
      r.name ?? '-',
      r.pool,
      stateText(r),
      formatTime(r.start),
      formatTime(r.end),
      r.atoms,
      ...(o.wide ? [r.poolId, r.nodes.join(',') || '-', r.idempotencyKey] : []),
    ]),
  );
  return `Tenant ${tenantId}: ${rows.length} ${rows.length === 1 ? what.replace(/s$/, '') : what}\n\n${body}\n`;
}

/** `wide`: also the Reservation's uid (the ledger's idempotency key). */
export function renderReservation(r: ReservationDetails, o: { wide?: boolean } = {}): string {
  const fields: [string, string][] = [
    ['Name', r.name ?? '-'],
    ['Pool', `${r.pool} (${r.poolId})`],
    ['State', stateText(r)],
    ['Window', `${formatTime(r.start)} to ${formatTime(r.end)}`],
  ];
  if (r.state === 'held') {
    fields.push(['Confirm', `its first pod that binds confirms it, or: better-compute reservations confirm ${r.id}`]);
  }
  if (r.hold?.confirmedAt != null) {
    fields.push(['Confirmed', `${formatTime(r.hold.confirmedAt)}${r.hold.confirmedByPod ? ` by pod ${r.hold.confirmedByPod}` : ''}`]);
  }
  fields.push(['Atoms', `${r.atoms} on ${r.nodes.length} node${r.nodes.length === 1 ? '' : 's'}`]);
  if (o.wide) fields.push(['UID', r.idempotencyKey]);
  const width = Math.max(...fields.map(([k]) => k.length)) + 1;
  const lines = [`Reservation ${r.id}`, ...fields.map(([k, v]) => `${`${k}:`.padEnd(width)}  ${v}`)];
  const allocs = r.allocations ?? [];
  if (allocs.length > 0) {
    lines.push('', table(['NODE', 'ATOMS', 'ATOM IDS'], allocs.map((a) => [a.nodeId, a.atoms.length, a.atoms.join(',')])));
  }
  return `${lines.join('\n')}\n`;
}
