// The agent's node's atoms published as ResourceSlices of gpu.bettercompute.io (ADR 0043, docs/dra-node.md), only
// with its DRA plugin on. Each sync lists the node's slices afresh and writes what planSliceSync says (the pure
// decisions, src/core/dra-slices.ts): creates, whole replacements at the resourceVersion read, deletions. A sync runs
// at start, when the agent's atoms change, when the kubelet registers the plugin (a kubelet that starts deletes all
// of its node's slices), and every `resyncMs` (someone deleted or changed one). Syncs never overlap; a sync asked
// for while one runs runs once more after it. The slices are left in place at a graceful stop: the kubelet deletes a
// driver's slices itself 30 s after its plugin is gone (and all of a node's when it starts), and a restarting agent
// (a rolling update) finds them as it left them.
import { planSliceSync, type ExistingSlice, type ResourceSliceObject, type SliceAtom } from '../../core/dra-slices.ts';
import { errorFields, type Logger } from '../../log.ts';

/** The API calls a sync makes (ResourceSliceClient). */
export interface SliceApi {
  listOfNode(node: string): Promise<ExistingSlice[]>;
  create(slice: ResourceSliceObject): Promise<void>;
  replace(slice: ResourceSliceObject, resourceVersion: string): Promise<void>;
  delete(name: string, resourceVersion: string): Promise<void>;
  nodeUid(node: string): Promise<string>;
}

export interface SlicePublisherOptions {
  nodeName: string;
  api: SliceApi;
  /** The node's atoms now (the agent's inventory: the ledger's rows, or the discovered layout before the first answer). */
  atoms: () => readonly SliceAtom[];
  log: Logger;
  /** How often the slices are checked even when nothing changed here (default 60 s). */
  resyncMs?: number;
}

export interface SliceSyncOutcome {
  generation: number;
  created: number;
  updated: number;
  deleted: number;
}

export class SlicePublisher {
  private nodeUid?: string;
  private lastGeneration = 0;
  private running?: Promise<void>;
  private again = false;
  private timer?: NodeJS.Timeout;
  private stopped = false;
  /** The last sync's outcome (tests, logs). */
  last?: SliceSyncOutcome;

  constructor(private readonly o: SlicePublisherOptions) {}

  async start(): Promise<void> {
    await this.sync();
    this.timer = setInterval(() => this.trigger(), this.o.resyncMs ?? 60_000);
  }

  /** Stops syncing (the slices stay: see the file's header). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running;
  }

  /** Asks for a sync soon (the atoms changed, the kubelet registered, the timer). */
  trigger(): void {
    void this.sync();
  }

  /** Syncs now, or once more after the one running; resolves when that has run. A failure is logged, not thrown. */
  sync(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (this.running) {
      this.again = true;
      return this.running;
    }
    this.running = (async () => {
      do {
        this.again = false;
        await this.syncOnce().catch((e: unknown) => this.o.log.warn('DRA: publishing the node\'s ResourceSlices failed; will retry', { node: this.o.nodeName, ...errorFields(e) }));
      } while (this.again && !this.stopped);
    })().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  private async syncOnce(): Promise<void> {
    const node = this.o.nodeName;
    this.nodeUid ??= await this.o.api.nodeUid(node);
    const existing = await this.o.api.listOfNode(node);
    const plan = planSliceSync({ node, nodeUid: this.nodeUid, atoms: this.o.atoms(), existing, lastGeneration: this.lastGeneration });
    // New content first (a reader sees the new generation incomplete, then complete), the slices left over last.
    for (const s of plan.create) await this.o.api.create(s);
    for (const u of plan.update) await this.o.api.replace(u.slice, u.resourceVersion);
    for (const d of plan.delete) await this.o.api.delete(d.name, d.resourceVersion);
    this.lastGeneration = Math.max(this.lastGeneration, plan.generation);
    this.last = { generation: plan.generation, created: plan.create.length, updated: plan.update.length, deleted: plan.delete.length };
    if (plan.create.length || plan.update.length || plan.delete.length) {
      this.o.log.info('DRA: published the node\'s ResourceSlices', { node, ...this.last, devices: plan.create.concat(plan.update.map((u) => u.slice)).reduce((n, s) => n + s.spec.devices.length, 0) });
    }
  }
}
