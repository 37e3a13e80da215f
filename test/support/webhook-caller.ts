// What the API server sends the admission webhook, for TLS tests: its client certificate (presented when its admission
// configuration names a kubeconfig with one, ADR 0034; the CAs come from src/controller/certs.ts generateCa), and an
// AdmissionReview of a pod.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import forge from 'node-forge';
import type { KeyPairPem } from '../../src/controller/certs.ts';

/** A client certificate (extended key usage clientAuth, as OpenSSL requires of a TLS client) for `commonName`, signed by `ca`. */
export function issueClientCert(ca: KeyPairPem, commonName: string, now = Date.now()): KeyPairPem {
  const issuer = forge.pki.certificateFromPem(ca.cert);
  const pair = generateKeyPairSync('rsa', { modulusLength: 2048, publicKeyEncoding: { type: 'spki', format: 'pem' }, privateKeyEncoding: { type: 'pkcs8', format: 'pem' } });
  const leaf = forge.pki.createCertificate();
  leaf.publicKey = forge.pki.publicKeyFromPem(pair.publicKey);
  leaf.serialNumber = `01${randomBytes(15).toString('hex')}`;
  leaf.validity.notBefore = new Date(now - 60_000);
  leaf.validity.notAfter = new Date(now + 86_400_000);
  leaf.setSubject([{ name: 'commonName', value: commonName }]);
  leaf.setIssuer(issuer.subject.attributes);
  leaf.setExtensions([
    { name: 'basicConstraints', cA: false, critical: true },
    { name: 'keyUsage', digitalSignature: true, keyEncipherment: true, critical: true },
    { name: 'extKeyUsage', clientAuth: true },
  ]);
  leaf.sign(forge.pki.privateKeyFromPem(ca.key), forge.md.sha256.create());
  return { cert: forge.pki.certificateToPem(leaf), key: pair.privateKey };
}

/** An AdmissionReview (uid `review-1`) of a pod in `namespace` labelled for Reservation `train`, limiting one bettercompute.io/gpu. */
export function labelledPodReview(namespace: string): string {
  const pod = {
    metadata: { name: 'train-0', namespace, labels: { 'bettercompute.io/reservation': 'train' } },
    spec: { containers: [{ name: 'c', resources: { limits: { 'bettercompute.io/gpu': '1' } } }] },
  };
  return JSON.stringify({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'review-1', operation: 'CREATE', namespace, object: pod } });
}
