// The leader's work on an API the cluster may not serve yet (Kueue's, resource.k8s.io/v1): asked every `pollMs` until
// it is, then started once; stop() ends the wait or what was started. The controller runs without the API.
import { errorFields, type Logger } from '../log.ts';

export interface WhenServedOptions<R> {
  /** The log's prefix, e.g. 'kueue check'. */
  what: string;
  /** Whether the API is served now; false asks again after `pollMs` (the caller logs why, if it wants). */
  served(): Promise<boolean>;
  /** Starts the work, once the API is served. */
  start(): R;
  /** Stops what `start` made. */
  stopRunning(r: R): Promise<void>;
  log: Logger;
  /** How often to ask again (default 30 s). */
  pollMs?: number;
}

export function startWhenServed<R>(o: WhenServedOptions<R>): { running(): R | undefined; stop(): Promise<void> } {
  let running: R | undefined;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const poll = async () => {
    if (stopped) return;
    try {
      if (await o.served()) {
        if (!stopped) running = o.start();
        return;
      }
    } catch (e) {
      o.log.warn(`${o.what}: could not tell whether its API is served`, errorFields(e));
    }
    if (!stopped) timer = setTimeout(() => void poll(), o.pollMs ?? 30_000);
    timer?.unref?.();
  };
  void poll();
  return {
    running: () => running,
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      const r = running;
      running = undefined;
      if (r !== undefined) await o.stopRunning(r);
    },
  };
}
