// The GPU calendar over HTTP on the real API server and database, with the demo's data (test/support/demo-seed.ts):
// authentication (the sign-in, its cookie), tenant scoping and masking, and find-a-slot against a direct preview.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CAPACITY_PATHS } from '../../src/api/app.ts';
import { StaticTokenAuthorizer } from '../../src/api/authz.ts';
import { DEMO_TENANT } from '../../src/demo/demo.ts';
import { directoryOf } from '../../src/ui/reservations.ts';
import { SESSION_COOKIE } from '../../src/ui/routes.ts';
import { startTestApi, type TestApi } from '../support/api.ts';
import { DEMO_LOCAL_NODE, OTHER_TENANT, seedDemo, type DemoSeed } from '../support/demo-seed.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

const TEAM_A = 'team-a-calendar-token-0001';
const PLATFORM = 'platform-calendar-token-01';

let t: TestDatabase;
let api: TestApi;
let seed: DemoSeed;

beforeAll(async () => {
  t = await createTestDatabase();
  const authorizer = new StaticTokenAuthorizer({
    tokens: [
      { token: TEAM_A, subject: 'team-a-reader', tenants: [DEMO_TENANT] },
      { token: PLATFORM, subject: 'platform-reader', tenants: [OTHER_TENANT] },
    ],
  });
  let reservations: DemoSeed['reservations'] = [];
  api = await startTestApi(t.db, { authorizer, reservationDirectory: directoryOf(() => reservations) });
  seed = await seedDemo(t.db, api.clock.now());
  reservations = seed.reservations;
});
afterAll(async () => {
  await api?.close();
  await t?.drop();
});

const get = (path: string, headers: Record<string, string> = {}) => fetch(`${api.url}${path}`, { headers, redirect: 'manual' });
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const page = (pool: string, extra = '') => `/calendar?tenant=${DEMO_TENANT}&pool=${pool}${extra}`;

describe('the GPU calendar over HTTP', () => {
  it('unauthenticated: the sign-in page (401), no data', async () => {
    const r = await get(page('demo-local'));
    expect(r.status).toBe(401);
    const body = await r.text();
    expect(body).toContain('<form method="post" action="/calendar/session"');
    expect(body).toContain('type="password"');
    expect(body).not.toContain(DEMO_LOCAL_NODE);
    expect(body).not.toContain(seed.booked['train-now']!.id);
    expect(body).not.toMatch(/class="bar/);
    // A token the authorizer refuses is no better.
    const forged = await get(page('demo-local'), bearer('not-a-token-at-all-000'));
    expect(forged.status).toBe(401);
    expect(await forged.text()).not.toContain(DEMO_LOCAL_NODE);
  });

  it('team-a sees its Reservation by id and name, its pod, and the other tenant’s booking only as "booked"', async () => {
    const r = await get(page('demo-local'), bearer(TEAM_A));
    expect(r.status).toBe(200);
    expect(r.headers.get('content-security-policy')).toContain("script-src 'self'");
    const body = await r.text();
    const now = seed.booked['train-now']!;
    expect(body).toContain(`data-rsv="${now.id}"`);
    expect(body).toContain('demo-team-a/train-now');
    const [node] = Object.keys(now.nodes);
    expect(body).toMatch(new RegExp(`data-node="${node}" data-start="${now.start}" data-end="${now.end}" data-atoms="2" data-rsv="${now.id}"`));
    expect(body).toMatch(/class="bar own-pod"[^>]*data-atoms="1"/);
    const booked = [...body.matchAll(/<span class="bar booked"[^>]*>booked<\/span>/g)].map((m) => m[0]);
    expect(booked).toHaveLength(1);
    expect(booked[0]).toContain(`data-start="${seed.other.start}"`);
    // Nothing of the other tenant's booking but its time and size: not its id, not its tenant.
    expect(body).not.toContain(seed.other.id);
    expect(body).not.toContain(OTHER_TENANT);
    // demo-sim's Reservation is on the other pool's page, not this one.
    expect(body).not.toContain(seed.booked['train-tomorrow']!.id);
  });

  it('the other tenant, on the same pool, sees team-a’s bookings only as "booked"', async () => {
    const r = await get(`/calendar?tenant=${OTHER_TENANT}&pool=demo-local`, bearer(PLATFORM));
    expect(r.status).toBe(200);
    const body = await r.text();
    expect(body).toContain(`data-rsv="${seed.other.id}"`);
    expect([...body.matchAll(/class="bar booked"/g)]).toHaveLength(2);
    expect(body).not.toContain(seed.booked['train-now']!.id);
    expect(body).not.toContain('train-now');
    expect(body).not.toContain(DEMO_TENANT + '/');
  });

  it('without the script, a bar’s link shows its details on the page; another tenant’s id shows nothing', async () => {
    const b = seed.booked['train-now']!;
    const own = await (await get(page('demo-local', `&rsv=${b.id}`), bearer(TEAM_A))).text();
    expect(own).toContain(`<dd data-field="id">${b.id}</dd>`);
    expect(own).toContain('<dd data-field="name">demo-team-a/train-now</dd>');
    const theirs = await (await get(page('demo-local', `&rsv=${seed.other.id}`), bearer(TEAM_A))).text();
    expect(theirs).not.toContain(seed.other.id);
    expect(theirs).not.toContain('data-field="id"');
  });

  it('a tenant the token may not read: 403, no data', async () => {
    const r = await get(`/calendar?tenant=${OTHER_TENANT}&pool=demo-local`, bearer(TEAM_A));
    expect(r.status).toBe(403);
    const body = await r.text();
    expect(body).not.toContain(DEMO_LOCAL_NODE);
    expect(body).not.toMatch(/class="bar/);
  });

  it('the sign-in sets an HttpOnly, SameSite=Strict cookie (not the URL) that the page then accepts; sign-out clears it', async () => {
    const form = new URLSearchParams({ token: TEAM_A, tenant: DEMO_TENANT, pool: 'demo-sim' });
    const r = await fetch(`${api.url}/calendar/session`, { method: 'POST', body: form, redirect: 'manual', headers: { origin: api.url } });
    expect(r.status).toBe(303);
    expect(r.headers.get('location')).toBe('/calendar?tenant=team-a&pool=demo-sim');
    const cookie = r.headers.get('set-cookie')!;
    expect(cookie).toMatch(new RegExp(`^${SESSION_COOKIE}=`));
    expect(cookie).toContain('HttpOnly');
    expect(cookie).toContain('SameSite=Strict');
    expect(cookie).toContain('Path=/calendar');
    const signedIn = await get(r.headers.get('location')!, { cookie: cookie.split(';')[0]! });
    expect(signedIn.status).toBe(200);
    expect(await signedIn.text()).toContain(`data-rsv="${seed.booked['train-tomorrow']!.id}"`);
    const out = await fetch(`${api.url}/calendar/signout`, { method: 'POST', redirect: 'manual' });
    expect(out.headers.get('set-cookie')).toContain('Max-Age=0');
  });

  it('a refused token signs nobody in; a sign-in posted from another site is refused', async () => {
    const bad = await fetch(`${api.url}/calendar/session`, { method: 'POST', body: new URLSearchParams({ token: 'wrong-token-0000000000', tenant: DEMO_TENANT }), redirect: 'manual' });
    expect(bad.status).toBe(401);
    expect(bad.headers.get('set-cookie')).toBeNull();
    const csrf = await fetch(`${api.url}/calendar/session`, { method: 'POST', body: new URLSearchParams({ token: TEAM_A, tenant: DEMO_TENANT }), redirect: 'manual', headers: { origin: 'https://evil.example' } });
    expect(csrf.status).toBe(403);
    expect(csrf.headers.get('set-cookie')).toBeNull();
  });

  it('find a slot shows the placer’s answer: the first window is what a direct preview from now gives', async () => {
    const r = await get(page('demo-local', '&gpus=3&hours=2'), bearer(TEAM_A));
    expect(r.status).toBe(200);
    const body = await r.text();
    const direct = await api.client.request({
      path: CAPACITY_PATHS.preview,
      token: TEAM_A,
      body: { tenantId: DEMO_TENANT, poolId: seed.poolIds['demo-local'], devices: [{ class: 'gpu', count: 3 }], duration: 2 * 3600, idempotencyKey: 'direct' },
    });
    expect(direct.status).toBe(200);
    const first = /<li class="slot" data-start="\d+" data-from-now="true">([\s\S]*?)<\/ul>\n<\/li>/.exec(body);
    expect(first, 'a window from now').not.toBeNull();
    const shown = [...first![1]!.matchAll(/data-node="([^"]+)" data-atoms="([^"]+)"/g)].map((m) => ({ nodeId: m[1], atoms: m[2]!.split(',') }));
    const json = direct.json as { fits: boolean; candidates: { nodeId: string; atoms: string[] }[] };
    expect(json.fits).toBe(true);
    expect(shown).toEqual(json.candidates.map((c) => ({ nodeId: c.nodeId, atoms: c.atoms })));
  });

  it('find a slot that cannot fit now says why; bad input is a 400 page', async () => {
    const body = await (await get(page('demo-local', '&gpus=9&hours=1'), bearer(TEAM_A))).text();
    expect(body).toContain('data-now-reason');
    expect((await get(page('demo-local', '&gpus=0&hours=1'), bearer(TEAM_A))).status).toBe(400);
  });

  it('a pool the tenant does not see is 404; the assets are served without a token', async () => {
    expect((await get(page('no-such-pool'), bearer(TEAM_A))).status).toBe(404);
    const css = await get('/calendar/assets/calendar.css');
    expect(css.status).toBe(200);
    expect(css.headers.get('content-type')).toContain('text/css');
    expect((await get('/calendar/assets/calendar.js')).status).toBe(200);
  });
});
