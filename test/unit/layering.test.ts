// The layering of src/ (docs/architecture.md), held by `npm run lint` (eslint.config.js): a wrong-way import, linted
// as if it were written in the file named, is refused with the layering's message; an import that goes down passes.
// And no cycle among src/'s modules, type imports included.
import fs from 'node:fs';
import path from 'node:path';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const ROOT = path.join(import.meta.dirname, '..', '..');
const eslint = new ESLint({ cwd: ROOT });

/** The no-restricted-imports messages for `text` as the content of `file`. */
async function refusals(file: string, text: string): Promise<string[]> {
  const [r] = await eslint.lintText(text, { filePath: path.join(ROOT, file) });
  return r!.messages.filter((m) => m.ruleId === 'no-restricted-imports').map((m) => m.message);
}

// Typed linting builds the program once: the first call takes seconds.
const SLOW = 60_000;
const LAYERING = /A layer imports its own or a lower one/;

describe('the layers: core <- base <- db | kube <- services <- controller <- cli, demo', () => {
  it.each([
    ['src/db/pool.ts', "import { runController } from '../controller/run.ts';\nexport const x = runController;\n"],
    ['src/db/pool.ts', "import { KubeClient } from '../kube/client.ts';\nexport const x = KubeClient;\n"],
    ['src/kube/informer.ts', "import { Ledger } from '../db/ledger.ts';\nexport const x = Ledger;\n"],
    ['src/config.ts', "import { Ledger } from './db/ledger.ts';\nexport const x = Ledger;\n"],
    ['src/core/planner.ts', "import { createLogger } from '../log.ts';\nexport const x = createLogger;\n"],
    ['src/extender/service.ts', "import { createStopper } from '../controller/stopper.ts';\nexport const x = createStopper;\n"],
    ['src/agent/agent.ts', "import { main } from '../cli/main.ts';\nexport const x = main;\n"],
    ['src/controller/run.ts', "import { runDemo } from '../demo/demo.ts';\nexport const x = runDemo;\n"],
  ])('%s may not import upward', async (file, text) => {
    const got = await refusals(file, text);
    expect(got).toHaveLength(1);
    expect(got[0]).toMatch(LAYERING);
  }, SLOW);

  it('the core stays pure: no pg, no Kubernetes client', async () => {
    const got = await refusals('src/core/planner.ts', "import pg from 'pg';\nexport const x = pg;\n");
    expect(got).toHaveLength(1);
    expect(got[0]).toMatch(/The planning core is pure: no I\/O/);
  }, SLOW);

  it.each([
    ['src/config.ts', "import { DEFAULT_STOP_GRACE_SECONDS } from './core/stop.ts';\nexport const x = DEFAULT_STOP_GRACE_SECONDS;\n"],
    ['src/db/pool.ts', "import { createLogger } from '../log.ts';\nexport const x = createLogger;\n"],
    ['src/extender/service.ts', "import { Informer } from '../kube/informer.ts';\nexport const x = Informer;\n"],
    ['src/controller/run.ts', "import { ExtenderService } from '../extender/service.ts';\nexport const x = ExtenderService;\n"],
    ['src/cli/main.ts', "import { runController } from '../controller/run.ts';\nexport const x = runController;\n"],
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
