// Runs one of tools/ (a Go program that uses the API server's own code offline) with `go run`, on the build cache the
// cluster build shares (e2e/cluster/build.sh), and returns its verdict lines (`ok: …` / `FAIL: …`).
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const GO = fs.existsSync('/usr/local/go/bin/go') ? '/usr/local/go/bin/go' : 'go';
const GOCACHE = process.env.BC_GOCACHE ?? path.join(os.homedir(), '.cache/better-compute/go-build');

export async function goToolVerdicts(tool: string, args: string[]): Promise<string[]> {
  const { stdout } = await promisify(execFile)(GO, ['run', '.', ...args], {
    cwd: path.join(import.meta.dirname, '../../tools', tool),
    env: { ...process.env, GOCACHE, GOFLAGS: '-buildvcs=false', CGO_ENABLED: '0' },
    maxBuffer: 16 * 1024 * 1024,
  }).catch((e: { stdout?: string; message: string }) => {
    throw new Error(`${tool} failed:\n${e.stdout ?? ''}\n${e.message}`);
  });
  return stdout.split('\n').filter((l) => /^(ok|FAIL):/.test(l));
}
