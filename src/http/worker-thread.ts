// Starting a worker thread from a script of src/: the compiled one (dist/, .js) as it is; a TypeScript one (the tests,
// `tsx src/cli/main.ts`) through tsx, registered in the worker before the script is imported (Node 20 does not hand
// `--import` loaders to workers). Used by the admission review pool (ADR 0047) and the webhook listener's TLS front
// (ADR 0048).
import os from 'node:os';
import { Worker } from 'node:worker_threads';

/** A worker running `script` with `workerData`. */
export function startWorker(script: URL, workerData: unknown): Worker {
  if (!script.pathname.endsWith('.ts')) return new Worker(script, { workerData });
  const tsx = import.meta.resolve('tsx/esm/api');
  return new Worker(`import(${JSON.stringify(tsx)}).then((m) => { m.register(); return import(${JSON.stringify(script.href)}); });`, { eval: true, workerData });
}

/** The script `name` (without extension) next to the module `moduleUrl`, compiled or not as that module is. */
export function siblingScript(moduleUrl: string, name: string): URL {
  return new URL(`./${name}${moduleUrl.endsWith('.ts') ? '.ts' : '.js'}`, moduleUrl);
}

/** Lowers this thread's priority (Linux: a thread's own; the event loop's stays). Where it cannot, it runs as it is. */
export function niceThisThread(nice: number): void {
  try {
    os.setPriority(nice);
  } catch {
    // Not permitted or not supported: the thread runs at the process's priority.
  }
}
