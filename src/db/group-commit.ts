// Group commit: requests that arrive while a batch is being written wait and go together in the next batch, so that
// under load many of them share one statement and one commit. A batch starts at the end of the event loop's turn, not at
// once: the callers of a batch that just finished submit their next requests in that turn, and go together instead of
// one alone and the rest behind it. Each request gets its own item's outcome; a failure of the whole batch (the
// connection, a timeout) reaches all.

export type ItemOutcome<R> = { ok: true; value: R } | { ok: false; error: unknown };

export interface GroupCommitOptions {
  /** The most items one batch carries. */
  maxBatch: number;
  /** How many batches may be written at once. */
  maxInFlight: number;
}

interface Waiting<T, R> {
  item: T;
  resolve: (r: R) => void;
  reject: (e: unknown) => void;
}

export class GroupCommit<T, R> {
  private readonly queue: Waiting<T, R>[] = [];
  private inFlight = 0;
  private scheduled = false;

  constructor(
    /** Writes one batch; answers one outcome per item, in the items' order. */
    private readonly write: (items: T[]) => Promise<ItemOutcome<R>[]>,
    private readonly opts: GroupCommitOptions,
  ) {
    if (opts.maxBatch < 1 || opts.maxInFlight < 1) throw new Error('maxBatch and maxInFlight must be at least 1');
  }

  /** Requests waiting for a batch (not yet being written). */
  get waiting(): number {
    return this.queue.length;
  }

  submit(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < this.opts.maxInFlight && this.queue.length > 0) {
      // What waits is shared out over the free slots, so that batches overlap instead of one taking everyone.
      const size = Math.min(this.opts.maxBatch, Math.ceil(this.queue.length / (this.opts.maxInFlight - this.inFlight)));
      const batch = this.queue.splice(0, size);
      this.inFlight++;
      void this.run(batch).finally(() => {
        this.inFlight--;
        this.schedule();
      });
    }
  }

  private async run(batch: Waiting<T, R>[]): Promise<void> {
    let outcomes: ItemOutcome<R>[];
    try {
      outcomes = await this.write(batch.map((w) => w.item));
      if (outcomes.length !== batch.length) throw new Error(`a batch of ${batch.length} answered ${outcomes.length} outcomes`);
    } catch (e) {
      for (const w of batch) w.reject(e);
      return;
    }
    batch.forEach((w, i) => {
      const o = outcomes[i]!;
      if (o.ok) w.resolve(o.value);
      else w.reject(o.error);
    });
  }
}
