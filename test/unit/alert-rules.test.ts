// deploy/monitoring/prometheusrule.yaml under `promtool test rules`: the PrometheusRule's groups are written to a
// plain rules file beside copies of deploy/monitoring/tests/*.yaml, which promtool runs. Every alert has a case where
// it fires and one where it does not; a test naming an alert that does not exist would pass vacuously, so that is
// refused too. The removed CounterDrift rule stays removed.
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { ensurePrometheus } from '../support/prometheus.ts';

const run = promisify(execFile);
const MONITORING = path.join(import.meta.dirname, '../../deploy/monitoring');
const RULES_FILE = 'better-compute.rules.yaml';

interface RuleTest {
  name: string;
  alert_rule_test?: { alertname: string; exp_alerts?: unknown[] }[];
}

let promtool: string;
let dir: string;
let testFiles: string[];

async function promtoolRun(args: string[]): Promise<{ code: number; output: string }> {
  try {
    const { stdout, stderr } = await run(promtool, args, { cwd: dir, maxBuffer: 16 << 20 });
    return { code: 0, output: stdout + stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof err.code === 'number' ? err.code : -1, output: `${err.stdout ?? ''}${err.stderr ?? ''}` };
  }
}

async function alertsOfRules(): Promise<string[]> {
  const rule = YAML.parse(await fs.readFile(path.join(MONITORING, 'prometheusrule.yaml'), 'utf8')) as {
    spec: { groups: { rules: { alert?: string }[] }[] };
  };
  return rule.spec.groups.flatMap((g) => g.rules.flatMap((r) => (r.alert ? [r.alert] : [])));
}

beforeAll(async () => {
  ({ promtool } = await ensurePrometheus());
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-alert-rules-'));
  const rule = YAML.parse(await fs.readFile(path.join(MONITORING, 'prometheusrule.yaml'), 'utf8')) as { spec: { groups: unknown[] } };
  await fs.writeFile(path.join(dir, RULES_FILE), YAML.stringify({ groups: rule.spec.groups }));
  testFiles = (await fs.readdir(path.join(MONITORING, 'tests'))).filter((f) => f.endsWith('.yaml')).sort();
  for (const f of testFiles) await fs.copyFile(path.join(MONITORING, 'tests', f), path.join(dir, f));
}, 300_000);

afterAll(async () => {
  if (dir) await fs.rm(dir, { recursive: true, force: true });
});

describe('alert rules (promtool)', () => {
  it('the rules are valid (promtool check rules)', async () => {
    const r = await promtoolRun(['check', 'rules', RULES_FILE]);
    expect(r.code, r.output).toBe(0);
  });

  it('every test case passes (promtool test rules)', async () => {
    expect(testFiles.length).toBeGreaterThan(0);
    const r = await promtoolRun(['test', 'rules', ...testFiles]);
    expect(r.code, r.output).toBe(0);
    expect(r.output).not.toMatch(/FAILED/);
  });

  it('every alert has a case where it fires and one where it does not; tests name only alerts that exist', async () => {
    const alerts = await alertsOfRules();
    expect(alerts.length).toBeGreaterThan(0);
    const fires = new Set<string>();
    const quiet = new Set<string>();
    for (const f of testFiles) {
      const doc = YAML.parse(await fs.readFile(path.join(dir, f), 'utf8')) as { rule_files: string[]; tests: RuleTest[] };
      expect(doc.rule_files, f).toEqual([RULES_FILE]);
      for (const t of doc.tests) {
        for (const a of t.alert_rule_test ?? []) {
          expect(alerts.includes(a.alertname), `${f}: "${t.name}" names no alert rule: ${a.alertname}`).toBe(true);
          ((a.exp_alerts ?? []).length > 0 ? fires : quiet).add(a.alertname);
        }
      }
    }
    expect(alerts.filter((a) => !fires.has(a)), 'alerts without a case where they fire').toEqual([]);
    expect(alerts.filter((a) => !quiet.has(a)), 'alerts without a case where they do not fire').toEqual([]);
    // It fired on every calendar booking (an atom booked now and later counts in both); tests/drift.yaml keeps that
    // calendar case for the drift alerts.
    expect(alerts).not.toContain('BetterComputeCounterDrift');
  });

  it('a wrong expectation fails (the harness really evaluates the rules)', async () => {
    await fs.writeFile(
      path.join(dir, 'wrong.yaml'),
      YAML.stringify({
        rule_files: [RULES_FILE],
        evaluation_interval: '1m',
        tests: [
          {
            interval: '1m',
            input_series: [{ series: 'bettercompute_controller_leader{pod="ctl-0"}', values: '1x20' }],
            alert_rule_test: [{ eval_time: '15m', alertname: 'BetterComputeNoLeader', exp_alerts: [{ exp_labels: { severity: 'critical' } }] }],
          },
        ],
      }),
    );
    const r = await promtoolRun(['test', 'rules', 'wrong.yaml']);
    expect(r.code).not.toBe(0);
    expect(r.output).toMatch(/FAILED/);
  });
});
