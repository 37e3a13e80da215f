// Where the HTTPS listeners get their certificate, and how it is kept fresh.
//
// From the Secret (default): at start, every replica reads Secret `better-compute-tls` in its namespace; when it is
// missing, the replica issues a CA and a serving certificate (certs.ts) and creates it (409: another replica won, its
// Secret is read and used); when what is there cannot be used at all (unreadable, expired, key mismatch), it is
// replaced under its resourceVersion (409: read again). Every `reloadEveryMs` each replica reads it again and hands a
// changed certificate to the listeners (server.setSecureContext); the leader also re-issues the serving certificate
// when less than 30 days are left (or a name is missing), and publishes the CA: ConfigMap `better-compute-ca` (key
// ca.crt, mounted by the node agents) and `caBundle` of every webhook of the MutatingWebhookConfiguration
// `better-compute` when it exists.
//
// From files (TLS_CERT_FILE, TLS_KEY_FILE, TLS_CA_FILE; cert-manager or tests): read at start and re-read every poll.
// Nothing is published then.
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs/promises';
import { AdmissionregistrationV1Api, CoreV1Api, PatchStrategy, setHeaderOptions, type KubeConfig } from '@kubernetes/client-node';
import { errorFields, type Logger } from '../log.ts';
import { assessBundle, nextBundle, SECRET_KEYS, splitPem, type TlsBundle } from './certs.ts';
import { statusOf } from '../kube/client.ts';
import { systemClock } from '../clock.ts';

export const CA_CONFIGMAP = 'better-compute-ca';
export const CA_CONFIGMAP_KEY = 'ca.crt';
export const WEBHOOK_CONFIGURATION = 'better-compute';

/** What a listener serves, and the CA bundle its clients trust. */
export interface ServingTls {
  cert: string;
  key: string;
  ca?: string;
}

// ---- Kubernetes I/O --------------------------------------------------------------------------------------------

export interface StoredSecret {
  bundle: Partial<TlsBundle>;
  resourceVersion: string;
}

/** The calls the Secret source makes, behind an interface. */
export interface TlsKube {
  readSecret(namespace: string, name: string): Promise<StoredSecret | undefined>;
  /** 'exists' on 409. */
  createSecret(namespace: string, name: string, b: TlsBundle): Promise<'created' | 'exists'>;
  /** Replace under `resourceVersion`; 'conflict' on 409 (someone else wrote it first) or 404. */
  replaceSecret(namespace: string, name: string, b: TlsBundle, resourceVersion: string): Promise<'replaced' | 'conflict'>;
  /** ConfigMap `name` with `key: value`, created or updated when it differs. */
  ensureConfigMap(namespace: string, name: string, key: string, value: string): Promise<'created' | 'updated' | 'unchanged'>;
  /** Sets caBundle (base64 of `caPem`) on every webhook of the MutatingWebhookConfiguration; 'absent' when there is none. */
  patchWebhookCaBundle(name: string, caPem: string): Promise<'patched' | 'unchanged' | 'absent'>;
}

function fromSecretData(data: Record<string, string> | undefined): Partial<TlsBundle> {
  const get = (k: string) => (data?.[k] ? Buffer.from(data[k], 'base64').toString('utf8') : undefined);
  const out: Partial<TlsBundle> = {};
  const caCert = get(SECRET_KEYS.ca);
  const caKey = get(SECRET_KEYS.caKey);
  const cert = get(SECRET_KEYS.cert);
  const key = get(SECRET_KEYS.key);
  if (caCert) out.caCert = caCert;
  if (caKey) out.caKey = caKey;
  if (cert) out.cert = cert;
  if (key) out.key = key;
  return out;
}

function toSecretData(b: TlsBundle): Record<string, string> {
  const enc = (s: string) => Buffer.from(s, 'utf8').toString('base64');
  return { [SECRET_KEYS.ca]: enc(b.caCert), [SECRET_KEYS.caKey]: enc(b.caKey), [SECRET_KEYS.cert]: enc(b.cert), [SECRET_KEYS.key]: enc(b.key) };
}

const jsonPatch = setHeaderOptions('Content-Type', PatchStrategy.JsonPatch);
const LABELS = { 'app.kubernetes.io/name': 'better-compute', 'app.kubernetes.io/component': 'controller' };

export class ClientNodeTlsKube implements TlsKube {
  private readonly core: CoreV1Api;
  private readonly admission: AdmissionregistrationV1Api;

  constructor(kc: KubeConfig) {
    this.core = kc.makeApiClient(CoreV1Api);
    this.admission = kc.makeApiClient(AdmissionregistrationV1Api);
  }

  async readSecret(namespace: string, name: string): Promise<StoredSecret | undefined> {
    try {
      const s = await this.core.readNamespacedSecret({ namespace, name });
      return { bundle: fromSecretData(s.data), resourceVersion: s.metadata?.resourceVersion ?? '' };
    } catch (e) {
      if (statusOf(e) === 404) return undefined;
      throw e;
    }
  }

  async createSecret(namespace: string, name: string, b: TlsBundle): Promise<'created' | 'exists'> {
    try {
      await this.core.createNamespacedSecret({
        namespace,
        body: { apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace, labels: LABELS }, type: 'kubernetes.io/tls', data: toSecretData(b) },
      });
      return 'created';
    } catch (e) {
      if (statusOf(e) === 409) return 'exists';
      throw e;
    }
  }

  async replaceSecret(namespace: string, name: string, b: TlsBundle, resourceVersion: string): Promise<'replaced' | 'conflict'> {
    try {
      await this.core.replaceNamespacedSecret({
        namespace,
        name,
        body: {
          apiVersion: 'v1',
          kind: 'Secret',
          metadata: { name, namespace, labels: LABELS, resourceVersion },
          type: 'kubernetes.io/tls',
          data: toSecretData(b),
        },
      });
      return 'replaced';
    } catch (e) {
      const status = statusOf(e);
      if (status === 409 || status === 404) return 'conflict';
      throw e;
    }
  }

  async ensureConfigMap(namespace: string, name: string, key: string, value: string): Promise<'created' | 'updated' | 'unchanged'> {
    let current;
    try {
      current = await this.core.readNamespacedConfigMap({ namespace, name });
    } catch (e) {
      if (statusOf(e) !== 404) throw e;
    }
    if (!current) {
      await this.core.createNamespacedConfigMap({ namespace, body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace, labels: LABELS }, data: { [key]: value } } });
      return 'created';
    }
    if (current.data?.[key] === value) return 'unchanged';
    await this.core.replaceNamespacedConfigMap({
      namespace,
      name,
      body: { ...current, data: { ...current.data, [key]: value } },
    });
    return 'updated';
  }

  async patchWebhookCaBundle(name: string, caPem: string): Promise<'patched' | 'unchanged' | 'absent'> {
    let mwc;
    try {
      mwc = await this.admission.readMutatingWebhookConfiguration({ name });
    } catch (e) {
      if (statusOf(e) === 404) return 'absent';
      throw e;
    }
    const want = Buffer.from(caPem, 'utf8').toString('base64');
    const ops: object[] = [];
    (mwc.webhooks ?? []).forEach((w, i) => {
      // client-node hands caBundle back as the base64 text of the JSON.
      if (w.clientConfig?.caBundle === want) return;
      // `test` first: the patch applies only to the webhook we looked at, should the list have changed meanwhile.
      ops.push({ op: 'test', path: `/webhooks/${i}/name`, value: w.name }, { op: 'add', path: `/webhooks/${i}/clientConfig/caBundle`, value: want });
    });
    if (!ops.length) return 'unchanged';
    await this.admission.patchMutatingWebhookConfiguration({ name, body: ops }, jsonPatch);
    return 'patched';
  }
}

// ---- Sources -----------------------------------------------------------------------------------------------------

export interface TlsSource {
  /**
   * Reads (and, from the Secret, creates or repairs) the material; resolves with what to serve first. onChange is told of
   * each new material; a promise it returns is awaited (a reload is done once the listeners serve it).
   */
  start(onChange: (tls: ServingTls) => unknown): Promise<ServingTls>;
  /** One reload now (the timer does this every `reloadEveryMs`). */
  poll(): Promise<void>;
  stop(): void;
}

function same(a: ServingTls | undefined, b: ServingTls): boolean {
  return !!a && a.cert === b.cert && a.key === b.key && a.ca === b.ca;
}

abstract class PollingSource implements TlsSource {
  protected current: ServingTls | undefined;
  private onChange: (tls: ServingTls) => unknown = () => undefined;
  private timer: NodeJS.Timeout | undefined;
  private running = false;

  constructor(
    protected readonly log: Logger,
    private readonly reloadEveryMs: number,
  ) {}

  protected abstract load(first: boolean): Promise<ServingTls>;

  async start(onChange: (tls: ServingTls) => unknown): Promise<ServingTls> {
    this.current = await this.load(true);
    this.onChange = onChange;
    this.timer = setInterval(() => void this.poll(), this.reloadEveryMs);
    this.timer.unref?.();
    return this.current;
  }

  async poll(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      const next = await this.load(false);
      if (!same(this.current, next)) {
        this.current = next;
        this.log.info('serving certificate reloaded');
        // Awaited: a reload resolves once the listeners serve the new certificate.
        await this.onChange(next);
      }
    } catch (e) {
      this.log.warn('TLS reload failed; serving the certificate loaded before', errorFields(e));
    } finally {
      this.running = false;
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

export class FileTlsSource extends PollingSource {
  constructor(
    private readonly files: { cert: string; key: string; ca?: string },
    log: Logger,
    reloadEveryMs: number,
  ) {
    super(log, reloadEveryMs);
  }

  protected async load(): Promise<ServingTls> {
    const [cert, key, ca] = await Promise.all([
      fs.readFile(this.files.cert, 'utf8'),
      fs.readFile(this.files.key, 'utf8'),
      this.files.ca ? fs.readFile(this.files.ca, 'utf8') : Promise.resolve(undefined),
    ]);
    return { cert, key, ...(ca ? { ca } : {}) };
  }
}

export interface SecretTlsOptions {
  kube: TlsKube;
  namespace: string;
  secretName: string;
  /** The serving certificate's names (DNS names, IP addresses). */
  sans: readonly string[];
  isLeader: () => boolean;
  log: Logger;
  reloadEveryMs: number;
  /** Wall clock, ms (tests move it). */
  now?: () => number;
  renewBeforeMs?: number;
  /** How long a renewed CA is published beside the old one before the serving certificate moves to it (ADR 0040). */
  caOverlapMs?: number;
  caConfigMap?: string;
  webhookConfiguration?: string;
}

export class SecretTlsSource extends PollingSource {
  private readonly now: () => number;

  constructor(private readonly o: SecretTlsOptions) {
    super(o.log, o.reloadEveryMs);
    this.now = o.now ?? (() => systemClock.wallNow().getTime());
  }

  protected async load(first: boolean): Promise<ServingTls> {
    const { kube, namespace, secretName: name, sans } = this.o;
    let wrote = false;
    let bundle: TlsBundle | undefined;
    for (let attempt = 0; !bundle; attempt++) {
      if (attempt === 5) throw new Error(`Secret ${namespace}/${name} keeps changing under us; giving up for now`);
      const now = this.now();
      const stored = await kube.readSecret(namespace, name);
      if (!stored) {
        const fresh = nextBundle(undefined, { action: 'replace', reason: 'no Secret', newCa: true }, now, sans);
        if ((await kube.createSecret(namespace, name, fresh)) === 'exists') continue;
        this.log.info('TLS Secret created', { secret: `${namespace}/${name}` });
        bundle = fresh;
        wrote = true;
        break;
      }
      const verdict = assessBundle(stored.bundle, now, sans, this.o.renewBeforeMs, this.o.caOverlapMs);
      if (verdict.action === 'keep' || (verdict.action === 'renew' && !this.o.isLeader())) {
        bundle = stored.bundle as TlsBundle;
        break;
      }
      const fresh = nextBundle(stored.bundle, verdict, now, sans);
      if ((await kube.replaceSecret(namespace, name, fresh, stored.resourceVersion)) === 'conflict') continue;
      this.log.info(verdict.action === 'renew' ? 'serving certificate renewed' : 'TLS Secret replaced', {
        secret: `${namespace}/${name}`,
        reason: verdict.reason,
        newCa: verdict.newCa,
      });
      bundle = fresh;
      wrote = true;
    }
    // The leader keeps the CA published; so does whoever just wrote it (there may be no leader yet at start).
    if (wrote || this.o.isLeader()) await this.publish(bundle.caCert, first);
    return { cert: bundle.cert, key: bundle.key, ca: bundle.caCert };
  }

  private async publish(ca: string, first: boolean): Promise<void> {
    const { kube, namespace, log } = this.o;
    const cm = this.o.caConfigMap ?? CA_CONFIGMAP;
    const mwc = this.o.webhookConfiguration ?? WEBHOOK_CONFIGURATION;
    try {
      const r = await kube.ensureConfigMap(namespace, cm, CA_CONFIGMAP_KEY, ca);
      if (r !== 'unchanged') log.info(`CA ConfigMap ${r}`, { configMap: `${namespace}/${cm}` });
    } catch (e) {
      log.warn('could not publish the CA ConfigMap', { configMap: `${namespace}/${cm}`, ...errorFields(e) });
    }
    try {
      const r = await kube.patchWebhookCaBundle(mwc, ca);
      if (r === 'patched') log.info('webhook caBundle set', { mutatingWebhookConfiguration: mwc });
      else if (r === 'absent' && first) log.info('no MutatingWebhookConfiguration to give the CA to (yet)', { mutatingWebhookConfiguration: mwc });
    } catch (e) {
      log.warn('could not set the webhook caBundle', { mutatingWebhookConfiguration: mwc, ...errorFields(e) });
    }
  }
}

/**
 * A user-provided certificate for one listener (the capacity API: API_TLS_SECRET_NAME): Secret `secretName` of type
 * kubernetes.io/tls in the controller's namespace (keys tls.crt, tls.key; ca.crt optional), issued by whoever the
 * users' clients trust (cert-manager, a company CA). Read only, never written or published; re-read every poll, so a
 * renewal by cert-manager is served within `reloadEveryMs`. Missing or incomplete at start: the controller does not start.
 */
export class ProvidedSecretTlsSource extends PollingSource {
  constructor(
    private readonly o: { kube: Pick<TlsKube, 'readSecret'>; namespace: string; secretName: string; log: Logger; reloadEveryMs: number },
  ) {
    super(o.log, o.reloadEveryMs);
  }

  protected async load(): Promise<ServingTls> {
    const { namespace, secretName } = this.o;
    const stored = await this.o.kube.readSecret(namespace, secretName);
    if (!stored) throw new Error(`Secret ${namespace}/${secretName} (API_TLS_SECRET_NAME) does not exist`);
    const { cert, key, caCert } = stored.bundle;
    if (!cert || !key) throw new Error(`Secret ${namespace}/${secretName} lacks tls.crt or tls.key`);
    return { cert, key, ...(caCert ? { ca: caCert } : {}) };
  }
}

/**
 * The webhook listener's client CA bundle (WEBHOOK_CLIENT_CA_FILE, ADR 0034): the CA(s) that sign the API server's
 * webhook client certificate, read once at start. Refused (the controller does not start): a file that cannot be read,
 * holds no PEM certificate, or holds one that does not parse or is no CA (a client certificate put there by mistake
 * would verify nothing). Several CAs may be listed: the old and the new one while the API server's is renewed.
 */
export async function readClientCaBundle(file: string): Promise<{ pem: string; subjects: string[] }> {
  const text = await fs.readFile(file, 'utf8').catch((e: NodeJS.ErrnoException) => {
    throw new Error(`WEBHOOK_CLIENT_CA_FILE ${file} cannot be read: ${e.code ?? e.message}`);
  });
  const blocks = splitPem(text);
  if (!blocks.length) throw new Error(`WEBHOOK_CLIENT_CA_FILE ${file} holds no PEM certificate`);
  const subjects = blocks.map((pem, i) => {
    let cert: X509Certificate;
    try {
      cert = new X509Certificate(pem);
    } catch (e) {
      throw new Error(`WEBHOOK_CLIENT_CA_FILE ${file}: certificate ${i + 1} does not parse (${(e as Error).message})`);
    }
    if (!cert.ca) throw new Error(`WEBHOOK_CLIENT_CA_FILE ${file}: certificate ${i + 1} (${cert.subject}) is not a CA`);
    return cert.subject.replaceAll('\n', ', ');
  });
  return { pem: `${blocks.join('\n')}\n`, subjects };
}
