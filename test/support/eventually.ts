/** Runs `fn` until it succeeds (a server is back, a condition holds) or `ms` have passed; then throws its last error. */
export async function eventually<T>(fn: () => Promise<T>, ms: number, pauseMs = 100): Promise<T> {
  const until = performance.now() + ms;
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (performance.now() > until) throw e;
      await new Promise((r) => setTimeout(r, pauseMs));
    }
  }
}
