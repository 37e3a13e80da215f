// A vitest reporter beside the default one: at the end of a run, a table of where the time went, per project (its
// files, the wall time from its first file's start to its last file's end, the time in tests and hooks) and the
// slowest files, so that CI's time can be read off every `npm test` (docs/testing.md).
import path from 'node:path';
import type { Reporter, TestModule } from 'vitest/node';

interface Row {
  files: number;
  first: number;
  last: number;
  inTests: number;
}

export default class TimingReporter implements Reporter {
  private readonly started = new Map<string, number>();
  private readonly ended = new Map<string, number>();

  onTestModuleStart(m: TestModule): void {
    this.started.set(m.moduleId, Date.now());
  }

  onTestModuleEnd(m: TestModule): void {
    this.ended.set(m.moduleId, Date.now());
  }

  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const projects = new Map<string, Row>();
    const files: { name: string; project: string; seconds: number }[] = [];
    for (const m of modules) {
      const project = m.project.name || '(root)';
      const start = this.started.get(m.moduleId);
      const end = this.ended.get(m.moduleId);
      const inTests = m.diagnostic().duration / 1000;
      const row = projects.get(project) ?? { files: 0, first: Infinity, last: -Infinity, inTests: 0 };
      row.files++;
      row.inTests += inTests;
      if (start !== undefined) row.first = Math.min(row.first, start);
      if (end !== undefined) row.last = Math.max(row.last, end);
      projects.set(project, row);
      files.push({ name: path.relative(process.cwd(), m.moduleId), project, seconds: inTests });
    }
    if (projects.size === 0) return;
    const s = (x: number) => `${x.toFixed(1)} s`.padStart(10);
    const lines = ['', 'time per project (wall: first file started to last file ended; in tests: tests and hooks, summed)'];
    lines.push(`${'project'.padEnd(10)} ${'files'.padStart(6)} ${'wall'.padStart(10)} ${'in tests'.padStart(10)}`);
    for (const [name, r] of projects) {
      const wall = Number.isFinite(r.first) && Number.isFinite(r.last) ? (r.last - r.first) / 1000 : 0;
      lines.push(`${name.padEnd(10)} ${String(r.files).padStart(6)} ${s(wall)} ${s(r.inTests)}`);
    }
    lines.push('slowest files');
    for (const f of files.sort((a, b) => b.seconds - a.seconds).slice(0, 12)) lines.push(`  ${s(f.seconds)}  ${f.project.padEnd(8)} ${f.name}`);
    process.stdout.write(`${lines.join('\n')}\n`);
  }
}
