// The process's metrics registry: its own (never prom-client's global one), with the default process metrics, the
// HTTP request histogram, the capacity gauges and the placement metrics registered by their owners.
import { collectDefaultMetrics, Histogram, Registry } from 'prom-client';

/**
 * prom-client's default metrics that break the Prometheus naming rules (`promtool check metrics`: a gauge must not end
 * in `_total`). Each has a twin without the suffix (`nodejs_active_handles`, ...) that says the same.
 */
const DEFAULT_METRICS_DROPPED = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];

export function createRegistry(opts: { defaultMetrics?: boolean } = {}): Registry {
  const registry = new Registry();
  if (opts.defaultMetrics ?? true) {
    collectDefaultMetrics({ register: registry });
    for (const name of DEFAULT_METRICS_DROPPED) registry.removeSingleMetric(name);
  }
  return registry;
}

export interface HttpMetrics {
  observe(route: string, method: string, status: number, seconds: number): void;
}

export function httpMetrics(registry: Registry): HttpMetrics {
  const h = new Histogram({
    name: 'bettercompute_http_request_duration_seconds',
    help: 'HTTP requests served by the capacity API, by route, method and status code.',
    labelNames: ['route', 'method', 'code'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [registry],
  });
  return {
    observe(route, method, status, seconds) {
      h.observe({ route, method, code: String(status) }, seconds);
    },
  };
}
