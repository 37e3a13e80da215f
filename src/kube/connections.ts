// One connection pool per Kubernetes API server, instead of one TLS connection per call.
//
// @kubernetes/client-node (2.0.1) builds a new undici Agent for every API call (applySecurityAuthentication ->
// createDispatcher), so each call opens a TCP connection, builds a TLS secure context (CA, client key and certificate
// parsed again) and makes a full handshake, on our side and on the API server's. Measured with the real kube-scheduler
// (bench/scheduler.bench.ts): a third of the extender's CPU went to that while binding pods. This KubeConfig keeps the
// Agent the library made for the first call and hands it to the next calls with the same server and credentials, so
// they reuse kept-alive connections.
//
// A changed kubeconfig (another server, CA or client certificate in the objects) gets a new Agent. Material read from
// files (an in-cluster CA, a client certificate rotated on disk) is picked up by renewing the Agent every
// `renewEveryMs`; the old one finishes its requests, then closes. Bearer tokens are headers, read per call as before.
import { KubeConfig, type RequestContext } from '@kubernetes/client-node';
import { systemClock } from '../clock.ts';

type Dispatcher = NonNullable<ReturnType<RequestContext['getDispatcher']>>;

export const DEFAULT_CONNECTION_RENEW_MS = 5 * 60_000;

export class PooledKubeConfig extends KubeConfig {
  private shared: { key: string; dispatcher: Dispatcher; until: number } | undefined;

  constructor(
    private readonly renewEveryMs = DEFAULT_CONNECTION_RENEW_MS,
    private readonly now: () => number = () => systemClock.now(),
  ) {
    super();
  }

  override async applySecurityAuthentication(context: RequestContext): Promise<void> {
    await super.applySecurityAuthentication(context);
    const made = context.getDispatcher();
    // Plain HTTP without options: the global dispatcher pools already. A watch keeps the Agent made for it: a
    // long-lived stream gains nothing from a pool, and ending it (abort, timeout) must not touch the calls' connections.
    if (!made || isWatch(context)) return;
    const key = this.credentialsKey();
    const s = this.shared;
    if (s && s.key === key && this.now() < s.until) {
      // The Agent just made has opened nothing; it is dropped unused.
      context.setDispatcher(s.dispatcher);
      return;
    }
    this.shared = { key, dispatcher: made, until: this.now() + this.renewEveryMs };
    // In-flight requests on the old one finish; then its connections close.
    if (s) void s.dispatcher.close().catch(() => undefined);
  }

  /** Closes the shared connections (after their requests finish). The next call opens new ones. */
  async closeConnections(): Promise<void> {
    const s = this.shared;
    this.shared = undefined;
    await s?.dispatcher.close().catch(() => undefined);
  }

  /** What the library builds a dispatcher from: the current cluster (server, CA, TLS options) and user (certificate). */
  private credentialsKey(): string {
    const cluster = this.getCurrentCluster();
    const user = this.getCurrentUser();
    return JSON.stringify([
      cluster,
      user && { name: user.name, certFile: user.certFile, certData: user.certData, keyFile: user.keyFile, keyData: user.keyData },
    ]);
  }
}

function isWatch(context: RequestContext): boolean {
  return new URL(context.getUrl()).searchParams.get('watch') === 'true';
}
