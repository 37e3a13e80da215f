// The flood of bench/admission-flood.bench.ts, in a process of its own, so that its CPU (building requests, TLS
// encryption) is not the controller's: a few HTTPS connections to the webhook listener, each sending one body after
// another as fast as they are answered. A client as a stranger would write it: it trusts any certificate and resumes no
// TLS session (each connection the server closes costs it a full handshake).
// IPC: {type: 'flood', flood, url} switches what is sent (a 'none' flood sends nothing); {type: 'counts'} is answered
// with the answers counted since the last one, by status; exits on {type: 'stop'} or when the channel closes.
import type { ClientRequest } from 'node:http';
import https from 'node:https';

export type Flood = 'none' | '3mib' | '3mib-chunked' | 'valid-worker' | 'valid-loop';

export type FloodMessage = { type: 'flood'; flood: Flood; url: string } | { type: 'probe'; url: string } | { type: 'counts' } | { type: 'stop' };

/** The answer to a probe: the status of one request of each flood, sent one after another. */
export interface FloodProbe {
  type: 'probe';
  statuses: Partial<Record<Flood, string>>;
}

export interface FloodCounts {
  type: 'counts';
  /** Answers by HTTP status; 'error' for a connection that ended without one. */
  answers: Record<string, number>;
  /** Bytes of bodies handed to the sockets. */
  bytes: number;
  seconds: number;
}

const CONNECTIONS = Number(process.env.BENCH_FLOOD_CONNECTIONS ?? 4);
const MIB = 1024 * 1024;

/** An AdmissionReview of a pod labelled for Reservation `train` requesting one GPU, padded with env vars to `bytes`. */
function reviewOfSize(bytes: number): string {
  const env: { name: string; value: string }[] = [];
  const pod = {
    metadata: { generateName: 'flood-', namespace: 'bench', labels: { 'bettercompute.io/reservation': 'train' } },
    spec: { containers: [{ name: 'main', image: 'busybox', env, resources: { limits: { 'bettercompute.io/gpu': '1' } } }] },
  };
  const review = { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'flood', kind: { group: '', version: 'v1', kind: 'Pod' }, operation: 'CREATE', namespace: 'bench', object: pod } };
  const entry = JSON.stringify({ name: 'VAR_000000', value: 'v'.repeat(40) }).length + 1;
  const n = Math.floor((bytes - JSON.stringify(review).length) / entry);
  for (let i = 0; i < n; i++) env.push({ name: `VAR_${String(i).padStart(6, '0')}`, value: 'v'.repeat(40) });
  return JSON.stringify(review);
}

const bodies = {
  threeMiB: Buffer.from(reviewOfSize(3 * MIB)),
  valid: Buffer.from(reviewOfSize(1.9 * MIB)),
};

let flood: Flood = 'none';
let url = '';
let generation = 0;
let answers: Record<string, number> = {};
let bytes = 0;
const CHUNK = 64 * 1024;
/** What a probe sends of a 3 MiB body before it waits for an answer. */
const PROBE_FIRST = 16 * 1024;
let since = performance.now();
const newAgent = () => new https.Agent({ keepAlive: true, maxSockets: CONNECTIONS, maxCachedSessions: 0, rejectUnauthorized: false });
let agent = newAgent();
/** The requests under way (or waiting for a connection), ended when the flood changes. */
const live = new Set<ClientRequest>();

/**
 * One request of the current flood (or of `kind`); resolves with its status when it is answered or failed. A probe's
 * 3 MiB body is sent as its first 16 KiB, the rest only if no answer came within a second: a front that refuses it from
 * its headers answers and closes before the rest is in flight, so the answer is read, not raced by the reset that a
 * close with unread bytes sends (a flood writes the whole body and counts such resets as 'error').
 */
function once(kind: Flood = flood, probe = false): Promise<string> {
  const chunked = kind === '3mib-chunked';
  const body = kind === '3mib' || chunked ? bodies.threeMiB : bodies.valid;
  const path = kind === 'valid-loop' ? '/admission-loop/pods' : '/admission/pods';
  return new Promise((resolve) => {
    let done = false;
    const finish = (status: string) => {
      if (done) return;
      done = true;
      live.delete(req);
      answers[status] = (answers[status] ?? 0) + 1;
      resolve(status);
    };
    const req = https.request(`${url}${path}`, { method: 'POST', agent, headers: { 'content-type': 'application/json', ...(chunked ? {} : { 'content-length': body.length }) } }, (res) => {
      res.on('data', () => undefined);
      res.on('end', () => {
        finish(String(res.statusCode));
        // A refusal's connection is closed by the server; stop sending what is left of the body.
        if (res.statusCode !== 200) req.destroy();
      });
      res.on('error', () => finish(String(res.statusCode)));
    });
    live.add(req);
    req.on('error', () => finish('error'));
    req.setTimeout(30_000, () => req.destroy(new Error('timeout')));
    const writeFrom = (from: number) => {
      for (let at = from; at < body.length; at += CHUNK) req.write(body.subarray(at, at + CHUNK));
      req.end();
    };
    if (probe && body === bodies.threeMiB) {
      req.write(body.subarray(0, PROBE_FIRST));
      const later = setTimeout(() => writeFrom(PROBE_FIRST), 1000);
      req.once('response', () => clearTimeout(later)).once('close', () => clearTimeout(later));
    } else if (chunked) writeFrom(0);
    else req.end(body);
    bytes += body.length;
  });
}

/** A connection's loop: requests one after another while the flood it started in lasts. */
async function lane(gen: number): Promise<void> {
  while (gen === generation && flood !== 'none') await once();
}

process.on('message', (m: FloodMessage) => {
  if (m.type === 'flood') {
    generation++;
    flood = m.flood;
    url = m.url;
    // The last flood's requests end now, not during the next row (those waiting for a connection too).
    for (const req of live) req.destroy();
    agent.destroy();
    agent = newAgent();
    if (flood !== 'none') for (let i = 0; i < CONNECTIONS; i++) void lane(generation);
  } else if (m.type === 'probe') {
    url = m.url;
    void (async () => {
      const statuses: FloodProbe['statuses'] = {};
      for (const kind of ['3mib', '3mib-chunked', 'valid-worker', 'valid-loop'] as const) statuses[kind] = await once(kind, true);
      process.send!({ type: 'probe', statuses } satisfies FloodProbe);
    })();
  } else if (m.type === 'counts') {
    const now = performance.now();
    process.send!({ type: 'counts', answers, bytes, seconds: (now - since) / 1000 } satisfies FloodCounts);
    answers = {};
    bytes = 0;
    since = now;
  } else {
    generation++;
    flood = 'none';
    agent.destroy();
    process.disconnect();
  }
});
process.on('disconnect', () => process.exit(0));
