// Where V8's young collections (scavenges) run in the process that serves the scheduler extender (ADR 0029).
// `main-thread` (the default): on the event loop's thread alone. The extender's calls leave tens of kilobytes alive at a
// young collection, which one thread copies in about a millisecond; split over helper threads on a small machine, the
// event loop waited for a helper the kernel had not run yet, and a filter call that met such a collection took 3–7 ms longer.
// `parallel`: V8's default, helper threads too; for a machine with cores to spare and large young survivors.
import v8 from 'node:v8';
import { z } from 'zod';

export const ScavengesSchema = z.enum(['main-thread', 'parallel']);
export type Scavenges = z.infer<typeof ScavengesSchema>;
export const DEFAULT_SCAVENGES: Scavenges = 'main-thread';

/** Sets it for this process, from now on (V8 reads the flag at each young collection). */
export function setScavenges(mode: Scavenges): void {
  v8.setFlagsFromString(mode === 'parallel' ? '--parallel-scavenge' : '--no-parallel-scavenge');
}
