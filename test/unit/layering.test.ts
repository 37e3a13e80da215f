// The folders of src/ and what each may import (docs/architecture.md), held by `npm run lint` (eslint.config.js, the
// rule bc/folders): a wrong-way import, linted as if it were written in the file named, is refused with the folder's
// allowance; one per forbidden edge below, the service tier's sideways edges among them (agent -> db first: the agent
// holds no database credentials). import() is checked as imports are, and one of a computed path is refused. An import
// that goes down passes. And no cycle among src/'s modules, type imports included.
import fs from 'node:fs';
import path from 'node:path';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const ROOT = path.join(import.meta.dirname, '..', '..');
const eslint = new ESLint({ cwd: ROOT });

/** The folder rule's messages for `text` as the content of `file`. */
async function refusals(file: string, text: string): Promise<string[]> {
  const [r] = await eslint.lintText(text, { filePath: path.join(ROOT, file) });
  return r!.messages.filter((m) => m.ruleId === 'bc/folders').map((m) => m.message);
}

// Typed linting builds the program once: the first call takes seconds.
const SLOW = 60_000;
const use = (spec: string, name: string) => `import { ${name} } from '${spec}';\nexport const x = ${name};\n`;

describe('each folder imports only what it names: never up, never sideways', () => {
  it.each([
    // the service tier, closed
    ['src/agent/agent.ts', use('../db/ledger.ts', 'Ledger'), 'agent may not import db'],
    ['src/agent/agent.ts', use('../api/app.ts', 'createApp'), 'agent may not import api'],
    ['src/agent/agent.ts', use('../extender/resources.ts', 'podDemand'), 'agent may not import extender'],
    ['src/api/app.ts', use('../ui/routes.ts', 'mountCalendar'), 'api may not import ui'],
    ['src/api/app.ts', use('../extender/service.ts', 'ExtenderService'), 'api may not import extender'],
    ['src/extender/listener.ts', use('../api/capacity-service.ts', 'CapacityService'), 'extender may not import api'],
    ['src/agentapi/router.ts', use('../api/authz.ts', 'StaticTokenAuthorizer'), 'agentapi may not import api'],
    ['src/admission/pods.ts', use('../extender/resources.ts', 'podDemand'), 'admission may not import extender'],
    ['src/metrics/registry.ts', use('../api/app.ts', 'createApp'), 'metrics may not import api'],
    // upward
    ['src/db/pool.ts', use('../controller/run.ts', 'runController'), 'db may not import controller'],
    ['src/db/pool.ts', use('../kube/client.ts', 'KubeClient'), 'db may not import kube'],
    ['src/kube/informer.ts', use('../db/ledger.ts', 'Ledger'), 'kube may not import db'],
    ['src/http/errors.ts', use('../api/app.ts', 'createApp'), 'http may not import api'],
    ['src/config.ts', use('./db/ledger.ts', 'Ledger'), 'base may not import db'],
    ['src/core/planner.ts', use('../log.ts', 'createLogger'), 'core may not import base'],
    ['src/extender/service.ts', use('../controller/stopper.ts', 'createStopper'), 'extender may not import controller'],
    ['src/agent/agent.ts', use('../cli/main.ts', 'main'), 'agent may not import cli'],
    ['src/controller/run.ts', use('../demo/demo.ts', 'runDemo'), 'controller may not import demo'],
    // out of src/, and scripts into the tests
    ['src/controller/run.ts', use('../../e2e/cluster/harness.ts', 'kubectl'), 'controller may not import e2e'],
    ['src/api/app.ts', use('../../bench/scheduler.bench.ts', 'x'), 'api may not import bench'],
    ['scripts/helm/chart.ts', use('../../e2e/cluster/harness.ts', 'kubectl'), 'scripts may not import e2e'],
    ['e2e/cluster/harness.ts', use('../../bench/scheduler.bench.ts', 'x'), 'e2e may not import bench'],
    // import() is an import too
    ['src/agent/agent.ts', "export const x = () => import('../db/ledger.ts');\n", 'agent may not import db'],
  ])('%s: %s', async (file, text, message) => {
    const got = await refusals(file, text);
    expect(got).toHaveLength(1);
    expect(got[0]).toContain(message);
    expect(got[0]).toContain('(docs/architecture.md)');
  }, SLOW);

  it('an import() of a computed path cannot be checked, so it is refused', async () => {
    const got = await refusals('src/cli/main.ts', "const where = '../controller/run.ts';\nexport const x = () => import(where);\n");
    expect(got).toEqual(['import() of a computed path: the layering cannot check it (docs/architecture.md).']);
  }, SLOW);

  it('the core stays pure: no pg, no Kubernetes client, not even through import()', async () => {
    expect(await refusals('src/core/planner.ts', use('pg', 'Pool'))).toEqual(['The planning core is pure: no I/O.']);
    expect(await refusals('src/core/planner.ts', "export const x = () => import('@kubernetes/client-node');\n")).toEqual(['The planning core is pure: no I/O.']);
  }, SLOW);

  it.each([
    ['src/config.ts', use('./core/stop.ts', 'DEFAULT_STOP_GRACE_SECONDS')],
    ['src/db/pool.ts', use('../log.ts', 'createLogger')],
    ['src/extender/service.ts', use('../kube/informer.ts', 'Informer')],
    ['src/agent/agent.ts', use('../agentapi/wire.ts', 'AgentBackend')],
    ['src/agentapi/router.ts', use('../http/errors.ts', 'toErrorResponse')],
    ['src/ui/routes.ts', use('../api/capacity-service.ts', 'CapacityService')],
    ['src/controller/run.ts', use('../extender/service.ts', 'ExtenderService')],
    ['src/cli/main.ts', use('../controller/run.ts', 'runController')],
    ['e2e/cluster/install.ts', use('../../scripts/helm/chart.ts', 'writeChart')],
    ['bench/scheduler.bench.ts', use('../e2e/cluster/harness.ts', 'kubectl')],
  ])('%s may import downward', async (file, text) => {
    expect(await refusals(file, text)).toEqual([]);
  }, SLOW);
});

describe('no import cycles in src/', () => {
  it('its modules form no cycle (type imports included)', () => {
    const files: string[] = [];
    const walk = (d: string) => {
      for (const e of fs.readdirSync(d, { withFileTypes: true })) {
        const p = path.join(d, e.name);
        if (e.isDirectory()) walk(p);
        else if (p.endsWith('.ts') && !p.endsWith('.test.ts') && !p.endsWith('.d.ts')) files.push(p);
      }
    };
    walk(path.join(ROOT, 'src'));
    const known = new Set(files);
    const edges = new Map<string, string[]>();
    for (const f of files) {
      const text = fs.readFileSync(f, 'utf8');
      const deps = [...text.matchAll(/^(?:import|export)\s[^;]*?from\s+'(\.[^']+)'/gms)].map((m) => path.normalize(path.join(path.dirname(f), m[1]!)));
      edges.set(f, deps.filter((d) => known.has(d)));
    }
    // Tarjan's strongly connected components: any of more than one module is a cycle.
    let next = 0;
    const index = new Map<string, number>();
    const low = new Map<string, number>();
    const stack: string[] = [];
    const onStack = new Set<string>();
    const cycles: string[][] = [];
    const visit = (v: string) => {
      index.set(v, next);
      low.set(v, next++);
      stack.push(v);
      onStack.add(v);
      for (const w of edges.get(v)!) {
        if (!index.has(w)) {
          visit(w);
          low.set(v, Math.min(low.get(v)!, low.get(w)!));
        } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
      if (low.get(v) === index.get(v)) {
        const scc: string[] = [];
        let w: string;
        do {
          w = stack.pop()!;
          onStack.delete(w);
          scc.push(path.relative(ROOT, w));
        } while (w !== v);
        if (scc.length > 1) cycles.push(scc.sort());
      }
    };
    for (const f of files) if (!index.has(f)) visit(f);
    expect(files.length).toBeGreaterThan(100);
    expect(cycles).toEqual([]);
  });
});
