// Structured logs: one JSON object per line. The timestamp is the process's wall clock, for people reading logs;
// nothing decides on it.
import { systemClock } from './clock.ts';
export type LogLevel = 'debug' | 'info' | 'warn' | 'error';

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
}

export function createLogger(opts: { level?: LogLevel; write?: (line: string) => void } = {}): Logger {
  const min = RANK[opts.level ?? 'info'];
  const write = opts.write ?? ((line: string) => process.stdout.write(`${line}\n`));
  const emit = (level: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (RANK[level] < min) return;
    write(JSON.stringify({ time: systemClock.wallNow().toISOString(), level, msg, ...fields }));
  };
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
  };
}

/** Discards everything (tests). */
export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };

/** An error's message and stack as log fields. */
export function errorFields(e: unknown): Record<string, unknown> {
  if (e instanceof Error) return { error: e.message, ...(e.stack ? { stack: e.stack } : {}) };
  return { error: String(e) };
}
