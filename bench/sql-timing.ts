// Where a bench's time goes on the database side (BENCH_SQL_TIMING=1): every statement of every pg client of this
// process timed from the moment it is handed to its connection until its answer (the server's work, lock waits and the
// round trip; not the wait for a free connection, which is timed apart), summed per statement text; and the event
// loop's delay (this process's own CPU being the bottleneck shows there). A bench tool only: it wraps pg.Client's query.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import pg from 'pg';

interface Stat {
  n: number;
  ms: number;
  max: number;
}

const stats = new Map<string, Stat>();
let acquire: Stat = { n: 0, ms: 0, max: 0 };
const loop = monitorEventLoopDelay({ resolution: 10 });

function add(s: Stat, ms: number) {
  s.n++;
  s.ms += ms;
  s.max = Math.max(s.max, ms);
}

/** A statement's key: its prepared name, or its text squeezed to one line and cut. */
function keyOf(config: unknown): string {
  if (typeof config === 'string') return config.replace(/\s+/g, ' ').slice(0, 90);
  const c = config as { name?: string; text?: string } | undefined;
  return c?.name ?? (c?.text ?? '?').replace(/\s+/g, ' ').slice(0, 90);
}

export function startSqlTiming(): void {
  type Query = (this: pg.Client, ...args: unknown[]) => unknown;
  const proto = pg.Client.prototype as unknown as { query: Query };
  const original = proto.query;
  proto.query = function (this: pg.Client, ...args: unknown[]) {
    const key = keyOf(args[0]);
    const t0 = performance.now();
    const done = () => {
      const s = stats.get(key) ?? { n: 0, ms: 0, max: 0 };
      add(s, performance.now() - t0);
      stats.set(key, s);
    };
    const last = args.length - 1;
    if (typeof args[last] === 'function') {
      const cb = args[last] as (...a: unknown[]) => void;
      args[last] = (...a: unknown[]) => {
        done();
        cb(...a);
      };
      return original.apply(this, args);
    }
    const r = original.apply(this, args) as Promise<unknown> | undefined;
    if (r && typeof r.then === 'function') r.then(done, done);
    return r;
  };
  type Connect = (this: pg.Pool, ...args: unknown[]) => unknown;
  const pool = pg.Pool.prototype as unknown as { connect: Connect };
  const connect = pool.connect;
  pool.connect = function (this: pg.Pool, ...args: unknown[]) {
    const t0 = performance.now();
    const r = connect.apply(this, args) as Promise<unknown> | undefined;
    if (r && typeof r.then === 'function') r.then(() => add(acquire, performance.now() - t0), () => undefined);
    return r;
  };
  loop.enable();
}

/** The statements that took the most time since the last report, and the event loop's delay; then starts afresh. */
export function sqlTimingReport(top = 15): string {
  const rows = [...stats].sort((a, b) => b[1].ms - a[1].ms).slice(0, top);
  const total = [...stats.values()].reduce((t, s) => t + s.ms, 0);
  const lines = [
    `#   SQL: ${total.toFixed(0)} ms in all statements; pool.connect ${acquire.n} calls, ${acquire.ms.toFixed(0)} ms, max ${acquire.max.toFixed(0)} ms; event loop delay p50 ${(loop.percentile(50) / 1e6).toFixed(1)} ms, p99 ${(loop.percentile(99) / 1e6).toFixed(1)} ms, max ${(loop.max / 1e6).toFixed(0)} ms`,
    ...rows.map(([k, s]) => `#   ${s.ms.toFixed(0).padStart(8)} ms ${String(s.n).padStart(7)} × mean ${(s.ms / s.n).toFixed(1).padStart(7)} max ${s.max.toFixed(0).padStart(6)}  ${k}`),
  ];
  stats.clear();
  acquire = { n: 0, ms: 0, max: 0 };
  loop.reset();
  return lines.join('\n');
}
