import { describe, expect, it } from 'vitest';
import type { PreemptionDue } from '../db/preemption.ts';
import { silentLogger } from '../log.ts';
import { preemptionPass, type PreemptionDeps } from './preemption.ts';
import { PREEMPT_AT_ANNOTATION } from './types.ts';

const AT = Date.UTC(2026, 0, 15, 10, 2);
const victim = (id: string, pods: string[]): PreemptionDue => ({
  reservationId: id,
  preemptAt: AT,
  pods: pods.map((p) => ({ namespace: 'ns', podName: p, podUid: `uid-${p}` })),
});
const notFound = Object.assign(new Error('not found'), { code: 404 });

/** A ledger of victims in memory: notices until marked, due ones until finished. */
function fakes(opts: { notices?: PreemptionDue[]; due?: PreemptionDue[]; pods?: Record<string, unknown>; failAnnotate?: Set<string> }) {
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
      getPod: async (_ns, name) => opts.pods?.[name],
      annotatePod: async (_ns, name, annotations) => {
        calls.push(`annotate ${name} ${annotations[PREEMPT_AT_ANNOTATION]}`);
        if (opts.failAnnotate?.has(name)) throw new Error('apiserver down');
      },
      evictPod: async (_ns, name, grace) => {
        calls.push(`evict ${name} ${grace}`);
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
    expect(await preemptionPass(f.deps)).toEqual({ notified: ['a'], evicted: [], ended: [] });
    expect(f.woken).toEqual([['a']]);
    failing.clear();
    expect(await preemptionPass(f.deps)).toEqual({ notified: ['b'], evicted: [], ended: [] });
    const iso = new Date(AT).toISOString();
    expect(f.calls).toEqual([`annotate a-0 ${iso}`, `annotate b-0 ${iso}`, `annotate b-1 ${iso}`, `annotate b-0 ${iso}`, `annotate b-1 ${iso}`]);
  });

  it('evicts with each pod’s own grace period (30 s when it names none); a pod already gone does not hold the victim', async () => {
    const f = fakes({
      due: [victim('a', ['a-0', 'a-1', 'gone'])],
      pods: { 'a-0': { spec: { terminationGracePeriodSeconds: 90 } }, 'a-1': { spec: {} } },
    });
    expect(await preemptionPass(f.deps)).toEqual({
      notified: [],
      evicted: [
        { reservationId: 'a', pod: 'ns/a-0', graceSeconds: 90 },
        { reservationId: 'a', pod: 'ns/a-1', graceSeconds: 30 },
      ],
      ended: ['a'],
    });
    expect(f.calls).toEqual(['evict a-0 90', 'evict a-1 30']);
    expect(f.woken).toEqual([['a']]);
  });

  it('an eviction refused (not 404) keeps the victim for the next pass', async () => {
    const f = fakes({ due: [victim('a', ['a-0'])], pods: { 'a-0': { spec: {} } } });
    f.deps.kube.evictPod = async () => {
      throw Object.assign(new Error('too many requests'), { code: 429 });
    };
    expect(await preemptionPass(f.deps)).toEqual({ notified: [], evicted: [], ended: [] });
    f.deps.kube.evictPod = async () => {
      throw notFound;
    };
    expect(await preemptionPass(f.deps)).toEqual({ notified: [], evicted: [], ended: ['a'] });
  });
});
