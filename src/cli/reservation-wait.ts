// `reservations wait ID`: polls one reservation until it reaches one of the states asked for, reporting each change
// (and every so often that it still waits) as progress on stderr. A reservation that ends in another state, or is gone,
// fails at once; the deadline fails with TIMEOUT. The reading, the clock and the pause are given (tests).
import { z } from 'zod';
import type { ReservationState } from '../db/ledger.ts';
import type { Progress } from './progress.ts';

export const WAIT_STATES = ['held', 'confirmed', 'released', 'expired'] as const satisfies readonly ReservationState[];
const ENDED: ReadonlySet<string> = new Set(['released', 'expired']);
const WaitStates = z.array(z.enum(WAIT_STATES)).min(1);

/** `--for confirmed,released` → the states; undefined when one is not a state. */
export function parseWaitStates(text: string): ReservationState[] | undefined {
  const parsed = WaitStates.safeParse(text.split(',').map((s) => s.trim()));
  return parsed.success ? parsed.data : undefined;
}

export interface WaitDeps<R extends { state: ReservationState }> {
  /** The reservation now; undefined when there is none (for this tenant). */
  read(): Promise<R | undefined>;
  progress: Progress;
  now: () => number;
  sleep: (ms: number) => Promise<void>;
  pollMs?: number;
  /** How often to say it still waits, in ms. */
  reportEveryMs?: number;
}

export class WaitFailure extends Error {
  constructor(
    readonly code: 'NOT_FOUND' | 'ENDED' | 'TIMEOUT',
    message: string,
  ) {
    super(message);
    this.name = 'WaitFailure';
  }
}

/** Waits until the reservation `id` is in one of `states`, at most `timeoutMs`; returns it then. Throws WaitFailure. */
export async function waitForState<R extends { state: ReservationState }>(
  id: string,
  states: readonly ReservationState[],
  timeoutMs: number,
  deps: WaitDeps<R>,
): Promise<R> {
  const started = deps.now();
  const wanted = states.join(' or ');
  let last: string | undefined;
  let reported = started;
  for (;;) {
    const r = await deps.read();
    if (!r) throw new WaitFailure('NOT_FOUND', `reservation ${id} not found`);
    if (states.includes(r.state)) return r;
    if (ENDED.has(r.state)) throw new WaitFailure('ENDED', `reservation ${id} is ${r.state}: it will not become ${wanted}`);
    const waited = deps.now() - started;
    if (r.state !== last || deps.now() - reported >= (deps.reportEveryMs ?? 15_000)) {
      deps.progress.step(`reservation ${id} is ${r.state}; waiting for ${wanted}`);
      last = r.state;
      reported = deps.now();
    }
    if (waited >= timeoutMs) throw new WaitFailure('TIMEOUT', `reservation ${id} is still ${r.state} after ${Math.round(waited / 1000)} s`);
    await deps.sleep(Math.min(deps.pollMs ?? 1000, Math.max(0, timeoutMs - waited)));
  }
}
