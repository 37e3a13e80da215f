// The GPU calendar's routes on the capacity API listener (docs/calendar.md, docs/adr/0039-the-gpu-calendar.md): the
// page, its sign-in and sign-out, and its stylesheet and script. Same authentication and authorization as the API:
// the bearer token (from the session cookie set by the sign-in, or an Authorization header) is authenticated by the
// API's Authorizer, and every read is authorized as `compute:capacity:read` on the tenant (the summary) and the pool.
import express, { type Request, type RequestHandler, type Response } from 'express';
import { z } from 'zod';
import { HOUR_MS, MAX_TIMELINE_SPAN_MS, TenantId } from '../core/schemas.ts';
import { errorFields, type Logger } from '../log.ts';
import { type Authorizer } from '../api/authz.ts';
import type { CapacityService } from '../api/capacity-service.ts';
import { ApiError, toErrorResponse } from '../http/errors.ts';
import { CALENDAR_CSS, CALENDAR_JS } from './assets.ts';
import { ASSET_PATHS } from './html.ts';
import { freeCells, groupByDomain, layoutBars, nowMarker, ticks } from './layout.ts';
import { reservationDetails, type ReservationDirectory } from './reservations.ts';
import { findSlots, SlotQuery } from './slots.ts';
import { CALENDAR_PATH, calendarHref, calendarView, chooseTenantView, errorView, SESSION_PATH, signInView, SIGNOUT_PATH, type Place } from './views.ts';
import { bearerToken, type Principal } from '../http/identity.ts';

export interface CalendarDeps {
  service: CapacityService;
  authorizer: Authorizer;
  log: Logger;
  /** Names and conditions of Kubernetes Reservations (the controller's informer); without it bars show ledger ids. */
  directory?: ReservationDirectory;
}

/** The session cookie: the bearer token, HttpOnly, for the calendar's paths only. */
export const SESSION_COOKIE = 'bc_calendar_token';
/** How far before now the calendar starts (so that now is marked and recent bookings show). */
export const LOOKBACK_MS = 2 * HOUR_MS;

const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const PageQuery = z.object({
  tenant: TenantId.optional(),
  pool: z.string().min(1).max(128).optional(),
  rsv: z.string().min(1).max(64).optional(),
  gpus: z.string().max(8).optional(),
  hours: z.string().max(8).optional(),
});

const SignIn = z.object({
  token: z.string().trim().min(1).max(16_384),
  tenant: z.union([TenantId, z.literal('')]).optional(),
  pool: z.string().max(128).optional(),
});

function cookies(req: Request): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (req.get('cookie') ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i > 0) out.set(part.slice(0, i).trim(), decodeURIComponent(part.slice(i + 1).trim()));
  }
  return out;
}

/** The Authorization header's bearer token, else the session cookie's. */
export function requestToken(req: Request): string | undefined {
  return bearerToken(req.get('authorization')) ?? (cookies(req).get(SESSION_COOKIE) || undefined);
}

function sessionCookie(req: Request, token: string | null): string {
  const attrs = ['HttpOnly', 'SameSite=Strict', `Path=${CALENDAR_PATH}`, ...(req.secure ? ['Secure'] : [])];
  return token === null ? [`${SESSION_COOKIE}=`, 'Max-Age=0', ...attrs].join('; ') : [`${SESSION_COOKIE}=${encodeURIComponent(token)}`, ...attrs].join('; ');
}

function sendHtml(res: Response, status: number, body: string): void {
  res.status(status).set({
    'Content-Type': 'text/html; charset=utf-8',
    'Content-Security-Policy': CSP,
    'X-Content-Type-Options': 'nosniff',
    'X-Frame-Options': 'DENY',
    // same-origin, not no-referrer: with no-referrer a browser posts the sign-in form with `Origin: null`.
    'Referrer-Policy': 'same-origin',
    'Cache-Control': 'no-store',
  });
  res.send(body);
}

function queryOf(req: Request): z.infer<typeof PageQuery> {
  const i = req.originalUrl.indexOf('?');
  const params = new URLSearchParams(i < 0 ? '' : req.originalUrl.slice(i + 1));
  const parsed = PageQuery.safeParse(Object.fromEntries(params));
  if (!parsed.success) throw new ApiError('INVALID_INPUT', `invalid query: ${parsed.error.issues.map((x) => `${x.path.join('.')}: ${x.message}`).join('; ')}`);
  return parsed.data;
}

/** A sign-in from another origin is refused (login CSRF); browsers send Origin on every POST. */
function sameOrigin(req: Request): boolean {
  const origin = req.get('origin');
  if (!origin) return true;
  try {
    return new URL(origin).host === req.get('host');
  } catch {
    return false;
  }
}

export function mountCalendar(app: express.Express, deps: CalendarDeps): void {
  const route = (path: string): RequestHandler => (_req, res, next) => {
    (res.locals as { route?: string }).route = path;
    next();
  };
  app.get(ASSET_PATHS.css, route(ASSET_PATHS.css), (_req, res) => {
    res.type('text/css').set('Cache-Control', 'max-age=300').send(CALENDAR_CSS);
  });
  app.get(ASSET_PATHS.js, route(ASSET_PATHS.js), (_req, res) => {
    res.type('text/javascript').set('Cache-Control', 'max-age=300').send(CALENDAR_JS);
  });
  app.get(CALENDAR_PATH, route(CALENDAR_PATH), (req, res) => servePage(deps, req, res));
  const form = express.urlencoded({ extended: false, limit: '32kb', type: () => true });
  app.post(SESSION_PATH, route(SESSION_PATH), form, (req, res) => signIn(deps, req, res));
  app.post(SIGNOUT_PATH, route(SIGNOUT_PATH), (req, res) => {
    res.set('Set-Cookie', sessionCookie(req, null)).redirect(303, CALENDAR_PATH);
  });
}

async function signIn(deps: CalendarDeps, req: Request, res: Response): Promise<void> {
  const parsed = SignIn.safeParse(req.body ?? {});
  const place: Place = parsed.success ? { ...(parsed.data.tenant ? { tenant: parsed.data.tenant } : {}), ...(parsed.data.pool ? { pool: parsed.data.pool } : {}) } : {};
  if (!sameOrigin(req)) return sendHtml(res, 403, errorView(403, 'a sign-in from another site is refused', place));
  if (!parsed.success) return sendHtml(res, 400, signInView(place, 'give a token and a tenant'));
  try {
    await deps.authorizer.authenticate(parsed.data.token);
  } catch (e) {
    if (e instanceof ApiError && e.code === 'UNAUTHENTICATED') return sendHtml(res, 401, signInView(place, 'the token was not accepted'));
    throw e;
  }
  res.set('Set-Cookie', sessionCookie(req, parsed.data.token)).redirect(303, calendarHref(place));
}

async function servePage(deps: CalendarDeps, req: Request, res: Response): Promise<void> {
  let place: Place = {};
  try {
    const q = queryOf(req);
    place = { ...(q.tenant ? { tenant: q.tenant } : {}), ...(q.pool ? { pool: q.pool } : {}) };
    const token = requestToken(req);
    if (token === undefined) return sendHtml(res, 401, signInView(place));
    const principal = await deps.authorizer.authenticate(token);
    if (!q.tenant) return sendHtml(res, 200, chooseTenantView());
    sendHtml(res, 200, await renderCalendar(deps, principal, q));
  } catch (e) {
    const { status, body, internal } = toErrorResponse(e);
    if (internal) deps.log.error('calendar failed', { path: req.path, ...errorFields(e) });
    if (status === 401) {
      res.set('Set-Cookie', sessionCookie(req, null));
      return sendHtml(res, 401, signInView(place, 'the token was not accepted; sign in again'));
    }
    sendHtml(res, status, errorView(status, body.error.message, place));
  }
}

async function renderCalendar(deps: CalendarDeps, principal: Principal, q: z.infer<typeof PageQuery> & { tenant?: string }): Promise<string> {
  const { service, authorizer } = deps;
  const tenantId = q.tenant!;
  await authorizer.authorizeCapacityRead(principal, { tenantId });
  const summary = await service.summary({ tenantId });
  const chosen = q.pool ? summary.pools.find((p) => p.name === q.pool || p.poolId === q.pool) : summary.pools[0];
  if (!chosen) throw new ApiError('NOT_FOUND', q.pool ? `pool ${q.pool} not found` : `tenant ${tenantId} sees no pools`);
  const poolId = chosen.poolId;
  await authorizer.authorizeCapacityRead(principal, { tenantId, poolId });
  const info = await service.visiblePool(poolId, tenantId);
  const now = service.now();
  const from = Math.floor(now / HOUR_MS) * HOUR_MS - LOOKBACK_MS;
  const w = { from, to: from + MAX_TIMELINE_SPAN_MS };
  const [timeline, rows] = await Promise.all([
    service.timeline({ tenantId, poolId, from: w.from, to: w.to, stepMinutes: 60 }),
    service.calendar({ tenantId, poolId, ...w }),
  ]);
  const details = reservationDetails(rows.reservations, rows.bookings, deps.directory);
  const slotQuery = q.gpus !== undefined || q.hours !== undefined ? SlotQuery.safeParse({ gpus: q.gpus, hours: q.hours }) : undefined;
  if (slotQuery && !slotQuery.success) throw new ApiError('INVALID_INPUT', 'find a slot: GPUs 1 to 64 and hours 1 to 168, whole numbers');
  const slots = slotQuery?.data
    ? await findSlots((input) => service.preview(input), { tenantId, poolId, query: slotQuery.data, now, buckets: timeline.buckets })
    : undefined;
  const selected = q.rsv ? details.find((d) => d.id === q.rsv) : undefined;
  return calendarView({
    tenantId,
    pool: { id: poolId, name: chosen.name, topologyKey: info.topologyKey },
    pools: summary.pools,
    ...w,
    now,
    groups: groupByDomain(rows.nodes),
    bars: layoutBars(rows.bookings, tenantId, w),
    free: freeCells(timeline.buckets, timeline.allocatable, w),
    ticks: ticks(w),
    nowPct: nowMarker(now, w),
    hours: Math.round((w.to - w.from) / HOUR_MS),
    details,
    ...(selected ? { selected } : {}),
    ...(slots ? { slots } : {}),
  });
}
