import tseslint from 'typescript-eslint';

const SERVICES = ['api', 'ui', 'extender', 'agentapi', 'admission', 'jobs', 'metrics', 'agent'];
const ABOVE_DB = [...SERVICES, 'controller', 'cli', 'demo'].map((d) => `**/${d}/**`);
const PURE = ['pg', '@kubernetes/*', 'express', '@grpc/*', 'node:fs', 'node:net', 'node:http', 'node:https', 'node:child_process'];

/** One config per layer: what it may not import (patterns of import paths), with the layering's message. */
function layers(specs) {
  return specs.map(({ files, above, except = [] }) => ({
    files,
    ignores: ['**/*.test.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: [...above, ...except.map((e) => `!${e}`)], message: 'A layer imports its own or a lower one (docs/architecture.md).' },
            ...(files[0] === 'src/core/**/*.ts' ? [{ group: PURE, message: 'The planning core is pure: no I/O.' }] : []),
          ],
        },
      ],
    },
  }));
}

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'coverage/**', '.data/**'] },
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  // The layers (docs/architecture.md): an import goes to its own layer or a lower one, never up.
  //   core (pure) <- base (src/*.ts: config, log, ids, signals) <- db | kube <- services <- controller <- cli, demo
  // Tests are outside the rule: they may reach any layer to set one up.
  ...layers([
    { files: ['src/core/**/*.ts'], above: ['../*', '../../*'] },
    { files: ['src/*.ts'], above: ['./*/**'], except: ['./core/**'] },
    { files: ['src/db/**/*.ts'], above: [...ABOVE_DB, '**/kube/**'] },
    { files: ['src/kube/**/*.ts'], above: [...ABOVE_DB, '**/db/**'] },
    { files: SERVICES.map((d) => `src/${d}/**/*.ts`), above: ['**/controller/**', '**/cli/**', '**/demo/**'] },
    { files: ['src/controller/**/*.ts'], above: ['**/cli/**', '**/demo/**'] },
  ]),
  {
    // One clock (ADR 0033): elapsed time, timers and the wall time come from src/clock.ts (injected where a decision
    // depends on them, so that tests move a FakeClock), never from performance.now(), Date.now() or new Date().
    files: ['src/**/*.ts'],
    ignores: ['**/*.test.ts', 'src/clock.ts'],
    rules: {
      'no-restricted-properties': [
        'error',
        { object: 'Date', property: 'now', message: 'Use the clock (src/clock.ts: wallNow), injected where a decision depends on it (ADR 0033).' },
        { object: 'performance', property: 'now', message: 'Use the clock (src/clock.ts: now), injected where a decision depends on it (ADR 0033).' },
      ],
      'no-restricted-syntax': [
        'error',
        { selector: "NewExpression[callee.name='Date'][arguments.length=0]", message: 'new Date() reads the wall clock: use clock.wallNow() (src/clock.ts, ADR 0033).' },
      ],
    },
  },
  {
    // Units a page long (issue 36): a function of src/ reads on one screen; a longer one is split into named pieces.
    // Tests and benchmarks are outside the rule (a test's setup and table are read as one).
    files: ['src/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: {
      'max-lines-per-function': ['error', { max: 60, skipBlankLines: true, skipComments: true }],
    },
  },
  {
    // The planning core is pure: no database, no Kubernetes client, no HTTP, no clock.
    files: ['src/core/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: {
      'no-restricted-properties': [
        'error',
        { object: 'Date', property: 'now', message: 'Pass the clock in.' },
        { object: 'performance', property: 'now', message: 'Pass the clock in.' },
      ],
    },
  },
);
