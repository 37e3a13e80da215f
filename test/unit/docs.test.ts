// The documents a user reads: the README stays a user's page (issue 34: at most 250 lines, no benchmark figures),
// docs/performance.md holds one current table per benchmark that package.json runs, and every relative link in the
// README and docs/ points at a file that exists (and, for #anchors, at a heading of that file).
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const root = path.resolve(import.meta.dirname, '../..');
const read = (p: string) => fs.readFileSync(path.join(root, p), 'utf8');

/** GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

function headingsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  let inFence = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) inFence = !inFence;
    const m = !inFence && /^#{1,6}\s+(.*)$/.exec(line);
    if (m) anchors.add(anchorOf(m[1]!));
  }
  return anchors;
}

/** The `## name` sections of a markdown text with their bodies. */
function sectionsOf(markdown: string): Map<string, string> {
  const sections = new Map<string, string>();
  for (const part of markdown.split(/^## /m).slice(1)) {
    const nl = part.indexOf('\n');
    sections.set(part.slice(0, nl).trim(), part.slice(nl + 1));
  }
  return sections;
}

/** Markdown tables in a text: runs of lines starting with `|` whose second line is the `| --- |` rule. */
function tableCount(markdown: string): number {
  const lines = markdown.split('\n');
  let n = 0;
  for (let i = 1; i < lines.length; i++) {
    if (/^\|(\s*:?-+:?\s*\|)+\s*$/.test(lines[i]!) && lines[i - 1]!.startsWith('|')) n++;
  }
  return n;
}

function markdownFiles(): string[] {
  const docs = fs
    .readdirSync(path.join(root, 'docs'), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.md'))
    .map((f) => path.join('docs', f));
  return ['README.md', ...docs];
}

describe('the README and docs/', () => {
  it('the README is at most 250 lines and carries no benchmark table', () => {
    const readme = read('README.md');
    expect(readme.split('\n').length).toBeLessThanOrEqual(250);
    expect(readme).not.toMatch(/pods\/s|placements\/s|calls\/s/);
  });

  it('docs/performance.md has one section with exactly one table per benchmark in package.json', () => {
    const pkg = JSON.parse(read('package.json')) as { scripts: Record<string, string> };
    const benches = Object.keys(pkg.scripts).filter((s) => /^bench:/.test(s));
    expect(benches.length).toBeGreaterThan(0);
    const sections = sectionsOf(read('docs/performance.md'));
    for (const bench of benches) {
      expect(sections.has(bench), `docs/performance.md has no "## ${bench}" section`).toBe(true);
      expect(tableCount(sections.get(bench)!), `"## ${bench}" must hold one current table`).toBe(1);
    }
  });

  it('every relative link points at a file that exists, and every #anchor at one of its headings', () => {
    const broken: string[] = [];
    for (const file of markdownFiles()) {
      const text = read(file).replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '');
      for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1]!;
        if (/^[a-z]+:/i.test(target)) continue;
        const [rel, anchor] = target.split('#') as [string, string | undefined];
        const resolved = rel === '' ? path.join(root, file) : path.resolve(path.dirname(path.join(root, file)), rel);
        if (!fs.existsSync(resolved)) {
          broken.push(`${file}: ${target} (no such file)`);
          continue;
        }
        if (anchor && resolved.endsWith('.md') && !headingsOf(fs.readFileSync(resolved, 'utf8')).has(anchor)) {
          broken.push(`${file}: ${target} (no such heading)`);
        }
      }
    }
    expect(broken).toEqual([]);
  });
});
