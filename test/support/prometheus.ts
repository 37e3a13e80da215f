// Debian's prometheus package for the metrics tests: `promtool check metrics`, and a real Prometheus server on
// loopback that scrapes our /metrics. Installed with apt-get when missing (the tests run as root); services are
// never started by the install (policy-rc.d).
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../../src/db/embedded.ts';

const run = promisify(execFile);

async function which(cmd: string): Promise<string | undefined> {
  try {
    const { stdout } = await run('sh', ['-c', `command -v ${cmd}`]);
    return stdout.trim() || undefined;
  } catch {
    return undefined;
  }
}

/** Paths of promtool and prometheus, installing Debian's `prometheus` package first if either is missing. */
export async function ensurePrometheus(): Promise<{ promtool: string; prometheus: string }> {
  let promtool = await which('promtool');
  let prometheus = await which('prometheus');
  if (!promtool || !prometheus) {
    const policy = '/usr/sbin/policy-rc.d';
    const hadPolicy = await fs.stat(policy).then(() => true, () => false);
    if (!hadPolicy) await fs.writeFile(policy, '#!/bin/sh\nexit 101\n', { mode: 0o755 });
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    const install = () => run('apt-get', ['install', '-y', '--no-install-recommends', 'prometheus'], { env, maxBuffer: 64 << 20 });
    try {
      await install().catch(async () => {
        await run('apt-get', ['update'], { env, maxBuffer: 64 << 20 });
        await install();
      });
    } finally {
      if (!hadPolicy) await fs.rm(policy, { force: true });
    }
    promtool = await which('promtool');
    prometheus = await which('prometheus');
  }
  if (!promtool || !prometheus) throw new Error('apt-get install prometheus did not provide promtool and prometheus');
  return { promtool, prometheus };
}

/** `promtool check metrics` on a scrape: its exit code and what it said. */
export async function promtoolCheck(promtool: string, text: string): Promise<{ code: number; output: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(promtool, ['check', 'metrics'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let output = '';
    p.stdout.on('data', (c: Buffer) => (output += c.toString()));
    p.stderr.on('data', (c: Buffer) => (output += c.toString()));
    p.on('error', reject);
    p.on('close', (code) => resolve({ code: code ?? -1, output }));
    p.stdin.end(text);
  });
}

export interface PrometheusServer {
  url: string;
  /** Instant query; returns the result vector. */
  query(q: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]>;
  stop(): Promise<void>;
  logs(): string;
}

/** A Prometheus server on loopback (random port, temporary data dir) scraping `targetUrl`'s /metrics every second. */
export async function startPrometheus(binary: string, target: { host: string; port: number }): Promise<PrometheusServer> {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'bc-prometheus-'));
  const config = path.join(dir, 'prometheus.yml');
  await fs.writeFile(
    config,
    [
      'global:',
      '  scrape_interval: 1s',
      '  evaluation_interval: 1s',
      'scrape_configs:',
      '  - job_name: better-compute',
      '    metrics_path: /metrics',
      '    static_configs:',
      `      - targets: ['${target.host}:${target.port}']`,
      '',
    ].join('\n'),
  );
  const port = await freePort();
  let output = '';
  const child: ChildProcess = spawn(
    binary,
    [
      `--config.file=${config}`,
      `--storage.tsdb.path=${path.join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--web.console.templates=',
      '--web.console.libraries=',
      '--storage.tsdb.retention.time=1h',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const kill = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(kill);
    }
    await fs.rm(dir, { recursive: true, force: true });
  };
  // Ready when its readiness endpoint says so.
  const deadline = performance.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`prometheus exited: ${output}`);
    }
    const ok = await fetch(`${url}/-/ready`).then((r) => r.ok, () => false);
    if (ok) break;
    if (performance.now() > deadline) {
      await stop();
      throw new Error(`prometheus not ready: ${output}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    url,
    logs: () => output,
    stop,
    async query(q) {
      const r = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(q)}`);
      const body = (await r.json()) as { status: string; data: { result: { metric: Record<string, string>; value: [number, string] }[] } };
      if (body.status !== 'success') throw new Error(`query failed: ${JSON.stringify(body)}`);
      return body.data.result;
    },
  };
}
