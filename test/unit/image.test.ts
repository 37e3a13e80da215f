// Invariants of the container image (Dockerfile, scripts/image/build.sh) that a build would otherwise only reveal when
// it runs: offline, the base must carry the name both FROM lines use; the final stage runs as 65532; the ENTRYPOINT is
// what `npm run build` emits; the files the code reads at run time sit where the code looks for them.
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { MIGRATIONS_DIR } from '../../src/db/migrate.ts';

const ROOT = path.resolve(import.meta.dirname, '..', '..');
const read = (file: string): string => fs.readFileSync(path.join(ROOT, file), 'utf8');

interface Instruction {
  op: string;
  args: string;
}

/** Dockerfile instructions by stage (continuation lines joined, comments dropped). */
function stages(text: string): Instruction[][] {
  const lines = text.replace(/\\\n/g, ' ').split('\n');
  const out: Instruction[][] = [];
  for (const line of lines) {
    const m = /^\s*([A-Za-z]+)\s+(.*)$/.exec(line);
    if (!m || line.trimStart().startsWith('#')) continue;
    const ins = { op: m[1]!.toUpperCase(), args: m[2]!.trim() };
    if (ins.op === 'FROM') out.push([]);
    out.at(-1)?.push(ins);
  }
  return out;
}

const dockerfile = stages(read('Dockerfile'));
const final = dockerfile.at(-1)!;
const script = read('scripts/image/build.sh');
const pkg = JSON.parse(read('package.json')) as { version: string; scripts: Record<string, string> };
const scriptVar = (name: string): string => {
  const m = new RegExp(`^${name}="([^"]+)"$`, 'm').exec(script);
  if (!m) throw new Error(`${name}= not found in build.sh`);
  return m[1]!;
};

/** Destination of each COPY in the final stage, resolved against WORKDIR. */
function copyDestinations(stage: Instruction[]): string[] {
  let workdir = '/';
  const out: string[] = [];
  for (const ins of stage) {
    if (ins.op === 'WORKDIR') workdir = path.posix.resolve(workdir, ins.args);
    if (ins.op === 'COPY') out.push(path.posix.resolve(workdir, ins.args.split(/\s+/).at(-1)!));
  }
  return out;
}

describe('container image', () => {
  it('builds in two stages from the one base that build.sh makes offline', () => {
    expect(dockerfile.length).toBe(2);
    const froms = dockerfile.map((s) => s[0]!.args.split(/\s+/)[0]);
    const base = scriptVar('BASE_IMAGE');
    expect(froms).toEqual([base, base]);
    // The base's Node.js is the major version the project targets.
    const major = scriptVar('NODE_VERSION').split('.')[0];
    expect(base).toMatch(new RegExp(`^node:${major}-`));
    expect((JSON.parse(read('package.json')) as { engines: { node: string } }).engines.node).toBe(`>=${major}`);
  });

  it('runs as uid/gid 65532 with the CLI as ENTRYPOINT, and 65532 has a passwd entry for PostgreSQL', () => {
    const users = final.filter((i) => i.op === 'USER').map((i) => i.args);
    expect(users.at(-1)).toBe('65532:65532');
    const passwd = final.find((i) => i.op === 'RUN' && i.args.includes('/etc/passwd'));
    expect(passwd?.args).toMatch(/:x:65532:65532:/);
    const entry = final.filter((i) => i.op === 'ENTRYPOINT').at(-1);
    expect(JSON.parse(entry!.args)).toEqual(['node', '/app/dist/cli/main.js']);
    const env = final.filter((i) => i.op === 'ENV').map((i) => i.args).join(' ');
    expect(env).toMatch(/NODE_ENV=production/);
    expect(env).toMatch(/TMPDIR=\/tmp/);
  });

  it('ENTRYPOINT is the file `npm run build` emits for src/cli/main.ts', () => {
    expect(pkg.scripts.build).toBe('tsc -p tsconfig.build.json');
    const configFile = path.join(ROOT, 'tsconfig.build.json');
    const { config } = ts.readConfigFile(configFile, ts.sys.readFile) as { config: unknown };
    const parsed = ts.parseJsonConfigFileContent(config, ts.sys, ROOT, undefined, configFile);
    expect(parsed.errors).toEqual([]);
    expect(parsed.options.rewriteRelativeImportExtensions).toBe(true);
    expect(parsed.options.noEmit).toBe(false);
    const main = path.join(ROOT, 'src', 'cli', 'main.ts');
    expect(parsed.fileNames).toContain(main);
    const js = ts.getOutputFileNames(parsed, main, false).find((f) => f.endsWith('.js'))!;
    expect(path.relative(ROOT, js)).toBe(path.join('dist', 'cli', 'main.js'));
    // dist/ holds build output only: never committed.
    expect(read('.gitignore').split('\n')).toContain('dist/');
  });

  it('puts package.json, migrations/ and proto/ where the built code looks for them', () => {
    const dests = copyDestinations(final);
    // dist/ mirrors src/ (rootDir src): a path the code builds relative to src/<dir>/ holds relative to dist/<dir>/.
    const migrations = path.posix.join('/app/dist/db', path.relative(path.join(ROOT, 'src', 'db'), MIGRATIONS_DIR));
    expect(dests).toContain(migrations);
    const grpc = read('src/agent/grpc.ts');
    expect(grpc).toMatch(/PROTO_DIR = path\.join\(import\.meta\.dirname, '\.\.', '\.\.', 'proto'\)/);
    expect(dests).toContain(path.posix.join('/app/dist/agent', '..', '..', 'proto'));
    // "type": "module" for the .js files in dist/.
    expect(dests).toContain('/app/package.json');
    expect(dests).toContain('/app/dist');
    expect(dests).toContain('/app/node_modules');
  });

  it('sends into the build context everything the Dockerfile copies from it', () => {
    const ignore = read('.dockerignore')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    expect(ignore[0]).toBe('*');
    const allowed = ignore.filter((l) => l.startsWith('!')).map((l) => l.slice(1).replace(/\/$/, ''));
    const sources = dockerfile
      .flat()
      .filter((i) => i.op === 'COPY' && !i.args.startsWith('--from'))
      .flatMap((i) => i.args.split(/\s+/).slice(0, -1));
    expect(sources.length).toBeGreaterThan(0);
    for (const src of sources) expect(allowed).toContain(src.replace(/\/$/, ''));
  });

  it('tags the image with the package version, and docs/operations.md says so', () => {
    expect(script).toMatch(/^version="\$\(node -p 'require\("\.\/package\.json"\)\.version'\)"$/m);
    expect(script).toMatch(/^app_image="better-compute:\$version"$/m);
    expect(pkg.scripts.image).toBe('bash scripts/image/build.sh');
    expect(read('docs/operations.md')).toContain(`docker build -t better-compute:${pkg.version} .`);
  });
});
