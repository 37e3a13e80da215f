// A numbered step list with timings, for the demo's console output:
//   [ 4/13] Starting PostgreSQL (embedded) ...
//           ok in 2.1s: postgres on 127.0.0.1:41234
// Long steps print a heartbeat every 30 s; a failed step prints its error and rethrows it as a StepError.
import { systemClock } from '../clock.ts';

export class StepError extends Error {
  constructor(
    readonly step: string,
    override readonly cause: unknown,
  ) {
    super(`${step}: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.name = 'StepError';
  }
}

export function seconds(ms: number): string {
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)}s`;
  return `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, '0')}s`;
}

export interface StepTiming {
  title: string;
  ms: number;
}

export class Steps {
  private n = 0;
  readonly timings: StepTiming[] = [];
  private readonly started = systemClock.now();

  constructor(
    private readonly total: number,
    private readonly out: (line: string) => void,
    /** Checked before each step: true stops the list (a StepError "stopped"). */
    private readonly cancelled: () => boolean = () => false,
    private readonly heartbeatMs = 30_000,
  ) {}

  /** Runs one step; `note` adds a line under it (shown after the step's "ok"). */
  async run<T>(title: string, fn: (note: (line: string) => void) => Promise<T>): Promise<T> {
    if (this.cancelled()) throw new StepError(title, new Error('stopped before this step'));
    this.n++;
    const width = String(this.total).length;
    this.out(`[${String(this.n).padStart(width)}/${this.total}] ${title} ...`);
    const indent = ' '.repeat(width * 2 + 4);
    const notes: string[] = [];
    const t0 = systemClock.now();
    const beat = setInterval(() => this.out(`${indent}... still working (${seconds(systemClock.now() - t0)})`), this.heartbeatMs);
    try {
      const v = await fn((line) => notes.push(line));
      const ms = systemClock.now() - t0;
      this.timings.push({ title, ms });
      this.out(`${indent}ok in ${seconds(ms)}${notes.length ? `: ${notes[0]}` : ''}`);
      for (const line of notes.slice(1)) this.out(`${indent}${line}`);
      return v;
    } catch (e) {
      this.out(`${indent}FAILED after ${seconds(systemClock.now() - t0)}: ${e instanceof Error ? e.message : String(e)}`);
      throw new StepError(title, e);
    } finally {
      clearInterval(beat);
    }
  }

  elapsed(): string {
    return seconds(systemClock.now() - this.started);
  }
}
