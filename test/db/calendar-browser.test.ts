/// <reference lib="dom" />
// The GPU calendar in headless Chromium (Debian's package, /usr/bin/chromium; e2e/cluster/install-deps.sh installs it)
// driven by puppeteer-core, on the real API server and database with the demo's data (test/support/demo-seed.ts):
// the sign-in instead of data, the demo's Reservations on their nodes and hours (checked in the DOM, by where the bars
// are drawn), another tenant's booking without a name, the details of a Reservation by click and by Enter, and "find
// a slot" against a direct preview. The screenshot goes to docs/calendar.png with BC_UPDATE_SCREENSHOT=1 (else to the
// temporary directory), so that a test run does not rewrite a tracked file.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CAPACITY_PATHS } from '../../src/api/app.ts';
import { StaticTokenAuthorizer } from '../../src/api/authz.ts';
import { REPO_ROOT } from '../../src/demo/cluster.ts';
import { DEMO_TENANT } from '../../src/demo/demo.ts';
import { directoryOf } from '../../src/ui/reservations.ts';
import { startTestApi, type TestApi } from '../support/api.ts';
import { OTHER_TENANT, seedDemo, type DemoSeed } from '../support/demo-seed.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

const CHROMIUM = process.env.BC_CHROMIUM ?? '/usr/bin/chromium';
const TOKEN = 'team-a-browser-token-00001';
const HOUR = 3_600_000;

let t: TestDatabase;
let api: TestApi;
let seed: DemoSeed;
let browser: Browser;
let page: Page;

beforeAll(async () => {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`no Chromium at ${CHROMIUM}: apt-get install -y chromium (or bash e2e/cluster/install-deps.sh), or set BC_CHROMIUM`);
  t = await createTestDatabase();
  let reservations: DemoSeed['reservations'] = [];
  const authorizer = new StaticTokenAuthorizer({ tokens: [{ token: TOKEN, subject: 'team-a-reader', tenants: [DEMO_TENANT] }] });
  api = await startTestApi(t.db, { authorizer, reservationDirectory: directoryOf(() => reservations) });
  seed = await seedDemo(t.db, api.clock.now());
  reservations = seed.reservations;
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
  });
  page = await browser.newPage();
  await page.setViewport({ width: 1440, height: 900 });
});
afterAll(async () => {
  await browser?.close();
  await api?.close();
  await t?.drop();
});

/** Where a bar is drawn, read back as times: its left and right edges within its track, mapped onto the window. */
async function drawnSpan(selector: string): Promise<{ node: string; start: number; end: number; label: string; text: string }> {
  return page.$eval(selector, (el) => {
    const track = el.parentElement!;
    const grid = document.querySelector('.grid')!;
    const [from, to] = [Number(grid.getAttribute('data-from')), Number(grid.getAttribute('data-to'))];
    const t = track.getBoundingClientRect();
    const b = el.getBoundingClientRect();
    const at = (x: number) => from + ((x - t.left) / t.width) * (to - from);
    return { node: el.closest('.row.node')!.getAttribute('data-node')!, start: at(b.left), end: at(b.right), label: el.getAttribute('aria-label') ?? '', text: el.textContent ?? '' };
  });
}

const calendarUrl = (pool: string) => `${api.url}/calendar?tenant=${DEMO_TENANT}&pool=${pool}`;

describe('the GPU calendar in Chromium', () => {
  it('an unauthenticated visit gets the sign-in, not data; signing in with the token shows the calendar', async () => {
    const r = await page.goto(calendarUrl('demo-local'));
    expect(r!.status()).toBe(401);
    expect(await page.$$('.bar')).toHaveLength(0);
    expect(await page.$('#token')).not.toBeNull();
    expect(await page.content()).not.toContain(seed.booked['train-now']!.id);
    await page.type('#token', TOKEN);
    await Promise.all([page.waitForNavigation(), page.click('form.signin button[type=submit]')]);
    expect(page.url()).toBe(calendarUrl('demo-local'));
    expect(page.url()).not.toContain(TOKEN);
    expect(await page.$$('.row.node')).toHaveLength(1);
  });

  it('train-now is drawn on its node from now for 2 hours; the notebook pod on the same node', async () => {
    const b = seed.booked['train-now']!;
    const drawn = await drawnSpan(`a.bar[data-rsv="${b.id}"]`);
    expect(drawn.node).toBe(Object.keys(b.nodes)[0]);
    // Within 5 minutes of the booking's times at this width (an hour is 2rem wide: a pixel is under 2 minutes).
    expect(Math.abs(drawn.start - b.start)).toBeLessThan(5 * 60_000);
    expect(Math.abs(drawn.end - b.end)).toBeLessThan(5 * 60_000);
    expect(drawn.text).toBe('demo-team-a/train-now');
    const pod = await page.$$eval('.bar.own-pod', (els) => els.map((e) => e.closest('.row.node')!.getAttribute('data-node')));
    expect(pod).toEqual([seed.podNode]);
  });

  it('the other tenant’s booking shows "booked" and no name, at its hours', async () => {
    const drawn = await drawnSpan('.bar.booked');
    expect(drawn.text).toBe('booked');
    expect(drawn.label).toMatch(/^booked: 2 GPUs/);
    expect(drawn.node).toBe(seed.other.nodeId);
    expect(Math.abs(drawn.start - seed.other.start)).toBeLessThan(5 * 60_000);
    const html = await page.content();
    expect(html).not.toContain(seed.other.id);
    expect(html).not.toContain(OTHER_TENANT);
  });

  it('a click on the bar shows the Reservation: id, name, window, atoms, conditions', async () => {
    const b = seed.booked['train-now']!;
    await page.click(`a.bar[data-rsv="${b.id}"]`);
    const fields = await page.$$eval('#detail-body [data-field]', (els) => Object.fromEntries(els.map((e) => [e.getAttribute('data-field'), (e as HTMLElement).innerText])));
    expect(fields.id).toBe(b.id);
    expect(fields.name).toBe('demo-team-a/train-now');
    const [node, atoms] = Object.entries(b.nodes)[0]!;
    expect(fields.atoms).toBe(`${node}: ${atoms.join(', ')}`);
    expect(fields.conditions).toContain('Reserved=True (Booked)');
    expect(fields.window).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d UTC to \d{4}-\d\d-\d\d \d\d:\d\d UTC$/);
    // The page stayed (shown in place by the script).
    expect(page.url()).toBe(calendarUrl('demo-local'));
  });

  it('train-tomorrow is on demo-sim, tomorrow 09:00–17:00 UTC; Enter on the bar shows it', async () => {
    await Promise.all([page.waitForNavigation(), page.click('.summary tr[data-pool="demo-sim"] a')]);
    const b = seed.booked['train-tomorrow']!;
    expect(new Date(b.start).getUTCHours()).toBe(9);
    const drawn = await drawnSpan(`a.bar[data-rsv="${b.id}"]`);
    expect(drawn.node).toBe(Object.keys(b.nodes)[0]);
    expect(Math.abs(drawn.start - b.start)).toBeLessThan(5 * 60_000);
    expect(Math.abs(drawn.end - (b.start + 8 * HOUR))).toBeLessThan(5 * 60_000);
    await page.focus(`a.bar[data-rsv="${b.id}"]`);
    await page.keyboard.press('Enter');
    await page.waitForFunction((id) => document.querySelector('#detail-body [data-field="id"]')?.textContent === id, {}, b.id);
    expect(await page.$eval('#detail-body [data-field="atoms"]', (e) => (e as HTMLElement).innerText.split(', ').length)).toBe(4);
  });

  it('find a slot returns the placer’s answer (a direct preview from now)', async () => {
    await page.goto(calendarUrl('demo-local'));
    await page.$eval('#gpus', (e) => ((e as HTMLInputElement).value = ''));
    await page.type('#gpus', '3');
    await page.$eval('#hours', (e) => ((e as HTMLInputElement).value = ''));
    await page.type('#hours', '2');
    await Promise.all([page.waitForNavigation(), page.click('.find-form button[type=submit]')]);
    expect(page.url()).not.toContain(TOKEN);
    const shown = await page.$$eval('li.slot[data-from-now="true"] li.candidate', (els) =>
      els.map((e) => ({ nodeId: e.getAttribute('data-node')!, atoms: e.getAttribute('data-atoms')!.split(',') })),
    );
    const direct = await api.client.request({
      path: CAPACITY_PATHS.preview,
      token: TOKEN,
      body: { tenantId: DEMO_TENANT, poolId: seed.poolIds['demo-local'], devices: [{ class: 'gpu', count: 3 }], duration: 2 * 3600, idempotencyKey: 'direct' },
    });
    const json = direct.json as { fits: boolean; candidates: { nodeId: string; atoms: string[] }[] };
    expect(json.fits).toBe(true);
    expect(shown).toEqual(json.candidates.map((c) => ({ nodeId: c.nodeId, atoms: c.atoms })));
    expect(await page.$$('li.slot')).not.toHaveLength(0);
  });

  it('a screenshot for the docs', async () => {
    const b = seed.booked['train-now']!;
    await page.click(`a.bar[data-rsv="${b.id}"]`);
    const file = process.env.BC_UPDATE_SCREENSHOT === '1' ? path.join(REPO_ROOT, 'docs', 'calendar.png') : path.join(os.tmpdir(), `calendar-${process.pid}.png`);
    await page.screenshot({ path: file as `${string}.png` });
    expect(fs.statSync(file).size).toBeGreaterThan(10_000);
  });
});
