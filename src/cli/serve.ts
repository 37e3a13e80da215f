// `better-compute serve`: the capacity API and /metrics on the configured database (embedded PostgreSQL by default),
// without any cluster. Migrates at start, folds and rebuilds the rollup periodically, stops gracefully on SIGTERM or
// SIGINT (stop accepting, drain requests in flight, stop the jobs, close the database).
import { parseArgs } from 'node:util';
import type { Config } from '../config.ts';
import { createApp } from '../api/app.ts';
import { KubernetesAuthorizer } from '../api/authz-kubernetes.ts';
import { kubeConfigFrom } from '../kube/client.ts';
import { StaticTokenAuthorizer, type Authorizer } from '../api/authz.ts';
import { createCapacityService } from '../api/capacity-service.ts';
import { listen } from '../http/server.ts';
import { stopOnSignal } from '../signals.ts';
import { openDatabase } from '../db/connect.ts';
import { startCapacityJobs } from '../jobs/capacity.ts';
import { createLogger, type Logger } from '../log.ts';
import { registerCapacityGauges, registerDomainGauges } from '../metrics/capacity.ts';
import { registerQuotaGauges } from '../metrics/quota.ts';
import { ledgerMetrics } from '../metrics/ledger.ts';
import { createRegistry, httpMetrics } from '../metrics/registry.ts';
import { mountCalendar } from '../ui/routes.ts';

export const SERVE_USAGE = `usage: better-compute serve [--host H] [--port P] [--token-file F]

Serves the capacity API (POST /api/compute/capacity/{summary,byPool,preview,timeline}), GET /healthz, /readyz and
/metrics on the configured database (embedded PostgreSQL unless DATABASE_URL is set), after applying migrations.

  --host H          listen address (HOST, default 127.0.0.1)
  --port P          port (PORT, default 8080; 0 picks a free one)
  --token-file F    static tokens (BETTER_COMPUTE_TOKEN_FILE); without one, every request is refused
  --auth MODE       static (default) or kubernetes (TokenReview + SubjectAccessReview; KUBECONFIG or in-cluster)
`;

export interface Served {
  url: string;
  /** Graceful stop: stop accepting, drain, stop the jobs, close the database. Idempotent. */
  stop(): Promise<void>;
}

export async function buildAuthorizer(config: Config, log: Logger): Promise<Authorizer> {
  if (config.auth === 'kubernetes') {
    return new KubernetesAuthorizer({ kubeConfig: kubeConfigFrom(config.kubeconfig, undefined, 'in-cluster'), audiences: [...config.apiTokenAudiences], tenancyByName: config.tenancyByName });
  }
  if (!config.tokenFile) {
    log.warn('no token file (BETTER_COMPUTE_TOKEN_FILE or --token-file): every API request is refused');
    return StaticTokenAuthorizer.denyAll();
  }
  return StaticTokenAuthorizer.fromFile(config.tokenFile);
}

/** Starts everything; returns once the server listens. */
export async function startServe(config: Config, log: Logger, opts: { drainMs?: number } = {}): Promise<Served> {
  const authorizer = await buildAuthorizer(config, log);
  const database = await openDatabase(config, { migrate: true, log: (line) => log.debug('postgres', { line }) });
  try {
    const registry = createRegistry();
    registerCapacityGauges(registry, database.db);
    registerDomainGauges(registry, database.db);
    registerQuotaGauges(registry, database.db);
    const { service, clock } = await createCapacityService(database.db, { metrics: ledgerMetrics(registry) });
    let shuttingDown = false;
    const app = createApp({
      service,
      authorizer,
      registry,
      log,
      http: httpMetrics(registry),
      routes: (app) => mountCalendar(app, { service, authorizer, log }),
      async ready() {
        if (shuttingDown) throw new Error('shutting down');
        await database.db.query('SELECT 1');
      },
    });
    const server = await listen(app, { host: config.httpHost, port: config.httpPort });
    const jobs = startCapacityJobs({
      db: database.db,
      rollupEveryMs: config.rollupEveryMs,
      foldEveryMs: config.foldEveryMs,
      log,
      afterFold: () => clock.sync(),
    });
    log.info('listening', {
      url: server.url,
      auth: config.auth,
      database: database.embedded ? 'embedded' : 'external',
      rollupEveryMs: config.rollupEveryMs,
      foldEveryMs: config.foldEveryMs,
    });
    let stopping: Promise<void> | undefined;
    return {
      url: server.url,
      stop() {
        stopping ??= (async () => {
          shuttingDown = true;
          log.info('shutting down');
          await server.close(opts.drainMs ?? 10_000);
          await jobs.stop();
          await database.close();
          log.info('stopped');
        })();
        return stopping;
      },
    };
  } catch (e) {
    await database.close();
    throw e;
  }
}

/** The command: flags override the configuration; runs until SIGTERM or SIGINT. */
export async function serveCommand(argv: string[], config: Config): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      host: { type: 'string' },
      port: { type: 'string' },
      'token-file': { type: 'string' },
      auth: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(SERVE_USAGE);
    return 0;
  }
  const port = values.port === undefined ? config.httpPort : Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`--port: not a port: ${values.port}`);
  if (values.auth !== undefined && values.auth !== 'static' && values.auth !== 'kubernetes') {
    throw new Error(`--auth: static or kubernetes, not ${values.auth}`);
  }
  const effective: Config = Object.freeze({
    ...config,
    httpHost: values.host ?? config.httpHost,
    httpPort: port,
    tokenFile: values['token-file'] ?? config.tokenFile,
    auth: values.auth ?? config.auth,
  });
  const log = createLogger({ level: config.logLevel });
  const served = await startServe(effective, log);
  return stopOnSignal(() => served.stop(), log);
}
