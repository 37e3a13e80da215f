// `better-compute serve` as a child process (the real command: bin/better-compute.js), on a given database, with a
// token file; its JSON log lines are collected. The API tests that need many requests use it so that the server and
// the test's client run on separate cores.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../src/db/embedded.ts';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const CLI = path.join(REPO_ROOT, 'bin', 'better-compute.js');

export interface ServeProcess {
  url: string;
  child: ChildProcess;
  /** Parsed log lines so far (stdout), and whatever came on stderr. */
  logs: Record<string, unknown>[];
  stderr: string[];
  /** SIGTERM, then the exit code (SIGKILL after `timeoutMs`). */
  stop(timeoutMs?: number): Promise<number | null>;
}

export async function writeTokenFile(tokens: { token: string; subject: string; tenants: string[] }[]): Promise<{ file: string; remove(): Promise<void> }> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-tokens-'));
  const file = path.join(dir, 'tokens.yaml');
  await fs.writeFile(file, `tokens:\n${tokens.map((t) => `  - token: ${t.token}\n    subject: ${t.subject}\n    tenants: ${JSON.stringify(t.tenants)}\n`).join('')}`);
  return { file, remove: () => fs.rm(dir, { recursive: true, force: true }) };
}


/**
 * Starts `serve` and resolves once it answers /healthz. Logs at `LOG_LEVEL` (env); at `info` each request is a line.
 */
export async function startServeProcess(opts: { databaseUrl: string; tokenFile: string; env?: Record<string, string>; args?: string[] }): Promise<ServeProcess> {
  const port = await freePort();
  const child = spawn(process.execPath, [CLI, 'serve', ...(opts.args ?? [])], {
    cwd: REPO_ROOT,
    env: {
      ...process.env,
      DATABASE_URL: opts.databaseUrl,
      BETTER_COMPUTE_TOKEN_FILE: opts.tokenFile,
      HOST: '127.0.0.1',
      PORT: String(port),
      LOG_LEVEL: 'info',
      ...opts.env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const logs: Record<string, unknown>[] = [];
  const stderr: string[] = [];
  let buffered = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const url = `http://127.0.0.1:${port}`;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not start: ${stderr.join('')}`)), 60_000);
    const poll = setInterval(() => {
      fetch(`${url}/healthz`).then(
        (r) => {
          if (!r.ok) return;
          clearInterval(poll);
          clearTimeout(timer);
          resolve();
        },
        () => undefined,
      );
    }, 100);
    void exited.then((code) => {
      clearInterval(poll);
      clearTimeout(timer);
      reject(new Error(`serve exited with ${code} before listening: ${stderr.join('')}`));
    });
    child.stdout!.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        let entry: Record<string, unknown>;
        try {
          entry = JSON.parse(line) as Record<string, unknown>;
        } catch {
          entry = { level: 'unparsed', line };
        }
        logs.push(entry);
      }
    });
    child.stderr!.on('data', (chunk: Buffer) => stderr.push(chunk.toString('utf8')));
  });
  return {
    url,
    child,
    logs,
    stderr,
    async stop(timeoutMs = 15_000) {
      if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
      child.kill('SIGTERM');
      const kill = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(kill);
      return code;
    },
  };
}
