// The GPU calendar's pages: sign-in, tenant choice, errors, and the calendar itself (docs/calendar.md). Rendered on
// the server from the masked layout (layout.ts); the client script (assets.ts) only adds in-place details and scrolls
// to now, so every page works without it.
import type { PoolCapacity } from '../db/capacity.ts';
import { day, hhmm, html, jsonBlock, page, utc, type Html } from './html.ts';
import type { Bar, DomainGroup, FreeCell, Tick } from './layout.ts';
import type { ReservationDetail } from './reservations.ts';
import type { SlotAnswer } from './slots.ts';

export const CALENDAR_PATH = '/calendar';
export const SESSION_PATH = '/calendar/session';
export const SIGNOUT_PATH = '/calendar/signout';

export interface Place {
  tenant?: string;
  pool?: string;
}

export function calendarHref(p: Place & { rsv?: string; gpus?: number; hours?: number }): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(p)) if (v !== undefined && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `${CALENDAR_PATH}?${s}` : CALENDAR_PATH;
}

const hidden = (p: Place) => html`${p.tenant ? html`<input type="hidden" name="tenant" value="${p.tenant}">` : ''}${p.pool ? html`<input type="hidden" name="pool" value="${p.pool}">` : ''}`;

export function signInView(p: Place, message?: string): string {
  return page(
    'Sign in · GPU calendar',
    html`<main id="main" class="narrow">
<h1>GPU calendar</h1>
<p>Sign in with a bearer token of the capacity API, for example <code>kubectl -n NAMESPACE create token capacity-reader</code>.
The token is kept in an HttpOnly session cookie of this page only, never in the address.</p>
${message ? html`<p class="error" role="alert">${message}</p>` : ''}
<form method="post" action="${SESSION_PATH}" class="signin">
<label for="token">Bearer token</label>
<input id="token" name="token" type="password" autocomplete="off" required spellcheck="false">
<label for="tenant">Tenant</label>
<input id="tenant" name="tenant" value="${p.tenant ?? ''}" required>
${p.pool ? html`<input type="hidden" name="pool" value="${p.pool}">` : ''}
<button type="submit">Sign in</button>
</form>
</main>`,
  );
}

export function chooseTenantView(message?: string): string {
  return page(
    'GPU calendar',
    html`<main id="main" class="narrow">
<h1>GPU calendar</h1>
${message ? html`<p class="error" role="alert">${message}</p>` : ''}
<form method="get" action="${CALENDAR_PATH}">
<label for="tenant">Tenant</label> <input id="tenant" name="tenant" required> <button type="submit">Show</button>
</form>
${signOutForm()}
</main>`,
  );
}

export function errorView(status: number, message: string, p: Place): string {
  return page(
    `Error ${status} · GPU calendar`,
    html`<main id="main" class="narrow">
<h1>GPU calendar</h1>
<p class="error" role="alert">${status}: ${message}</p>
<p><a href="${calendarHref({ tenant: p.tenant })}">Back</a></p>
${signOutForm()}
</main>`,
  );
}

const signOutForm = () => html`<form method="post" action="${SIGNOUT_PATH}" class="signout"><button type="submit">Sign out</button></form>`;

export interface CalendarModel {
  tenantId: string;
  pool: { id: string; name: string; topologyKey: string };
  pools: PoolCapacity[];
  from: number;
  to: number;
  now: number;
  groups: DomainGroup[];
  bars: Bar[];
  free: FreeCell[];
  ticks: Tick[];
  nowPct: number | undefined;
  hours: number;
  details: ReservationDetail[];
  selected?: ReservationDetail;
  slots?: SlotAnswer;
}

export function calendarView(m: CalendarModel): string {
  const place = { tenant: m.tenantId, pool: m.pool.name };
  return page(
    `${m.pool.name} · GPU calendar`,
    html`<header class="top">
<h1>GPU calendar <span class="sub">pool ${m.pool.name}, tenant ${m.tenantId}</span></h1>
${signOutForm()}
</header>
<div class="layout">
<main id="main">
<p class="range">${utc(m.from)} to ${utc(m.to)} · now ${utc(m.now)} · nodes grouped by <code>${m.pool.topologyKey}</code></p>
${legend()}
${grid(m, place)}
${findSlotForm(m, place)}
</main>
<aside class="side">
${detailPanel(m.selected)}
${summaryTable(m)}
</aside>
</div>
${jsonBlock('calendar-details', m.details)}`,
    { script: true },
  );
}

const legend = () => html`<ul class="legend" aria-label="Legend">
<li><span class="swatch own-reservation"></span> your Reservation</li>
<li><span class="swatch own-pod"></span> your on-demand pod</li>
<li><span class="swatch booked"></span> booked by another tenant</li>
<li><span class="swatch now"></span> now</li>
</ul>`;

function grid(m: CalendarModel, place: Place): Html {
  return html`<div class="scroller" id="scroller" tabindex="0" role="region" aria-label="Calendar of pool ${m.pool.name}: nodes by hour; scroll sideways for 7 days">
<div class="grid" style="--hours:${m.hours}" data-from="${m.from}" data-to="${m.to}">
<div class="row axis" aria-hidden="true"><div class="label">UTC</div><div class="track">${m.ticks.map(
    (t) => html`<span class="tick${t.day ? ' day' : ''}" style="left:${t.leftPct}%">${t.day ? day(t.at) : hhmm(t.at)}</span>`,
  )}${nowMark(m, true)}</div></div>
<div class="row free" role="group" aria-label="Free GPUs per hour"><div class="label">free GPUs</div><div class="track">${m.free.map(
    (c) => html`<span class="cell ${c.level}" style="left:${c.leftPct}%;width:${c.widthPct}%" title="${utc(c.start)}: ${c.free} of ${c.allocatable} free" data-start="${c.start}" data-free="${c.free}">${c.free}</span>`,
  )}${nowMark(m)}</div></div>
${m.groups.map(
    (g) => html`<div class="domain" role="group" aria-label="placement domain ${g.domain}">
<div class="row domain-name"><div class="label">${g.domain}</div><div class="track"></div></div>
${g.nodes.map((n) => nodeRow(n, m.bars.filter((b) => b.nodeId === n.id), m, place))}
</div>`,
  )}
</div>
</div>`;
}

/** The "now" line, drawn in every track (the axis's one is named, for the script's scroll and for screen readers). */
function nowMark(m: CalendarModel, named = false): Html | '' {
  if (m.nowPct === undefined) return '';
  return named
    ? html`<span class="now-mark" id="now" style="left:${m.nowPct}%" role="img" aria-label="now, ${utc(m.now)}"></span>`
    : html`<span class="now-mark" style="left:${m.nowPct}%" aria-hidden="true"></span>`;
}

function nodeRow(n: { id: string; atoms: number }, bars: Bar[], m: CalendarModel, place: Place): Html {
  const lanes = Math.max(1, ...bars.map((b) => b.lane + 1));
  return html`<div class="row node" role="group" aria-label="node ${n.id}, ${n.atoms} GPUs" data-node="${n.id}">
<div class="label">${n.id} <span class="muted">(${n.atoms})</span></div>
<div class="track" style="--lanes:${lanes}">${bars.map((b) => bar(b, m, place))}${nowMark(m)}</div>
</div>`;
}

function bar(b: Bar, m: CalendarModel, place: Place): Html {
  const style = `left:${b.leftPct}%;width:${b.widthPct}%;--lane:${b.lane}`;
  const when = `${utc(b.start)}${b.clippedStart ? ' (earlier)' : ''} to ${b.clippedEnd ? 'beyond the window' : utc(b.end)}`;
  const data = html`data-node="${b.nodeId}" data-start="${b.start}" data-end="${b.end}" data-atoms="${b.atomCount}"`;
  if (b.kind === 'booked') {
    return html`<span class="bar booked" style="${style}" ${data} tabindex="0" role="img" aria-label="booked: ${b.atomCount} GPUs, ${when}" title="booked">booked</span>`;
  }
  if (b.kind === 'own-pod') {
    return html`<span class="bar own-pod" style="${style}" ${data} tabindex="0" role="img" aria-label="your on-demand pod: ${b.atomCount} GPUs, ${when}" title="on-demand pod">pod</span>`;
  }
  const d = m.details.find((x) => x.id === b.reservationId);
  const label = d?.name ?? b.reservationId ?? '';
  return html`<a class="bar own-reservation" style="${style}" ${data} data-rsv="${b.reservationId}" href="${calendarHref({ ...place, rsv: b.reservationId })}#detail" aria-label="Reservation ${label}: ${b.atomCount} GPUs, ${when}; show details">${label}</a>`;
}

function detailPanel(d: ReservationDetail | undefined): Html {
  return html`<section id="detail" class="detail" aria-live="polite" aria-labelledby="detail-h" tabindex="-1">
<h2 id="detail-h">Reservation</h2>
<div id="detail-body">${d ? detailBody(d) : html`<p class="muted">Select one of your bars (click, or Tab to it and press Enter).</p>`}</div>
</section>`;
}

/** The same markup as the client script builds (assets.ts), so that the panel reads the same with or without it. */
export function detailBody(d: ReservationDetail): Html {
  return html`<dl>
<dt>id</dt><dd data-field="id">${d.id}</dd>
${d.name ? html`<dt>name</dt><dd data-field="name">${d.name}</dd>` : ''}
<dt>window</dt><dd data-field="window">${utc(d.start)} to ${utc(d.end)}</dd>
<dt>state</dt><dd data-field="state">${d.state}${d.spot ? ' (spot)' : ''}</dd>
<dt>atoms</dt><dd data-field="atoms">${d.atoms.map((a) => html`<div>${a.nodeId}: ${a.atoms.join(', ')}</div>`)}</dd>
<dt>conditions</dt><dd data-field="conditions">${d.conditions.map(
    (c) => html`<div>${c.type}=${c.status}${c.reason ? html` (${c.reason})` : ''}${c.message ? html`: ${c.message}` : ''}</div>`,
  )}</dd>
</dl>`;
}

function findSlotForm(m: CalendarModel, place: Place): Html {
  const q = m.slots?.query;
  return html`<section class="find" aria-labelledby="find-h">
<h2 id="find-h">Find a slot</h2>
<form method="get" action="${CALENDAR_PATH}#find-h" class="find-form">
${hidden(place)}
<label for="gpus">GPUs</label> <input id="gpus" name="gpus" type="number" min="1" max="64" required value="${q?.gpus ?? 1}">
<label for="hours">hours</label> <input id="hours" name="hours" type="number" min="1" max="168" required value="${q?.hours ?? 1}">
<button type="submit">Find</button>
</form>
${m.slots ? slotList(m.slots) : ''}
</section>`;
}

function slotList(a: SlotAnswer): Html {
  return html`<div id="slots" aria-live="polite">
${a.nowReason ? html`<p class="muted" data-now-reason>Not from now: ${a.nowReason}</p>` : ''}
${a.slots.length === 0 ? html`<p class="error">No window for ${a.query.gpus} GPUs for ${a.query.hours} h in the calendar's range.</p>` : ''}
<ol class="slots">${a.slots.map(
    (s) => html`<li class="slot" data-start="${s.start}" data-from-now="${s.fromNow}">
<strong>${s.fromNow ? 'now' : utc(s.start)}</strong> to ${utc(s.end)}${s.gangDomain ? html` · domain ${s.gangDomain}` : ''}
<ul>${s.candidates.map((c) => html`<li class="candidate" data-node="${c.nodeId}" data-atoms="${c.atoms.join(',')}">${c.nodeId}: ${c.atoms.length} GPUs (${c.atoms.join(', ')})</li>`)}</ul>
</li>`,
  )}</ol>
</div>`;
}

function summaryTable(m: CalendarModel): Html {
  return html`<section class="summary" aria-labelledby="summary-h">
<h2 id="summary-h">Capacity by pool</h2>
<table>
<caption class="muted">GPUs now</caption>
<thead><tr><th scope="col">pool</th><th scope="col"><abbr title="allocatable">GPUs</abbr></th><th scope="col"><abbr title="allocated">in use</abbr></th><th scope="col">reserved</th><th scope="col"><abbr title="available">free</abbr></th></tr></thead>
<tbody>${m.pools.map((p) => {
    const gpu = p.capacity.find((r) => r.resource === 'gpu');
    const current = p.poolId === m.pool.id;
    return html`<tr${current ? html` class="current" aria-current="page"` : ''} data-pool="${p.name}"><th scope="row"><a href="${calendarHref({ tenant: m.tenantId, pool: p.name })}">${p.name}</a></th>
<td>${gpu?.allocatable ?? 0}</td><td>${gpu?.allocated ?? 0}</td><td>${gpu?.reserved ?? 0}</td><td>${gpu?.available ?? 0}</td></tr>`;
  })}</tbody>
</table>
</section>`;
}
