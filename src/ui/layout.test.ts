import { describe, expect, it } from 'vitest';
import type { CalendarBooking, CalendarReservation } from '../db/calendar.ts';
import { escapeHtml, html, jsonBlock } from './html.ts';
import { assignLanes, freeCells, groupByDomain, layoutBars, maskBooking, nowMarker, place, ticks, UNLABELLED } from './layout.ts';
import { directoryOf, reservationDetails } from './reservations.ts';
import { findSlots, laterStarts, slotInput } from './slots.ts';
import { calendarView, type CalendarModel } from './views.ts';
import type { Reservation } from '../kube/types.ts';

const H = 3_600_000;
const POOL = 'pool_0123456789abcdefghjkmnpqrs';
const FROM = Date.UTC(2026, 11, 3, 6);
const W = { from: FROM, to: FROM + 24 * H };

const booking = (over: Partial<CalendarBooking>): CalendarBooking => ({
  allocationId: 'alc_1',
  kind: 'reservation',
  nodeId: 'n1',
  tenantId: 'team-a',
  reservationId: 'rsv_01',
  start: FROM + 2 * H,
  end: FROM + 4 * H,
  atoms: ['GPU-a', 'GPU-b'],
  ...over,
});

describe('bookings → bars', () => {
  it('places a span in percent of the window, clipped to it', () => {
    expect(place(FROM + 6 * H, FROM + 12 * H, W)).toEqual({ leftPct: 25, widthPct: 25 });
    expect(place(FROM - 5 * H, FROM + 6 * H, W)).toEqual({ leftPct: 0, widthPct: 25 });
    expect(place(FROM + 18 * H, Infinity, W)).toEqual({ leftPct: 75, widthPct: 25 });
  });

  it('keeps the caller’s own reservation with its id and atoms', () => {
    const [bar] = layoutBars([booking({})], 'team-a', W);
    expect(bar).toMatchObject({ kind: 'own-reservation', reservationId: 'rsv_01', atoms: ['GPU-a', 'GPU-b'], atomCount: 2, lane: 0, clippedStart: false, clippedEnd: false });
    expect(bar!.leftPct).toBeCloseTo((2 / 24) * 100, 2);
  });

  it('masks another tenant’s booking: "booked", no tenant, no reservation id, no atom ids', () => {
    const bar = maskBooking(booking({ tenantId: 'team-b', reservationId: 'rsv_secret', atoms: ['GPU-x'] }), 'team-a', W);
    expect(bar.kind).toBe('booked');
    expect(bar.atomCount).toBe(1);
    expect(JSON.stringify(bar)).not.toMatch(/team-b|rsv_secret|GPU-x/);
    expect(Object.keys(bar)).not.toContain('reservationId');
  });

  it('an own on-demand pod and an open-ended booking', () => {
    const [bar] = layoutBars([booking({ kind: 'pod', reservationId: null, end: Infinity })], 'team-a', W);
    expect(bar).toMatchObject({ kind: 'own-pod', clippedEnd: true, end: W.to });
    expect(bar!.reservationId).toBeUndefined();
  });

  it('leaves out bookings outside the window', () => {
    expect(layoutBars([booking({ start: W.to, end: W.to + H }), booking({ start: W.from - 2 * H, end: W.from })], 'team-a', W)).toEqual([]);
  });

  it('overlapping bars on one node go to separate lanes; a later one reuses a free lane; nodes are independent', () => {
    const lanes = assignLanes([
      { nodeId: 'n1', start: 0, end: 10 },
      { nodeId: 'n1', start: 5, end: 15 },
      { nodeId: 'n1', start: 10, end: 20 },
      { nodeId: 'n2', start: 5, end: 6 },
    ]);
    expect(lanes.map((l) => `${l.nodeId}:${l.start}:${l.lane}`)).toEqual(['n1:0:0', 'n1:5:1', 'n1:10:0', 'n2:5:0']);
  });
});

describe('buckets → free capacity', () => {
  it('one cell per bucket with its level', () => {
    const cells = freeCells(
      [
        { start: FROM, end: FROM + H, free: 8 },
        { start: FROM + H, end: FROM + 2 * H, free: 3 },
        { start: FROM + 2 * H, end: FROM + 3 * H, free: 0 },
      ],
      8,
      W,
    );
    expect(cells.map((c) => c.level)).toEqual(['all', 'some', 'none']);
    expect(cells[1]).toMatchObject({ free: 3, allocatable: 8 });
    expect(cells[1]!.leftPct).toBeCloseTo(100 / 24, 2);
  });
});

describe('nodes by domain, ticks, now', () => {
  it('groups by domain in name order, unlabelled last', () => {
    const g = groupByDomain([
      { id: 'n3', domain: null, atoms: 8 },
      { id: 'n2', domain: 'zone-b', atoms: 8 },
      { id: 'n1', domain: 'zone-b', atoms: 8 },
      { id: 'n0', domain: 'zone-a', atoms: 8 },
    ]);
    expect(g.map((x) => [x.domain, x.nodes.map((n) => n.id)])).toEqual([
      ['zone-a', ['n0']],
      ['zone-b', ['n1', 'n2']],
      [UNLABELLED, ['n3']],
    ]);
  });

  it('ticks every 3 hours with day boundaries marked; now only inside the window', () => {
    const t = ticks(W);
    expect(t).toHaveLength(8);
    expect(t.filter((x) => x.day).map((x) => new Date(x.at).toISOString())).toEqual(['2026-12-04T00:00:00.000Z']);
    expect(nowMarker(FROM + 12 * H, W)).toBe(50);
    expect(nowMarker(W.to, W)).toBeUndefined();
  });
});

const rsv = (over: Partial<CalendarReservation> = {}): CalendarReservation => ({
  id: 'rsv_01',
  tenantId: 'team-a',
  idempotencyKey: 'uid-1',
  state: 'held',
  spot: false,
  start: FROM + 2 * H,
  end: FROM + 4 * H,
  preemptAt: null,
  repairShort: 0,
  repairReason: null,
  ...over,
});

describe('reservation details', () => {
  const cr = { metadata: { uid: 'uid-1', name: 'train-now', namespace: 'demo-team-a' }, spec: {}, status: { conditions: [{ type: 'Reserved', status: 'True', reason: 'Booked' }] } } as unknown as Reservation;

  it('names it from the directory (a recurring window’s key too) and takes the object’s conditions', () => {
    const dir = directoryOf(() => [cr]);
    const [d] = reservationDetails([rsv({ idempotencyKey: 'uid-1:2026-12-04T09:00:00.000Z' })], [booking({}), booking({ nodeId: 'n0', atoms: ['GPU-z'] })], dir);
    expect(d).toMatchObject({ id: 'rsv_01', name: 'demo-team-a/train-now', conditionsFrom: 'kubernetes', conditions: [{ type: 'Reserved', status: 'True', reason: 'Booked' }] });
    expect(d!.atoms).toEqual([
      { nodeId: 'n0', atoms: ['GPU-z'] },
      { nodeId: 'n1', atoms: ['GPU-a', 'GPU-b'] },
    ]);
  });

  it('without an object: conditions from the ledger', () => {
    const [d] = reservationDetails([rsv({ state: 'confirmed', spot: true, preemptAt: FROM + 3 * H })], [], directoryOf(() => []));
    expect(d!.name).toBeUndefined();
    expect(d!.conditions.map((c) => `${c.type}=${c.status}`)).toEqual(['Reserved=True', 'PreemptionNotice=True']);
  });
});

describe('find a slot', () => {
  it('later starts are bucket starts after now with enough free GPUs', () => {
    const b = [0, 1, 2, 3].map((i) => ({ start: FROM + i * H, free: [8, 1, 4, 8][i]! }));
    expect(laterStarts(b, FROM + 10, 4)).toEqual([FROM + 2 * H, FROM + 3 * H]);
  });

  it('asks the placer from now first (no start), then later starts, up to three windows', async () => {
    const asked: (number | undefined)[] = [];
    const answer = await findSlots(
      async (input) => {
        asked.push(input.start);
        const fits = input.start !== FROM + 2 * H;
        return fits ? { fits, candidates: [{ nodeId: 'n1', atoms: ['a'], score: 1 }] } : { fits, candidates: [], reason: 'busy' };
      },
      { tenantId: 'team-a', poolId: POOL, query: { gpus: 1, hours: 2 }, now: FROM + 10, buckets: [1, 2, 3, 4, 5].map((i) => ({ start: FROM + i * H, free: 8 })) },
    );
    expect(asked).toEqual([undefined, FROM + H, FROM + 2 * H, FROM + 3 * H]);
    expect(answer.slots.map((s) => [s.fromNow, s.start, s.end - s.start])).toEqual([
      [true, FROM + 10, 2 * H],
      [false, FROM + H, 2 * H],
      [false, FROM + 3 * H, 2 * H],
    ]);
  });

  it('says why it does not fit now', async () => {
    const answer = await findSlots(async () => ({ fits: false, candidates: [], reason: 'no node has 9 GPUs' }), {
      tenantId: 'team-a',
      poolId: POOL,
      query: { gpus: 9, hours: 1 },
      now: FROM,
      buckets: [],
    });
    expect(answer).toMatchObject({ slots: [], nowReason: 'no node has 9 GPUs', previews: 1 });
  });

  it('the preview input is the API’s own (validated)', () => {
    expect(slotInput('team-a', POOL, { gpus: 2, hours: 3 })).toMatchObject({ devices: [{ class: 'gpu', count: 2 }], duration: 10_800, binding: 'hold' });
  });
});

describe('html', () => {
  it('escapes interpolations, and JSON blocks cannot close their script element', () => {
    expect(html`<p title="${'"><script>'}">${'<b>&'}</p>`.text).toBe('<p title="&quot;&gt;&lt;script&gt;">&lt;b&gt;&amp;</p>');
    expect(escapeHtml("'")).toBe('&#39;');
    expect(jsonBlock('x', { s: '</script><script>alert(1)</script>' }).text).not.toContain('</script><script>');
  });

  it('the rendered page carries no trace of another tenant’s booking but "booked"', () => {
    const bookings = [booking({}), booking({ allocationId: 'alc_2', tenantId: 'team-b', reservationId: 'rsv_other', atoms: ['GPU-secret'] })];
    const m: CalendarModel = {
      tenantId: 'team-a',
      pool: { id: POOL, name: 'demo', topologyKey: 'zone' },
      pools: [],
      ...W,
      now: FROM + H,
      groups: groupByDomain([{ id: 'n1', domain: null, atoms: 8 }]),
      bars: layoutBars(bookings, 'team-a', W),
      free: [],
      ticks: ticks(W),
      nowPct: nowMarker(FROM + H, W),
      hours: 24,
      details: reservationDetails([rsv()], bookings, undefined),
    };
    const page = calendarView(m);
    expect(page).toContain('data-rsv="rsv_01"');
    expect(page).toMatch(/class="bar booked"[^>]*>booked</);
    expect(page).not.toMatch(/team-b|rsv_other|GPU-secret/);
  });
});
