// Units a page long (issue 36), held by `npm run lint` (eslint.config.js): a function of src/ has at most 60 lines,
// blank lines and comments not counted; tests and benchmarks are outside the rule.
import path from 'node:path';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const ROOT = path.join(import.meta.dirname, '..', '..');
const eslint = new ESLint({ cwd: ROOT });
const SLOW = 60_000;

/** A function of `statements` lines between its opening and closing lines, with blank lines and comments between. */
function fn(statements: number): string {
  const body = Array.from({ length: statements }, (_, i) => `  const v${i} = ${i};\n\n  // v${i}\n`).join('');
  return `export function long(): number {\n${body}  return 0;\n}\n`;
}

async function pageRefusals(file: string, text: string): Promise<string[]> {
  const [r] = await eslint.lintText(text, { filePath: path.join(ROOT, file) });
  return r!.messages.filter((m) => m.ruleId === 'max-lines-per-function').map((m) => m.message);
}

describe('units a page long', () => {
  it('a function of src/ over 60 lines is refused', async () => {
    // 58 statements + the return + the two lines of the function itself: 61.
    const got = await pageRefusals('src/controller/leader.ts', fn(58));
    expect(got).toHaveLength(1);
    expect(got[0]).toMatch(/too many lines \(61\)/);
  }, SLOW);

  it.each([
    ['src/controller/leader.ts', fn(57)],
    ['src/controller/leader.test.ts', fn(200)],
    ['bench/database.ts', fn(200)],
  ])('%s may hold this one', async (file, text) => {
    expect(await pageRefusals(file, text)).toEqual([]);
  }, SLOW);
});
