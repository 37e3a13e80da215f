// The one clock (ADR 0033), held by `npm run lint` (eslint.config.js): performance.now(), Date.now() and new Date()
// are refused in src/ outside src/clock.ts; the clock module itself, new Date(ms) and tests may use them.
import path from 'node:path';
import { ESLint } from 'eslint';
import { describe, expect, it } from 'vitest';

const ROOT = path.join(import.meta.dirname, '..', '..');
const eslint = new ESLint({ cwd: ROOT });
const SLOW = 60_000;

async function clockRefusals(file: string, text: string): Promise<string[]> {
  const [r] = await eslint.lintText(text, { filePath: path.join(ROOT, file) });
  return r!.messages.filter((m) => m.ruleId === 'no-restricted-properties' || m.ruleId === 'no-restricted-syntax').map((m) => m.message);
}

describe('the one clock', () => {
  it.each([
    ['src/extender/service.ts', 'export const t = performance.now();\n', /src\/clock\.ts: now/],
    ['src/controller/leader.ts', 'export const t = Date.now();\n', /src\/clock\.ts: wallNow/],
    ['src/kube/informer.ts', 'export const t = new Date();\n', /clock\.wallNow\(\)/],
    ['src/log.ts', 'export const t = Date.now();\n', /ADR 0033/],
    ['src/core/planner.ts', 'export const t = performance.now();\n', /Pass the clock in/],
  ])('%s may not read the clock itself', async (file, text, message) => {
    const got = await clockRefusals(file, text);
    expect(got).toHaveLength(1);
    expect(got[0]).toMatch(message);
  }, SLOW);

  it.each([
    ['src/clock.ts', 'export const t = performance.now() + Date.now() + new Date().getTime();\n'],
    ['src/controller/certs.ts', 'export const t = new Date(0);\n'],
    ['src/controller/leader.test.ts', 'export const t = Date.now();\n'],
  ])('%s may', async (file, text) => {
    expect(await clockRefusals(file, text)).toEqual([]);
  }, SLOW);
});
