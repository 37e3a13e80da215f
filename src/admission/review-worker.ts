// A worker thread of the review pool (review-pool.ts): decodes the bytes of one AdmissionReview at a time, off the
// controller's event loop, and answers with what the transport needs (review.ts). The bytes come transferred, not
// copied; the answer is small (the pod cut down to what admission reads).
import { parentPort, workerData } from 'node:worker_threads';
import { niceThisThread } from '../http/worker-thread.ts';
import { decodeReview } from './review.ts';

export interface ReviewJob {
  id: number;
  bytes: ArrayBuffer;
}

const port = parentPort;
if (!port) throw new Error('review-worker.ts runs as a worker thread of the review pool');
// The pool's REVIEW_WORKER_NICE, for this thread alone (Linux).
niceThisThread((workerData as { nice: number }).nice);
port.on('message', (job: ReviewJob) => port.postMessage({ id: job.id, decoded: decodeReview(new Uint8Array(job.bytes)) }));
