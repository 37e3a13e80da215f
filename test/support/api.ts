// The capacity API on a test database, on loopback, with static tokens.
import type { Registry } from 'prom-client';
import { createApp } from '../../src/api/app.ts';
import { StaticTokenAuthorizer, type Authorizer } from '../../src/api/authz.ts';
import { CapacityService, createCapacityService } from '../../src/api/capacity-service.ts';
import type { Previewer } from '../../src/core/preview.ts';
import { listen, type RunningServer } from '../../src/http/server.ts';
import type { DbClock } from '../../src/db/clock.ts';
import type { Db } from '../../src/db/pool.ts';
import { silentLogger, type Logger } from '../../src/log.ts';
import { registerCapacityGauges, registerDomainGauges } from '../../src/metrics/capacity.ts';
import { ledgerMetrics, type LedgerMetricsSink } from '../../src/metrics/ledger.ts';
import { createRegistry, httpMetrics } from '../../src/metrics/registry.ts';
import type { ReservationDirectory } from '../../src/ui/reservations.ts';
import { mountCalendar } from '../../src/ui/routes.ts';
import { HttpClient } from './http.ts';

/** Tokens of the test token file. */
export const TOKENS = {
  all: 'token-all-tenants-0001',
  acme: 'token-acme-only-00001',
  ops: 'token-ops-only-000001',
  none: 'token-no-tenants-0001',
} as const;

export const testAuthorizer = () =>
  new StaticTokenAuthorizer({
    tokens: [
      { token: TOKENS.all, subject: 'root', tenants: ['*'] },
      { token: TOKENS.acme, subject: 'alice', tenants: ['acme'] },
      { token: TOKENS.ops, subject: 'bob', tenants: ['ops'] },
      { token: TOKENS.none, subject: 'nobody', tenants: [] },
    ],
  });

export interface TestApi {
  url: string;
  client: HttpClient;
  registry: Registry;
  clock: DbClock;
  service: CapacityService;
  /** The Ledger metrics registered on `registry` (pass as `new Ledger(db, { metrics })`). */
  ledgerMetrics: LedgerMetricsSink;
  server: RunningServer;
  close(): Promise<void>;
}

export async function startTestApi(
  db: Db,
  opts: { authorizer?: Authorizer; log?: Logger; token?: string; previewer?: Previewer; maxSockets?: number; defaultMetrics?: boolean; reservationDirectory?: ReservationDirectory } = {},
): Promise<TestApi> {
  const registry = createRegistry({ defaultMetrics: opts.defaultMetrics ?? false });
  registerCapacityGauges(registry, db);
  registerDomainGauges(registry, db);
  const metrics = ledgerMetrics(registry);
  const created = await createCapacityService(db, { metrics });
  const service = opts.previewer ? new CapacityService({ db, previewer: opts.previewer, clock: created.clock }) : created.service;
  const app = createApp({
    service,
    authorizer: opts.authorizer ?? testAuthorizer(),
    registry,
    log: opts.log ?? silentLogger,
    http: httpMetrics(registry),
    routes: (app) =>
      mountCalendar(app, { service, authorizer: opts.authorizer ?? testAuthorizer(), log: opts.log ?? silentLogger, ...(opts.reservationDirectory ? { directory: opts.reservationDirectory } : {}) }),
    async ready() {
      await db.query('SELECT 1');
    },
  });
  const server = await listen(app, { host: '127.0.0.1', port: 0 });
  const client = new HttpClient(server.url, opts.token ?? TOKENS.all, opts.maxSockets);
  return {
    url: server.url,
    client,
    registry,
    clock: created.clock,
    service,
    ledgerMetrics: metrics,
    server,
    async close() {
      client.close();
      await server.close(1000);
    },
  };
}
