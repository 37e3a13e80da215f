// The scheduler extender in a process of its own, as the controller runs it (src/controller/run.ts): an unfenced ledger,
// filter and prioritize from the ledger in memory (ADR 0010), the controller's extender listener app, on loopback.
// bench/scheduler.bench.ts forks it in a session of its own, so that the bench's own client work (creating pods,
// watching them, dropping the admissions as the agent would) runs neither on the extender's event loop nor in its
// scheduling group, as in a cluster.
// IPC: sends {type: 'ready', url}; answers {type: 'calls'} with the calls counted since the last one (per verb and
// outcome), the event loop's utilization, the process's CPU time (user + system) and the state's reloads (nodes and
// pods reloaded after a notification, and those not, applied by a bind already: ADR 0023) over that time; exits on
// {type: 'stop'} or when the bench's IPC channel closes. With BENCH_EXTENDER_CPU_PROF (a directory), each 'calls'
// message ends the V8 CPU profile taken since the one before and starts the next, so that a measured row (from one
// 'calls' to the next) has a profile of its own.
import fs from 'node:fs/promises';
import { createServer } from 'node:http';
import { Session } from 'node:inspector/promises';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { kubeConfigFrom } from '../src/kube/client.ts';
import { DbClock } from '../src/db/clock.ts';
import { Ledger } from '../src/db/ledger.ts';
import { createPool } from '../src/db/pool.ts';
import { ClientNodeExtenderKube } from '../src/extender/kube.ts';
import { createExtenderListener } from '../src/extender/listener.ts';
import { ExtenderService } from '../src/extender/service.ts';
import { setScavenges } from '../src/scavenge.ts';
import { ExtenderStateSync } from '../src/extender/state-sync.ts';
import { loadConfig } from '../src/config.ts';
import { silentLogger } from '../src/log.ts';

export interface CallCount {
  n: number;
  seconds: number;
}

export type ExtenderProcessMessage =
  | { type: 'ready'; url: string }
  | { type: 'calls'; calls: [string, CallCount][]; eventLoopUtilization: number; cpuSeconds: number; reloads: ExtenderStateSync['reloads'] }
  | { type: 'error'; message: string };

async function main() {
  const [databaseUrl, kubeconfig] = process.argv.slice(2);
  if (!databaseUrl || !kubeconfig || !process.send) throw new Error('usage: fork(extender-process.ts, [DATABASE_URL, KUBECONFIG])');
  const send = (m: ExtenderProcessMessage) => process.send!(m);
  // Young collections where the controller has them (BETTER_COMPUTE_SCAVENGES, ADR 0029).
  setScavenges(loadConfig().scavenges);
  const db = createPool(databaseUrl, 8);
  const clock = await DbClock.create(db);
  const calls = new Map<string, CallCount>();
  const memory = new ExtenderStateSync({ db, log: silentLogger });
  memory.start();
  await memory.ready();
  const service = new ExtenderService({
    tenancyByName: true,
    db,
    ledger: new Ledger(db),
    clock,
    kube: new ClientNodeExtenderKube(kubeConfigFrom(kubeconfig)),
    log: silentLogger,
    memory,
    // BENCH_FILTER_NODES: the most nodes filter passes (ADR 0022), to compare with the product's default.
    ...(process.env.BENCH_FILTER_NODES ? { filterNodes: Number(process.env.BENCH_FILTER_NODES) } : {}),
    metrics: {
      onCall(verb, seconds, outcome) {
        const c = calls.get(`${verb} ${outcome}`) ?? { n: 0, seconds: 0 };
        c.n++;
        c.seconds += seconds;
        calls.set(`${verb} ${outcome}`, c);
      },
    },
  });
  const server = createServer(createExtenderListener({ service }));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address();
  let since = performance.eventLoopUtilization();
  let cpuSince = process.cpuUsage();
  let reloadsSince = { ...memory.reloads };
  const profileDir = process.env.BENCH_EXTENDER_CPU_PROF;
  const profiler = profileDir ? new Session() : undefined;
  let profiles = 0;
  const nextProfile = async () => {
    if (!profiler || !profileDir) return;
    if (profiles++ > 0) {
      const { profile } = await profiler.post('Profiler.stop');
      await fs.writeFile(path.join(profileDir, `extender-${process.pid}-${profiles - 1}.cpuprofile`), JSON.stringify(profile));
    }
    await profiler.post('Profiler.start');
  };
  if (profiler) {
    profiler.connect();
    await profiler.post('Profiler.enable');
  }
  let stopping = false;
  const stop = () => {
    if (stopping) return; // 'stop', then the channel's close as the bench exits
    stopping = true;
    server.close();
    server.closeAllConnections();
    void memory
      .stop()
      .then(() => db.end())
      .finally(() => process.exit(0));
  };
  process.on('message', async (m: { type: string }) => {
    if (m.type === 'calls') {
      const elu = performance.eventLoopUtilization(since);
      since = performance.eventLoopUtilization();
      const cpu = process.cpuUsage(cpuSince);
      cpuSince = process.cpuUsage();
      const reloads = { ...memory.reloads };
      const counted = [...calls];
      calls.clear();
      const answer: ExtenderProcessMessage = {
        type: 'calls',
        calls: counted,
        eventLoopUtilization: elu.utilization,
        cpuSeconds: (cpu.user + cpu.system) / 1e6,
        reloads: { nodes: reloads.nodes - reloadsSince.nodes, pods: reloads.pods - reloadsSince.pods, skipped: reloads.skipped - reloadsSince.skipped },
      };
      reloadsSince = reloads;
      // The row's profile ends, and the next one starts, before the answer lets the bench start its next row.
      try {
        await nextProfile();
      } catch (e) {
        return send({ type: 'error', message: `CPU profile: ${e instanceof Error ? e.message : String(e)}` });
      }
      send(answer);
    } else if (m.type === 'stop') stop();
  });
  // The bench gone (its IPC channel closed) is a stop too: the process runs in a session of its own, so a signal to
  // the bench's terminal does not reach it.
  process.on('disconnect', stop);
  send({ type: 'ready', url: `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}/scheduler` });
}

main().catch((e: unknown) => {
  process.send?.({ type: 'error', message: e instanceof Error ? (e.stack ?? e.message) : String(e) });
  process.exit(1);
});
