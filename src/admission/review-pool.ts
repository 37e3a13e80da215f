// Large AdmissionReviews decoded in worker threads (ADR 0047): a few workers, a short bounded queue and a deadline, so
// that a flood of large bodies to the webhook listener costs the controller's event loop (which serves the scheduler
// extender) only the reading of their bytes, never their parse and check. A full queue is refused at once (the
// transport answers 503) rather than piled up; a review not answered by its deadline is refused, and a worker still on
// it is terminated and replaced (a JSON.parse cannot be interrupted otherwise).
import type { Worker } from 'node:worker_threads';
import { siblingScript, startWorker } from '../http/worker-thread.ts';
import type { DecodedReview } from './review.ts';
import type { ReviewJob } from './review-worker.ts';

/** Bodies larger than this are decoded in a worker; real pods' reviews are a few KiB. */
export const REVIEW_WORKER_ABOVE_BYTES = 256 * 1024;

/**
 * The workers' nice value: on Linux a thread's own (the event loop's stays 0), so that on a pod short of CPU the loop's
 * work (the extender's calls) runs first and a large review waits, within its deadline.
 */
export const REVIEW_WORKER_NICE = 10;

export interface ReviewPoolOptions {
  /** Worker threads, started on first use or by warm() (default 1: the extender keeps a core of its own on a 2-CPU pod). */
  workers?: number;
  /** Reviews that may wait for a worker beyond those being decoded (default 4); more are refused. */
  queue?: number;
  /**
   * From a review handed in to its answer, waiting included (default 2,000 ms; the API server gives the webhook 5 s).
   */
  timeoutMs?: number;
  /** The worker's script (tests: one that never answers); default review-worker. */
  script?: URL;
}

/** The queue is full: nothing was started. */
export class ReviewPoolBusy extends Error {
  override readonly name = 'ReviewPoolBusy';
}

/** No answer by the deadline. */
export class ReviewPoolTimeout extends Error {
  override readonly name = 'ReviewPoolTimeout';
}

interface Job {
  id: number;
  bytes: ArrayBuffer;
  resolve(d: DecodedReview): void;
  reject(e: Error): void;
  timer: NodeJS.Timeout;
}

interface Slot {
  worker: Worker;
  job: Job | undefined;
}

const defaultScript = () => siblingScript(import.meta.url, 'review-worker');

/** The bytes as an ArrayBuffer of their own, to transfer: the buffer itself when the bytes are all of it, else a copy. */
function ownBuffer(bytes: Uint8Array): ArrayBuffer {
  if (bytes.buffer instanceof ArrayBuffer && bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength) return bytes.buffer;
  const copy = new Uint8Array(bytes.byteLength);
  copy.set(bytes);
  return copy.buffer;
}

export class ReviewDecoderPool {
  private readonly workers: number;
  private readonly queueMax: number;
  private readonly timeoutMs: number;
  private readonly script: URL;
  private readonly slots: Slot[] = [];
  private readonly waiting: Job[] = [];
  private nextId = 1;
  private closed = false;
  /** Workers terminated at a deadline (and replaced on the next review). */
  replaced = 0;

  constructor(o: ReviewPoolOptions = {}) {
    this.workers = Math.max(1, o.workers ?? 1);
    this.queueMax = Math.max(0, o.queue ?? 4);
    this.timeoutMs = o.timeoutMs ?? 2_000;
    this.script = o.script ?? defaultScript();
  }

  /** Starts the workers now rather than on the first large review (whose deadline would include their start). */
  warm(): this {
    while (!this.closed && this.slots.length < this.workers) this.spawn();
    return this;
  }

  /** Every worker busy and the queue full: a review handed in now would be refused. */
  full(): boolean {
    return this.slots.length >= this.workers && this.slots.every((s) => s.job) && this.waiting.length >= this.queueMax;
  }

  /**
   * Decodes a review's bytes in a worker. The bytes are transferred when they are a buffer of their own: the caller
   * must not read them afterwards. Rejects with ReviewPoolBusy (queue full), ReviewPoolTimeout, or the worker's error.
   */
  decode(bytes: Uint8Array): Promise<DecodedReview> {
    if (this.closed) return Promise.reject(new Error('the review pool is closed'));
    if (this.full()) return Promise.reject(new ReviewPoolBusy(`every review worker is busy and ${this.queueMax} reviews wait`));
    return new Promise<DecodedReview>((resolve, reject) => {
      const id = this.nextId++;
      const job: Job = { id, bytes: ownBuffer(bytes), resolve, reject, timer: setTimeout(() => this.expire(job), this.timeoutMs) };
      this.waiting.push(job);
      this.pump();
    });
  }

  /** Terminates the workers; reviews not answered yet are refused. */
  async close(): Promise<void> {
    this.closed = true;
    for (const job of this.waiting.splice(0)) this.settle(job, new Error('the review pool is closed'));
    const slots = this.slots.splice(0);
    for (const s of slots) if (s.job) this.settle(s.job, new Error('the review pool is closed'));
    await Promise.all(slots.map((s) => s.worker.terminate()));
  }

  private settle(job: Job, outcome: DecodedReview | Error): void {
    clearTimeout(job.timer);
    if (outcome instanceof Error) job.reject(outcome);
    else job.resolve(outcome);
  }

  private pump(): void {
    while (this.waiting.length) {
      let slot = this.slots.find((s) => !s.job);
      if (!slot && this.slots.length < this.workers) slot = this.spawn();
      if (!slot) return;
      const job = this.waiting.shift()!;
      slot.job = job;
      slot.worker.postMessage({ id: job.id, bytes: job.bytes } satisfies ReviewJob, [job.bytes]);
    }
  }

  private spawn(): Slot {
    const worker = startWorker(this.script, { nice: REVIEW_WORKER_NICE });
    // Idle workers keep no process alive; close() ends them.
    worker.unref();
    const slot: Slot = { worker, job: undefined };
    worker.on('message', (m: { id: number; decoded: DecodedReview }) => {
      const job = slot.job;
      if (!job || job.id !== m.id) return;
      slot.job = undefined;
      this.settle(job, m.decoded);
      this.pump();
    });
    const lost = (e: Error) => {
      if (!this.drop(slot)) return;
      if (slot.job) this.settle(slot.job, e);
      slot.job = undefined;
      this.pump();
    };
    worker.on('error', lost);
    worker.on('exit', (code) => lost(new Error(`a review worker exited (code ${code})`)));
    this.slots.push(slot);
    return slot;
  }

  /** Takes a slot out of the pool; false when it was out already. */
  private drop(slot: Slot): boolean {
    const i = this.slots.indexOf(slot);
    if (i < 0) return false;
    this.slots.splice(i, 1);
    return true;
  }

  private expire(job: Job): void {
    const queued = this.waiting.indexOf(job);
    if (queued >= 0) this.waiting.splice(queued, 1);
    const slot = this.slots.find((s) => s.job === job);
    if (slot) {
      this.drop(slot);
      slot.job = undefined;
      this.replaced++;
      void slot.worker.terminate();
    }
    job.reject(new ReviewPoolTimeout(`the review was not decoded within ${this.timeoutMs} ms`));
    this.pump();
  }
}
