// The controller's certificates: what is issued (checked with Node's own X.509 reader and a real TLS handshake), and
// the verdicts on what a Secret holds.
import { X509Certificate } from 'node:crypto';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  assessBundle,
  CA_VALIDITY_MS,
  DAY_MS,
  generateCa,
  issueBundle,
  issueServingCert,
  needsRenewal,
  nextBundle,
  notAfter,
  SERVING_VALIDITY_MS,
  serviceSans,
  splitPem,
  subjectAltNames,
  type TlsBundle,
} from './certs.ts';

const NOW = Date.UTC(2026, 10, 1, 12);
const SANS = serviceSans('better-compute-system');
let bundle: TlsBundle;
let other: TlsBundle;

beforeAll(() => {
  bundle = issueBundle(NOW, [...SANS, '127.0.0.1', 'localhost']);
  other = issueBundle(NOW, SANS);
}, 60_000);

function handshake(b: { cert: string; key: string }, ca: string, servername: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const server = https.createServer({ cert: b.cert, key: b.key }, (_req, res) => res.end('hello'));
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      const req = https.get({ host: '127.0.0.1', port, ca, servername, path: '/', agent: false }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => server.close(() => resolve(body)));
      });
      req.on('error', (e) => server.close(() => reject(e)));
    });
  });
}

describe('issuing', () => {
  it('names the Service four ways', () => {
    expect(serviceSans('ns1')).toEqual([
      'better-compute-controller',
      'better-compute-controller.ns1',
      'better-compute-controller.ns1.svc',
      'better-compute-controller.ns1.svc.cluster.local',
    ]);
  });

  it('a CA for 10 years and a serving certificate for 1 year, signed by it, with the names asked for', () => {
    const ca = new X509Certificate(bundle.caCert);
    const serving = new X509Certificate(bundle.cert);
    expect(ca.ca).toBe(true);
    expect(serving.ca).toBe(false);
    expect(serving.verify(ca.publicKey)).toBe(true);
    expect(serving.verify(new X509Certificate(other.caCert).publicKey)).toBe(false);
    expect(Math.abs(notAfter(bundle.caCert) - (NOW + CA_VALIDITY_MS))).toBeLessThan(2000);
    expect(Math.abs(notAfter(bundle.cert) - (NOW + SERVING_VALIDITY_MS))).toBeLessThan(2000);
    expect(Date.parse(serving.validFrom)).toBeLessThanOrEqual(NOW);
    expect(subjectAltNames(bundle.cert)).toEqual([...SANS, '127.0.0.1', 'localhost']);
    expect(serving.checkHost('better-compute-controller.better-compute-system.svc')).toBeTruthy();
    expect(serving.checkIP('127.0.0.1')).toBeTruthy();
    expect(serving.checkHost('evil.example')).toBeUndefined();
    expect(serving.keyUsage).toEqual(['1.3.6.1.5.5.7.3.1']); // serverAuth
    expect(splitPem(bundle.caCert)).toHaveLength(1);
  });

  it('a TLS client trusting only the CA accepts the serving certificate for the Service name, and refuses another CA’s', async () => {
    // The handshake checks validity against the real clock: issue for now.
    const now = issueBundle(Date.now(), SANS);
    expect(await handshake(now, now.caCert, 'better-compute-controller.better-compute-system.svc')).toBe('hello');
    await expect(handshake(now, other.caCert, 'better-compute-controller.better-compute-system.svc')).rejects.toThrow(/certificate|signature/i);
    await expect(handshake(now, now.caCert, 'kubernetes.default.svc')).rejects.toThrow(/altnames|Hostname/i);
  }, 30_000);

  it('never issues a serving certificate that outlives its CA', () => {
    const ca = generateCa(NOW, { validityMs: 100 * DAY_MS });
    const s = issueServingCert(ca, SANS, NOW);
    expect(notAfter(s.cert)).toBeLessThanOrEqual(notAfter(ca.cert));
    expect(() => issueServingCert(ca, [], NOW)).toThrow(/at least one/);
  }, 30_000);
});

describe('needsRenewal', () => {
  it('is false while more than 30 days are left, true from then on, and true before the start or for junk', () => {
    const end = notAfter(bundle.cert);
    expect(needsRenewal(bundle.cert, NOW)).toBe(false);
    expect(needsRenewal(bundle.cert, end - 31 * DAY_MS)).toBe(false);
    expect(needsRenewal(bundle.cert, end - 29 * DAY_MS)).toBe(true);
    expect(needsRenewal(bundle.cert, end + 1)).toBe(true);
    expect(needsRenewal(bundle.cert, NOW - 2 * DAY_MS)).toBe(true);
    expect(needsRenewal('not a certificate', NOW)).toBe(true);
  });
});

describe('assessBundle', () => {
  it('keeps a sound bundle', () => {
    expect(assessBundle(bundle, NOW, SANS)).toEqual({ action: 'keep' });
    expect(assessBundle(bundle, NOW + 300 * DAY_MS, SANS)).toEqual({ action: 'keep' });
  });

  it('replaces, with a new CA, what has no usable CA', () => {
    expect(assessBundle(undefined, NOW, SANS)).toMatchObject({ action: 'replace', newCa: true });
    expect(assessBundle({ cert: bundle.cert, key: bundle.key }, NOW, SANS)).toMatchObject({ action: 'replace', newCa: true, reason: 'no CA' });
    expect(assessBundle({ ...bundle, caKey: other.caKey }, NOW, SANS)).toMatchObject({ action: 'replace', newCa: true, reason: /CA key does not match/ });
    expect(assessBundle({ ...bundle, caCert: bundle.cert, caKey: bundle.key }, NOW, SANS)).toMatchObject({ action: 'replace', newCa: true, reason: /not a CA/ });
    expect(assessBundle({ ...bundle, caCert: 'junk' }, NOW, SANS)).toMatchObject({ action: 'replace', newCa: true });
    expect(assessBundle(bundle, NOW + CA_VALIDITY_MS + DAY_MS, SANS)).toMatchObject({ action: 'replace', newCa: true, reason: /CA has expired/ });
  });

  it('replaces, from the same CA, a serving certificate that cannot be used', () => {
    expect(assessBundle({ ...bundle, cert: undefined }, NOW, SANS)).toMatchObject({ action: 'replace', newCa: false });
    expect(assessBundle({ ...bundle, key: other.key }, NOW, SANS)).toMatchObject({ action: 'replace', newCa: false, reason: /key does not match/ });
    expect(assessBundle({ ...bundle, cert: other.cert, key: other.key }, NOW, SANS)).toMatchObject({ action: 'replace', newCa: false, reason: /not signed by the CA/ });
    expect(assessBundle(bundle, NOW + SERVING_VALIDITY_MS + DAY_MS, SANS)).toMatchObject({ action: 'replace', newCa: false, reason: /not valid now/ });
  });

  it('renews (the leader’s job) a serving certificate within 30 days of its end, or lacking a name', () => {
    expect(assessBundle(bundle, NOW + SERVING_VALIDITY_MS - 20 * DAY_MS, SANS)).toMatchObject({ action: 'renew', newCa: false, reason: /ends/ });
    expect(assessBundle(bundle, NOW, [...SANS, '10.0.0.7'])).toMatchObject({ action: 'renew', newCa: false, reason: 'the serving certificate lacks 10.0.0.7' });
  });

  it('renews with a new CA when the CA itself is within 30 days of its end', () => {
    const ca = generateCa(NOW, { validityMs: 40 * DAY_MS });
    const s = issueServingCert(ca, SANS, NOW);
    const b = { caCert: ca.cert, caKey: ca.key, cert: s.cert, key: s.key };
    expect(assessBundle(b, NOW, SANS)).toEqual({ action: 'keep' });
    expect(assessBundle(b, NOW + 15 * DAY_MS, SANS)).toMatchObject({ action: 'renew', newCa: true, reason: /the CA ends/ });
  }, 30_000);
});

describe('nextBundle', () => {
  it('renewal keeps the CA (clients need nothing new); a new CA when asked', () => {
    const later = NOW + 340 * DAY_MS;
    const renewed = nextBundle(bundle, { action: 'renew', reason: 'x', newCa: false }, later, SANS);
    expect(renewed.caCert).toBe(bundle.caCert);
    expect(renewed.caKey).toBe(bundle.caKey);
    expect(renewed.cert).not.toBe(bundle.cert);
    expect(new X509Certificate(renewed.cert).verify(new X509Certificate(bundle.caCert).publicKey)).toBe(true);
    expect(assessBundle(renewed, later, SANS)).toEqual({ action: 'keep' });
    const fresh = nextBundle(bundle, { action: 'replace', reason: 'x', newCa: true }, later, SANS);
    expect(fresh.caCert).not.toBe(bundle.caCert);
    expect(assessBundle(fresh, later, SANS)).toEqual({ action: 'keep' });
  }, 30_000);
});

describe('CA renewal with an overlap (ADR 0040), with real TLS handshakes', () => {
  it('old and new CA both trusted: no client is left without a CA for the certificate it is served', async () => {
    // In the past, so that every certificate issued below is valid for the real handshakes now: the CA renewal began
    // 90 minutes ago (t0), the overlap (1 h) ends before now.
    const now = Date.now();
    const t0 = now - 90 * 60_000;
    const names = ['localhost'];
    // A CA with 20 days left (inside the 30-day renewal window) and its serving certificate: what the agents and the
    // webhook hold before the renewal.
    const ca0 = generateCa(t0, { validityMs: 20 * DAY_MS });
    const leaf0 = issueServingCert(ca0, names, t0);
    const b0: TlsBundle = { caCert: ca0.cert, caKey: ca0.key, cert: leaf0.cert, key: leaf0.key };
    const oldHolder = b0.caCert;

    // 1. The new CA joins the bundle; the serving certificate stays.
    const v1 = assessBundle(b0, t0, names);
    expect(v1).toMatchObject({ action: 'renew', newCa: true, keepLeaf: true });
    const b1 = nextBundle(b0, v1 as Exclude<typeof v1, { action: 'keep' }>, t0, names);
    expect(splitPem(b1.caCert)).toHaveLength(2);
    expect(splitPem(b1.caCert)[1]!.trim()).toBe(ca0.cert.trim());
    expect(b1.cert).toBe(leaf0.cert);
    const newHolder = b1.caCert; // what the ConfigMap and the webhook's caBundle now carry
    expect(await handshake(b1, oldHolder, 'localhost')).toBe('hello');
    expect(await handshake(b1, newHolder, 'localhost')).toBe('hello');

    // 2. During the overlap nothing else changes (the old leaf, within 30 days of its end, is not renewed yet).
    expect(assessBundle(b1, t0 + 10 * 60_000, names)).toEqual({ action: 'keep' });
    expect(assessBundle(b1, t0 + 10 * 60_000, names, undefined, 2 * 60 * 60_000)).toEqual({ action: 'keep' });

    // 3. After the overlap: a serving certificate from the new CA; both CAs still in the bundle.
    expect(assessBundle(b1, t0 + 59 * 60_000, names)).toEqual({ action: 'keep' });
    const after = now;
    const v2 = assessBundle(b1, after, names);
    expect(v2).toMatchObject({ action: 'renew', newCa: false, reason: /overlap is over/ });
    const b2 = nextBundle(b1, v2 as Exclude<typeof v2, { action: 'keep' }>, after, names);
    expect(b2.caCert).toBe(b1.caCert);
    expect(b2.cert).not.toBe(leaf0.cert);
    expect(new X509Certificate(b2.cert).verify(new X509Certificate(splitPem(b1.caCert)[0]!).publicKey)).toBe(true);
    expect(assessBundle(b2, after, names)).toEqual({ action: 'keep' });
    // Every holder has had the new bundle for the overlap: it trusts the new leaf, and a replica still serving the
    // old leaf (not reloaded yet) is trusted by it too.
    expect(await handshake(b2, newHolder, 'localhost')).toBe('hello');
    expect(await handshake(b1, b2.caCert, 'localhost')).toBe('hello');
    // Without the overlap this is the gap: a holder of the old CA alone does not trust the new leaf.
    await expect(handshake(b2, oldHolder, 'localhost')).rejects.toThrow(/certificate|signature|issuer/i);

    // 4. Once the old CA has expired it leaves the bundle; the serving certificate stays.
    const later = t0 + 21 * DAY_MS;
    const v3 = assessBundle(b2, later, names);
    expect(v3).toMatchObject({ action: 'renew', newCa: false, keepLeaf: true, reason: /expired CA/ });
    const b3 = nextBundle(b2, v3 as Exclude<typeof v3, { action: 'keep' }>, later, names);
    expect(splitPem(b3.caCert)).toEqual([splitPem(b2.caCert)[0]]);
    expect(b3.cert).toBe(b2.cert);
    expect(assessBundle(b3, later, names)).toEqual({ action: 'keep' });
  }, 60_000);

  it('a CA that cannot be used is replaced at once, and not kept in the bundle', () => {
    const broken = { ...bundle, caKey: other.caKey };
    const v = assessBundle(broken, NOW, SANS);
    const next = nextBundle(broken, v as Exclude<typeof v, { action: 'keep' }>, NOW, SANS);
    expect(splitPem(next.caCert)).toHaveLength(1);
    expect(next.caCert).not.toContain(splitPem(bundle.caCert)[0]!.slice(40, 120));
  }, 30_000);
});
