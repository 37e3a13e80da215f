import { errorFields, type Logger } from './log.ts';

/**
 * Runs until SIGTERM or SIGINT, then stops gracefully; resolves with the exit code: 0 after a clean stop, 1 when the
 * stop failed or a second signal asked not to wait for it.
 */
export function stopOnSignal(stop: () => Promise<void>, log: Logger): Promise<number> {
  return new Promise<number>((resolve) => {
    let signals = 0;
    const onSignal = (signal: NodeJS.Signals) => {
      if (++signals > 1) {
        log.warn('second signal: exiting without a graceful stop', { signal });
        resolve(1);
        return;
      }
      log.info('signal', { signal });
      stop().then(
        () => resolve(0),
        (e: unknown) => {
          log.error('shutdown failed', errorFields(e));
          resolve(1);
        },
      );
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });
}
