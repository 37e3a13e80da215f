// Progress of a command's slow steps (starting the embedded PostgreSQL, asking the cluster, calling the API), on stderr
// so that stdout stays the answer alone (a table, JSON or YAML to pipe). Shown when stderr is a terminal or with
// --progress; otherwise nothing. One line per step, with the seconds since the command started:
//   [  0.0s] starting the embedded PostgreSQL (data in /home/me/.local/share/better-compute/postgres)
//   [  3.1s] reading the reservations
//   [  3.2s] done
import { systemClock } from '../clock.ts';

export interface Progress {
  /** A step begins (the previous one, if any, is over). */
  step(what: string): void;
  /** The command's work is over. */
  done(): void;
}

export interface ProgressOptions {
  /** `--progress`. */
  flag?: boolean | undefined;
  /** Whether stderr is a terminal. */
  isTTY?: boolean | undefined;
  write: (text: string) => void;
  now?: () => number;
}

const silent: Progress = { step() {}, done() {} };

export function createProgress(o: ProgressOptions): Progress {
  if (!o.flag && !o.isTTY) return silent;
  const now = o.now ?? (() => systemClock.now());
  const started = now();
  let steps = 0;
  const line = (text: string) => o.write(`[${((now() - started) / 1000).toFixed(1).padStart(5)}s] ${text}\n`);
  return {
    step(what) {
      steps++;
      line(what);
    },
    done() {
      if (steps > 0) line('done');
    },
  };
}

/** The step that opens the database, in words: the embedded server takes seconds to start (and to create, once). */
export function openingStep(config: { databaseUrl?: string | undefined; dataDir: string }): string {
  if (config.databaseUrl) return `connecting to the database (${redactedUrl(config.databaseUrl)})`;
  return `starting the embedded PostgreSQL (data in ${config.dataDir}/postgres)`;
}

/** A database URL without its password. */
export function redactedUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return 'DATABASE_URL';
  }
}
