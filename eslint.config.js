import path from 'node:path';
import tseslint from 'typescript-eslint';

const ROOT = import.meta.dirname;
const PURE = ['pg', '@kubernetes/', 'express', '@grpc/', 'node:fs', 'node:net', 'node:http', 'node:https', 'node:child_process'];

// What each folder may import besides itself (docs/architecture.md). `base` is src/*.ts (config, log, ids, signals,
// scavenge, clock). A folder not named here imports freely (tools/); tests (*.test.ts) are outside the rule.
const SERVICE_FLOOR = ['base', 'core'];
const ALLOWED = {
  core: [],
  base: ['core'],
  db: SERVICE_FLOOR,
  kube: SERVICE_FLOOR,
  http: SERVICE_FLOOR,
  // The services: each names what it uses; none imports another, except the calendar (ui) its API and the agent the
  // wire format of the agents' API. The agent holds no database credentials: it never imports db/.
  metrics: ['db', ...SERVICE_FLOOR],
  jobs: ['db', ...SERVICE_FLOOR],
  agentapi: ['db', 'http', ...SERVICE_FLOOR],
  agent: ['agentapi', 'kube', ...SERVICE_FLOOR],
  admission: ['db', 'kube', 'http', ...SERVICE_FLOOR],
  extender: ['db', 'kube', 'http', ...SERVICE_FLOOR],
  api: ['db', 'kube', 'http', 'metrics', ...SERVICE_FLOOR],
  ui: ['api', 'db', 'kube', 'http', ...SERVICE_FLOOR],
  controller: ['api', 'ui', 'extender', 'agentapi', 'admission', 'jobs', 'metrics', 'db', 'kube', 'http', ...SERVICE_FLOOR],
  cli: ['controller', 'agent', 'api', 'ui', 'extender', 'agentapi', 'admission', 'jobs', 'metrics', 'db', 'kube', 'http', ...SERVICE_FLOOR],
  demo: ['cli', 'controller', 'agent', 'api', 'ui', 'extender', 'agentapi', 'admission', 'jobs', 'metrics', 'db', 'kube', 'http', ...SERVICE_FLOOR],
  // Outside src/: scripts build and install the product (src/ only); the cluster tests take the scripts and the test
  // support; benchmarks take anything. src/ never imports any of them.
  scripts: ['src'],
  e2e: ['src', 'scripts', 'test'],
  bench: ['src', 'scripts', 'e2e', 'test'],
};

/** The rule's name for a file or import target: a folder of src/ (base for src/*.ts), else the top folder. */
function folderOf(abs) {
  const parts = path.relative(ROOT, abs).split(path.sep);
  if (parts[0] !== 'src') return parts[0];
  return parts.length === 2 ? 'base' : parts[1];
}

/** Whether `from` may import `to` (folders as folderOf names them). */
function mayImport(from, to) {
  if (from === to) return true;
  const allowed = ALLOWED[from];
  if (!allowed) return true;
  const inSrc = (f) => f === 'base' || Object.hasOwn(ALLOWED, f) && !['scripts', 'e2e', 'bench'].includes(f);
  return allowed.includes(to) || (allowed.includes('src') && inSrc(to));
}

/** The folders rule: every import, export-from and import() of a path checked against ALLOWED; core imports no I/O. */
const folders = {
  meta: { type: 'problem', schema: [] },
  create(context) {
    const file = context.filename;
    const from = folderOf(file);
    const check = (node, source) => {
      if (!source || source.type !== 'Literal' || typeof source.value !== 'string') {
        if (node.type === 'ImportExpression') context.report({ node, message: 'import() of a computed path: the layering cannot check it (docs/architecture.md).' });
        return;
      }
      const spec = source.value;
      if (!spec.startsWith('.')) {
        if (from === 'core' && PURE.some((p) => spec === p || (p.endsWith('/') ? spec.startsWith(p) : spec.startsWith(`${p}/`))))
          context.report({ node, message: 'The planning core is pure: no I/O.' });
        return;
      }
      const to = folderOf(path.resolve(path.dirname(file), spec));
      if (!mayImport(from, to)) {
        const allowed = ALLOWED[from].length ? ALLOWED[from].join(', ') : 'nothing else';
        context.report({ node, message: `${from} may not import ${to}: it imports ${allowed} (docs/architecture.md).` });
      }
    };
    return {
      ImportDeclaration: (n) => check(n, n.source),
      ExportNamedDeclaration: (n) => n.source && check(n, n.source),
      ExportAllDeclaration: (n) => check(n, n.source),
      ImportExpression: (n) => check(n, n.source),
    };
  },
};

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
  // The folders (docs/architecture.md): each imports only what ALLOWED names, never up and never sideways.
  {
    files: ['src/**/*.ts', 'scripts/**/*.ts', 'e2e/**/*.ts', 'bench/**/*.ts'],
    ignores: ['**/*.test.ts'],
    plugins: { bc: { rules: { folders } } },
    rules: { 'bc/folders': 'error' },
  },
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
