import { describe, expect, it } from 'vitest';
import type { PreemptionDue } from '../db/preemption.ts';
import { silentLogger } from '../log.ts';
import { preemptionPass, type PreemptionDeps } from './preemption.ts';
import { PREEMPT_AT_ANNOTATION } from '../core/names.ts';

const AT = Date.UTC(2026, 0, 15, 10, 2);
const victim = (id: string, pods: string[]): PreemptionDue => ({
  reservationId: id,
  preemptAt: AT,
  pods: pods.map((p) => ({ namespace: 'ns', podName: p, podUid: `uid-${p}` })),
});

/** A ledger of victims in memory: notices until marked, due ones until finished. */
function fakes(opts: { notices?: PreemptionDue[]; due?: PreemptionDue[]; failAnnotate?: Set<string> }) {
  const notices = [...(opts.notices ?? [])];
  const due = [...(opts.due ?? [])];
  const calls: string[] = [];
  const woken: string[][] = [];
  const deps: PreemptionDeps = {
    ledger: {
      preemptionNotices: async () => [...notices],
      markPreemptionNotified: async (id) => void notices.splice(notices.findIndex((v) => v.reservationId === id), 1),
      preemptionsDue: async () => [...due],
      finishPreemption: async (id) => (due.splice(due.findIndex((v) => v.reservationId === id), 1), true),
    },
    kube: {
      annotatePod: async (_ns, name, annotations) => {
        calls.push(`annotate ${name} ${annotations[PREEMPT_AT_ANNOTATION]}`);
        if (opts.failAnnotate?.has(name)) throw new Error('apiserver down');
      },
    },
    log: silentLogger,
    wake: (ids) => woken.push(ids),
  };
  return { deps, calls, woken };
}

describe('preemptionPass', () => {
  it('annotates every pod with the deadline before marking the notice delivered; a failure leaves it for the next pass', async () => {
    const failing = new Set(['b-0']);
    const f = fakes({ notices: [victim('a', ['a-0']), victim('b', ['b-0', 'b-1'])], failAnnotate: failing });
    expect(await preemptionPass(f.deps)).toEqual({ notified: ['a'], ended: [] });
    expect(f.woken).toEqual([['a']]);
    failing.clear();
    expect(await preemptionPass(f.deps)).toEqual({ notified: ['b'], ended: [] });
    const iso = new Date(AT).toISOString();
    expect(f.calls).toEqual([`annotate a-0 ${iso}`, `annotate b-0 ${iso}`, `annotate b-1 ${iso}`, `annotate b-0 ${iso}`, `annotate b-1 ${iso}`]);
  });

  it('at the deadline ends the victim and touches no pod: the stopper stopped them ahead of it (controller/stopper.ts)', async () => {
    const f = fakes({ due: [victim('a', ['a-0', 'a-1'])] });
    expect(await preemptionPass(f.deps)).toEqual({ notified: [], ended: ['a'] });
    expect(f.calls).toEqual([]);
    expect(f.woken).toEqual([['a']]);
    expect(await preemptionPass(f.deps)).toEqual({ notified: [], ended: [] });
  });
});
