// The controller's own certificates: a CA (10 years) and a serving certificate it signs (1 year) for the HTTPS
// listeners (/metrics, the webhooks). Pure: issuing (node-forge writes the X.509; Node makes the RSA keys) and judging
// what is there (Node's X509Certificate reads it). The Kubernetes side (Secret, ConfigMap, webhook caBundle) is in
// tls.ts.
//
// Time here is the wall clock passed in as `now`, not the ledger's clock: certificates are checked by their peers
// against their own wall clocks, and tests move the ledger's clock by days.
import { createPrivateKey, generateKeyPairSync, randomBytes, X509Certificate } from 'node:crypto';
import net from 'node:net';
import forge from 'node-forge';

export const DAY_MS = 86_400_000;
export const CA_VALIDITY_MS = 3650 * DAY_MS;
export const SERVING_VALIDITY_MS = 365 * DAY_MS;
/** A certificate with less than this left is issued again. */
export const RENEW_BEFORE_MS = 30 * DAY_MS;
/** notBefore is set this far back, for peers whose clocks are a little behind. */
const BACKDATE_MS = 60 * 60 * 1000;

/** The Service in front of the controller's HTTPS listeners. */
export const CONTROLLER_SERVICE = 'better-compute-controller';

/** The Secret's keys: the CA bundle (PEM; the first certificate signs), the CA's key, the serving chain and key. */
export const SECRET_KEYS = { ca: 'ca.crt', caKey: 'ca.key', cert: 'tls.crt', key: 'tls.key' } as const;

export interface KeyPairPem {
  cert: string;
  key: string;
}

/** What the Secret holds. */
export interface TlsBundle {
  /** The CA certificate(s), PEM. The first is the one whose key is `caKey`. */
  caCert: string;
  caKey: string;
  cert: string;
  key: string;
}

/** The DNS names of the controller's Service in `namespace`, short to fully qualified. */
export function serviceSans(namespace: string, service = CONTROLLER_SERVICE): string[] {
  return [service, `${service}.${namespace}`, `${service}.${namespace}.svc`, `${service}.${namespace}.svc.cluster.local`];
}

function rsaKeyPair(): { privatePem: string; publicPem: string } {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
  });
  return { privatePem: privateKey, publicPem: publicKey };
}

/** A positive, minimally encoded 128-bit serial number (hex). */
function serialNumber(): string {
  const b = randomBytes(16);
  b[0] = (b[0]! & 0x7f) | 0x40;
  return b.toString('hex');
}

function validity(cert: forge.pki.Certificate, now: number, ms: number): void {
  cert.validity.notBefore = new Date(now - BACKDATE_MS);
  cert.validity.notAfter = new Date(now + ms);
}

/** A self-signed CA. */
export function generateCa(now: number, opts: { commonName?: string; validityMs?: number } = {}): KeyPairPem {
  const { privatePem, publicPem } = rsaKeyPair();
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.publicKeyFromPem(publicPem);
  cert.serialNumber = serialNumber();
  validity(cert, now, opts.validityMs ?? CA_VALIDITY_MS);
  const name = [{ name: 'commonName', value: opts.commonName ?? 'better-compute-ca' }];
  cert.setSubject(name);
  cert.setIssuer(name);
  cert.setExtensions([
    { name: 'basicConstraints', cA: true, critical: true },
    { name: 'keyUsage', keyCertSign: true, cRLSign: true, digitalSignature: true, critical: true },
    { name: 'subjectKeyIdentifier' },
  ]);
  cert.sign(forge.pki.privateKeyFromPem(privatePem), forge.md.sha256.create());
  return { cert: forge.pki.certificateToPem(cert), key: privatePem };
}

/** A serving certificate for `sans` (DNS names or IP addresses; the first is also the common name), signed by `ca`. */
export function issueServingCert(ca: KeyPairPem, sans: readonly string[], now: number, opts: { validityMs?: number } = {}): KeyPairPem {
  if (sans.length === 0) throw new Error('a serving certificate needs at least one subject alternative name');
  const caCert = forge.pki.certificateFromPem(firstPem(ca.cert));
  const { privatePem, publicPem } = rsaKeyPair();
  const cert = forge.pki.createCertificate();
  cert.publicKey = forge.pki.publicKeyFromPem(publicPem);
  cert.serialNumber = serialNumber();
  // Never valid beyond its CA.
  const until = Math.min(now + (opts.validityMs ?? SERVING_VALIDITY_MS), caCert.validity.notAfter.getTime());
  validity(cert, now, until - now);
  cert.setSubject([{ name: 'commonName', value: sans.find((s) => !net.isIP(s)) ?? sans[0]! }]);
  cert.setIssuer(caCert.subject.attributes);
  cert.setExtensions([
    { name: 'basicConstraints', cA: false, critical: true },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
    { name: 'extKeyUsage', serverAuth: true },
    { name: 'subjectAltName', altNames: sans.map((s) => (net.isIP(s) ? { type: 7, ip: s } : { type: 2, value: s })) },
    { name: 'subjectKeyIdentifier' },
    { name: 'authorityKeyIdentifier', keyIdentifier: caCert.generateSubjectKeyIdentifier().getBytes() },
  ]);
  cert.sign(forge.pki.privateKeyFromPem(ca.key), forge.md.sha256.create());
  return { cert: forge.pki.certificateToPem(cert), key: privatePem };
}

/** A new CA and a serving certificate from it; or, given the current CA, a new serving certificate from that CA. */
export function issueBundle(now: number, sans: readonly string[], ca?: KeyPairPem): TlsBundle {
  const authority = ca ?? generateCa(now);
  const serving = issueServingCert(authority, sans, now);
  return { caCert: authority.cert, caKey: authority.key, cert: serving.cert, key: serving.key };
}

/** The PEM blocks of a bundle, in order. */
export function splitPem(bundle: string): string[] {
  return bundle.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
}

function firstPem(bundle: string): string {
  const first = splitPem(bundle)[0];
  if (!first) throw new Error('no certificate in the PEM text');
  return first;
}

/** When the certificate stops being valid (ms since the epoch). */
export function notAfter(certPem: string): number {
  return Date.parse(new X509Certificate(firstPem(certPem)).validTo);
}

/** Whether a certificate has less than `renewBeforeMs` left at `now` (or is not valid yet, or cannot be read). */
export function needsRenewal(certPem: string, now: number, renewBeforeMs = RENEW_BEFORE_MS): boolean {
  try {
    const c = new X509Certificate(firstPem(certPem));
    return Date.parse(c.validFrom) > now || Date.parse(c.validTo) - now < renewBeforeMs;
  } catch {
    return true;
  }
}

/** The subject alternative names of a certificate: DNS names and IP addresses. */
export function subjectAltNames(certPem: string): string[] {
  const text = new X509Certificate(firstPem(certPem)).subjectAltName ?? '';
  return text
    .split(/,\s*/)
    .map((s) => /^(?:DNS|IP Address):(.+)$/.exec(s.trim())?.[1])
    .filter((s): s is string => s !== undefined);
}

/**
 * What to do with what the Secret holds:
 * - `keep`: use it;
 * - `renew` (leader's job, not urgent): the serving certificate is within `renewBeforeMs` of its end or lacks a name
 *   asked for — issue a new one from the same CA;
 * - `replace` (urgent, any replica): nothing usable (missing, unreadable, expired, key or CA mismatch) — issue a new
 *   serving certificate, from the same CA when that CA is itself sound, else from a new CA (`newCa`).
 */
export type TlsVerdict =
  | { action: 'keep' }
  | { action: 'renew'; reason: string; newCa: boolean }
  | { action: 'replace'; reason: string; newCa: boolean };

export function assessBundle(b: Partial<TlsBundle> | undefined, now: number, sans: readonly string[], renewBeforeMs = RENEW_BEFORE_MS): TlsVerdict {
  // The CA first.
  let ca: X509Certificate | undefined;
  let caProblem: string | undefined;
  if (!b?.caCert || !b.caKey) caProblem = 'no CA';
  else {
    try {
      ca = new X509Certificate(firstPem(b.caCert));
      if (!ca.ca) caProblem = 'the CA certificate is not a CA';
      else if (!ca.checkPrivateKey(createPrivateKey(b.caKey))) caProblem = 'the CA key does not match the CA certificate';
      else if (Date.parse(ca.validTo) <= now) caProblem = 'the CA has expired';
    } catch (e) {
      caProblem = `the CA cannot be read (${(e as Error).message})`;
    }
  }
  if (caProblem) return { action: 'replace', reason: caProblem, newCa: true };
  const caRenew = needsRenewal(b!.caCert!, now, renewBeforeMs);

  if (!b!.cert || !b!.key) return { action: 'replace', reason: 'no serving certificate', newCa: caRenew };
  let serving: X509Certificate;
  try {
    serving = new X509Certificate(firstPem(b!.cert));
    if (!serving.checkPrivateKey(createPrivateKey(b!.key))) return { action: 'replace', reason: 'the key does not match the serving certificate', newCa: caRenew };
  } catch (e) {
    return { action: 'replace', reason: `the serving certificate cannot be read (${(e as Error).message})`, newCa: caRenew };
  }
  if (!serving.verify(ca!.publicKey)) return { action: 'replace', reason: 'the serving certificate is not signed by the CA', newCa: caRenew };
  if (Date.parse(serving.validTo) <= now || Date.parse(serving.validFrom) > now + BACKDATE_MS) {
    return { action: 'replace', reason: 'the serving certificate is not valid now', newCa: caRenew };
  }
  if (caRenew) return { action: 'renew', reason: `the CA ends ${new Date(Date.parse(ca!.validTo)).toISOString()}`, newCa: true };
  if (needsRenewal(b!.cert, now, renewBeforeMs)) return { action: 'renew', reason: `the serving certificate ends ${new Date(Date.parse(serving.validTo)).toISOString()}`, newCa: false };
  const have = new Set(subjectAltNames(b!.cert));
  const missing = sans.filter((s) => !have.has(s));
  if (missing.length) return { action: 'renew', reason: `the serving certificate lacks ${missing.join(', ')}`, newCa: false };
  return { action: 'keep' };
}

/** The bundle that follows a verdict other than `keep`. */
export function nextBundle(b: Partial<TlsBundle> | undefined, verdict: Exclude<TlsVerdict, { action: 'keep' }>, now: number, sans: readonly string[]): TlsBundle {
  if (verdict.newCa || !b?.caCert || !b.caKey) return issueBundle(now, sans);
  return issueBundle(now, sans, { cert: b.caCert, key: b.caKey });
}
