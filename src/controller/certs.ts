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
 *   asked for — issue a new one from the same CA; or the CA is within `renewBeforeMs` of its end — a new CA joins the
 *   bundle and the serving certificate stays (`keepLeaf`); or the overlap is over — a serving certificate from the new
 *   CA; or an expired CA is dropped from the bundle (`keepLeaf`);
 * - `replace` (urgent, any replica): nothing usable (missing, unreadable, expired, key or CA mismatch) — issue a new
 *   serving certificate, from the same CA when that CA is itself sound, else from a new CA (`newCa`).
 *
 * CA renewal with an overlap (ADR 0040): the bundle (`caCert`) lists the signing CA first, then the CAs it replaced
 * while they are still valid. A renewal first publishes the new CA beside the old one and keeps serving the old CA's
 * certificate; only `overlapMs` after the new CA was issued (time for the kubelet to refresh the agents' ConfigMap
 * and the API server to read the webhook's caBundle) is the serving certificate issued from the new CA. A client
 * holding the old bundle is served the old leaf until it has the new bundle; one holding the new bundle trusts both.
 */
export type TlsVerdict =
  | { action: 'keep' }
  | { action: 'renew'; reason: string; newCa: boolean; keepLeaf?: boolean }
  | { action: 'replace'; reason: string; newCa: boolean };

/** How long old and new CA are both published before the serving certificate moves to the new one. */
export const CA_OVERLAP_MS = 60 * 60 * 1000;

/** The CA certificates of a bundle (PEM), the signing one first; unreadable blocks are skipped. */
function bundleCas(caPem: string): X509Certificate[] {
  return splitPem(caPem).flatMap((pem) => {
    try {
      return [new X509Certificate(pem)];
    } catch {
      return [];
    }
  });
}

/** Why the signing CA (first of the bundle) cannot be used, or undefined. */
function caProblemOf(b: Partial<TlsBundle> | undefined, now: number): string | undefined {
  if (!b?.caCert || !b.caKey) return 'no CA';
  try {
    const ca = new X509Certificate(firstPem(b.caCert));
    if (!ca.ca) return 'the CA certificate is not a CA';
    if (!ca.checkPrivateKey(createPrivateKey(b.caKey))) return 'the CA key does not match the CA certificate';
    if (Date.parse(ca.validTo) <= now) return 'the CA has expired';
  } catch (e) {
    return `the CA cannot be read (${(e as Error).message})`;
  }
  return undefined;
}

/** Why the serving certificate cannot be used at all, or the CA of the bundle that issued it. */
function servingIssuer(b: TlsBundle, cas: readonly X509Certificate[], now: number): { problem: string } | { issuer: X509Certificate; serving: X509Certificate } {
  let serving: X509Certificate;
  try {
    serving = new X509Certificate(firstPem(b.cert));
    if (!serving.checkPrivateKey(createPrivateKey(b.key))) return { problem: 'the key does not match the serving certificate' };
  } catch (e) {
    return { problem: `the serving certificate cannot be read (${(e as Error).message})` };
  }
  const issuer = cas.find((ca) => Date.parse(ca.validTo) > now && serving.verify(ca.publicKey));
  if (!issuer) return { problem: 'the serving certificate is not signed by the CA' };
  if (Date.parse(serving.validTo) <= now || Date.parse(serving.validFrom) > now + BACKDATE_MS) return { problem: 'the serving certificate is not valid now' };
  return { issuer, serving };
}

export function assessBundle(
  b: Partial<TlsBundle> | undefined,
  now: number,
  sans: readonly string[],
  renewBeforeMs = RENEW_BEFORE_MS,
  overlapMs = CA_OVERLAP_MS,
): TlsVerdict {
  const caProblem = caProblemOf(b, now);
  if (caProblem) return { action: 'replace', reason: caProblem, newCa: true };
  const caRenew = needsRenewal(b!.caCert!, now, renewBeforeMs);
  if (!b!.cert || !b!.key) return { action: 'replace', reason: 'no serving certificate', newCa: caRenew };
  const cas = bundleCas(b!.caCert!);
  const signing = cas[0]!;
  const found = servingIssuer(b as TlsBundle, cas, now);
  if ('problem' in found) return { action: 'replace', reason: found.problem, newCa: caRenew };
  if (caRenew) return { action: 'renew', reason: `the CA ends ${new Date(Date.parse(signing.validTo)).toISOString()}`, newCa: true, keepLeaf: true };
  const leafEnds = Date.parse(found.serving.validTo);
  if (found.issuer !== signing) {
    const overlapEnds = Date.parse(signing.validFrom) + BACKDATE_MS + overlapMs;
    // Still in the overlap: the old CA's certificate is served (unless it would end first: nothing to wait for then).
    if (now < overlapEnds && leafEnds > overlapEnds) return { action: 'keep' };
    return { action: 'renew', reason: 'the serving certificate is from the previous CA and the overlap is over', newCa: false };
  }
  if (needsRenewal(b!.cert!, now, renewBeforeMs)) return { action: 'renew', reason: `the serving certificate ends ${new Date(leafEnds).toISOString()}`, newCa: false };
  const have = new Set(subjectAltNames(b!.cert!));
  const missing = sans.filter((s) => !have.has(s));
  if (missing.length) return { action: 'renew', reason: `the serving certificate lacks ${missing.join(', ')}`, newCa: false };
  if (cas.some((ca) => Date.parse(ca.validTo) <= now)) return { action: 'renew', reason: 'an expired CA is in the bundle', newCa: false, keepLeaf: true };
  return { action: 'keep' };
}

/** The CAs of `caPem` still valid at `now` (PEM, in order). */
function validCas(caPem: string | undefined, now: number): string[] {
  return splitPem(caPem ?? '').filter((pem) => {
    try {
      return Date.parse(new X509Certificate(pem).validTo) > now;
    } catch {
      return false;
    }
  });
}

/**
 * The bundle that follows a verdict other than `keep`. A new CA goes first in the bundle, before the CAs still valid
 * (trusted through the overlap); `keepLeaf` keeps the serving certificate (and drops expired CAs).
 */
export function nextBundle(b: Partial<TlsBundle> | undefined, verdict: Exclude<TlsVerdict, { action: 'keep' }>, now: number, sans: readonly string[]): TlsBundle {
  const previous = validCas(b?.caCert, now);
  // The bundle's text as it was when no CA is dropped (its peers compare it byte for byte).
  const join = (pems: string[]) => (b?.caCert && pems.length === splitPem(b.caCert).length && pems.every((p, i) => p === splitPem(b.caCert!)[i]) ? b.caCert : pems.map((p) => `${p}\n`).join(''));
  if (verdict.action === 'renew' && verdict.keepLeaf && b?.cert && b.key && b.caKey) {
    const authority = verdict.newCa ? generateCa(now) : { cert: previous[0]!, key: b.caKey };
    const trusted = verdict.newCa ? [authority.cert, ...previous] : previous;
    return { caCert: verdict.newCa ? [authority.cert, ...previous].map((p) => `${p.trim()}\n`).join('') : join(trusted), caKey: authority.key, cert: b.cert, key: b.key };
  }
  if (verdict.newCa || !b?.caCert || !b.caKey) {
    const fresh = issueBundle(now, sans);
    // A sound CA that is being replaced stays trusted beside the new one.
    const keep = caProblemOf(b, now) === undefined ? previous : [];
    return { ...fresh, caCert: keep.length ? [fresh.caCert.trim(), ...keep].map((p) => `${p}\n`).join('') : fresh.caCert };
  }
  const fresh = issueBundle(now, sans, { cert: firstPem(b.caCert), key: b.caKey });
  return { ...fresh, caCert: join(previous) };
}
