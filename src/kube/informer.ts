// A list-watch cache of one resource kind with watch liveness. The client library's informer stops for good on a
// watch error and trusts a quiet stream forever; this one:
// - asks for bookmarks and a server-side timeout, so a live watch always shows activity (an event, a bookmark, or
//   its normal end) within `watchTimeoutSeconds`; a watch silent for `livenessMs` is taken for dead, aborted and
//   started again from the last resourceVersion (docs/adr/0006-watch-liveness.md);
// - relists on 410 Gone (as a status code or an ERROR event) and tells handlers about what changed meanwhile;
// - restarts after any error with exponential backoff (1 s doubling to 30 s), forever, until stopped.
import { type KubeConfig, Watch } from '@kubernetes/client-node';
import { systemClock, type MonotonicClock } from '../clock.ts';
import { errorFields, type Logger } from '../log.ts';
import { keyOf, type KubeObject } from './types.ts';

export interface ListResult<T> {
  items: T[];
  metadata?: { resourceVersion?: string };
}

export interface InformerHandlers<T> {
  add?(obj: T): void;
  update?(oldObj: T, newObj: T): void;
  delete?(obj: T): void;
}

export interface InformerOptions<T> {
  name: string;
  kc: KubeConfig;
  /** The collection path, e.g. /api/v1/nodes or /apis/bettercompute.io/v1alpha1/reservations. */
  path: string;
  list: () => Promise<ListResult<T>>;
  log: Logger;
  /** Server-side watch timeout (default 60 s, randomized up to +25 %). */
  watchTimeoutSeconds?: number;
  /** A watch with no event, bookmark or end for this long is dead (default 90 s). */
  livenessMs?: number;
  /** What the cache keeps of each object, from the list and from watch events (default: the object). */
  transform?: (obj: T) => T;
  /** Reports restarts (metrics): 'relist', 'liveness', 'error', 'closed'. */
  onRestart?: (name: string, why: string) => void;
  /** The watch's liveness and the retry delays. */
  clock?: MonotonicClock;
}

export class Informer<T extends KubeObject> {
  private readonly cache = new Map<string, T>();
  private readonly handlers: InformerHandlers<T>[] = [];
  private resourceVersion = '';
  private stopped = true;
  private attempt = 0;
  private controller: AbortController | undefined;
  private lastActivity = 0;
  private cancelWatchdog: (() => void) | undefined;
  private cancelRetry: (() => void) | undefined;
  private readonly clock: MonotonicClock;
  private errorDelayMs = 0;
  private syncedResolve: (() => void) | undefined;
  readonly synced: Promise<void>;
  private hasSyncedFlag = false;
  /** Counts of watch (re)starts by reason, for tests and logs. */
  readonly restarts: Record<string, number> = {};

  constructor(private readonly opts: InformerOptions<T>) {
    this.clock = opts.clock ?? systemClock;
    this.synced = new Promise((r) => (this.syncedResolve = r));
  }

  get name(): string {
    return this.opts.name;
  }

  get hasSynced(): boolean {
    return this.hasSyncedFlag;
  }

  on(h: InformerHandlers<T>): void {
    this.handlers.push(h);
  }

  get(key: string): T | undefined {
    return this.cache.get(key);
  }

  list(): T[] {
    return [...this.cache.values()];
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    const liveness = this.opts.livenessMs ?? 90_000;
    this.lastActivity = this.clock.now();
    const every = Math.max(250, Math.floor(liveness / 4));
    const watch = () => {
      if (this.stopped) return;
      if (this.controller && this.clock.now() - this.lastActivity > liveness) {
        this.opts.log.warn('watch silent too long; restarting it', { informer: this.opts.name, silentMs: Math.round(this.clock.now() - this.lastActivity) });
        this.restart('liveness', false);
      }
      this.cancelWatchdog = this.clock.after(every, watch);
    };
    this.cancelWatchdog = this.clock.after(every, watch);
    void this.run(true);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.attempt++;
    this.cancelWatchdog?.();
    this.cancelRetry?.();
    this.controller?.abort();
    this.controller = undefined;
  }

  /** Aborts the current watch and starts again (relisting when asked). For liveness and tests. */
  restart(why: string, relist: boolean): void {
    if (this.stopped) return;
    this.restarts[why] = (this.restarts[why] ?? 0) + 1;
    this.opts.onRestart?.(this.opts.name, why);
    this.attempt++;
    this.controller?.abort();
    this.controller = undefined;
    if (relist) this.resourceVersion = '';
    void this.run(relist);
  }

  private schedule(relist: boolean, why: string): void {
    if (this.stopped) return;
    this.restarts[why] = (this.restarts[why] ?? 0) + 1;
    this.opts.onRestart?.(this.opts.name, why);
    const attempt = ++this.attempt;
    const delay = why === 'closed' ? 0 : this.errorDelayMs;
    if (why !== 'closed') this.errorDelayMs = Math.min(30_000, this.errorDelayMs ? this.errorDelayMs * 2 : 1000);
    this.cancelRetry = this.clock.after(delay, () => {
      if (attempt === this.attempt) void this.run(relist);
    });
  }

  private async run(relist: boolean): Promise<void> {
    const attempt = ++this.attempt;
    if ((relist || !this.resourceVersion) && !(await this.relist(attempt))) return;
    const base = this.opts.watchTimeoutSeconds ?? 60;
    const timeoutSeconds = Math.max(1, Math.round(base * (1 + Math.random() * 0.25)));
    const watch = new Watch(this.opts.kc);
    // The library aborts a watch after this long without data; ours is the liveness check, so keep theirs above it.
    (watch as unknown as { requestTimeoutMs: number }).requestTimeoutMs = (this.opts.livenessMs ?? 90_000) * 2;
    const seen = { gone: false };
    this.lastActivity = this.clock.now();
    try {
      const controller = await watch.watch(
        this.opts.path,
        { allowWatchBookmarks: true, resourceVersion: this.resourceVersion, timeoutSeconds },
        (type: string, obj: T & { code?: number }) => this.onWatchEvent(attempt, seen, type, obj),
        (err: { statusCode?: number; code?: number; name?: string } | null) => this.onWatchEnd(attempt, seen, err),
      );
      if (attempt !== this.attempt) controller.abort();
      else this.controller = controller;
    } catch (e) {
      if (attempt !== this.attempt || this.stopped) return;
      this.opts.log.warn('watch failed to start', { informer: this.opts.name, ...errorFields(e) });
      this.schedule(false, 'error');
    }
  }

  /** Lists afresh into the cache (synced after the first); false when the list failed (retried) or is outdated. */
  private async relist(attempt: number): Promise<boolean> {
    let result: ListResult<T>;
    try {
      result = await this.opts.list();
    } catch (e) {
      if (attempt !== this.attempt || this.stopped) return false;
      this.opts.log.warn('list failed', { informer: this.opts.name, ...errorFields(e) });
      this.schedule(true, 'error');
      return false;
    }
    if (attempt !== this.attempt || this.stopped) return false;
    this.replace(result.items);
    this.resourceVersion = result.metadata?.resourceVersion ?? '';
    if (!this.hasSyncedFlag) {
      this.hasSyncedFlag = true;
      this.syncedResolve?.();
    }
    return true;
  }

  /** One event of the watch of `attempt`: into the cache, its resourceVersion kept; a 410 ERROR marks it gone. */
  private onWatchEvent(attempt: number, seen: { gone: boolean }, type: string, obj: T & { code?: number }): void {
    if (attempt !== this.attempt) return;
    this.lastActivity = this.clock.now();
    this.errorDelayMs = 0;
    if (type === 'ERROR') {
      if (obj.code === 410) seen.gone = true;
      return;
    }
    const rv = obj.metadata?.resourceVersion;
    if (type === 'BOOKMARK') {
      if (rv) this.resourceVersion = rv;
      return;
    }
    if (type === 'ADDED' || type === 'MODIFIED') this.upsert(obj);
    else if (type === 'DELETED') this.remove(obj);
    if (rv) this.resourceVersion = rv;
  }

  /** The watch of `attempt` ended: relist after 410 Gone, back off after an error, else watch again at once. */
  private onWatchEnd(attempt: number, seen: { gone: boolean }, err: { statusCode?: number; code?: number; name?: string } | null): void {
    if (attempt !== this.attempt || this.stopped) return;
    this.controller = undefined;
    if (seen.gone || err?.statusCode === 410 || err?.code === 410) {
      this.opts.log.info('watch expired (410 Gone); relisting', { informer: this.opts.name });
      this.resourceVersion = '';
      this.schedule(true, 'relist');
    } else if (err) {
      this.opts.log.warn('watch failed', { informer: this.opts.name, ...errorFields(err) });
      this.schedule(false, 'error');
    } else {
      this.schedule(false, 'closed');
    }
  }

  private upsert(given: T): void {
    const obj = this.opts.transform ? this.opts.transform(given) : given;
    const key = keyOf(obj);
    const old = this.cache.get(key);
    this.cache.set(key, obj);
    for (const h of this.handlers) {
      try {
        if (old) {
          if (old.metadata.resourceVersion !== obj.metadata.resourceVersion) h.update?.(old, obj);
        } else h.add?.(obj);
      } catch (e) {
        this.opts.log.error('informer handler failed', { informer: this.opts.name, key, ...errorFields(e) });
      }
    }
  }

  private remove(obj: T): void {
    const key = keyOf(obj);
    const old = this.cache.get(key) ?? obj;
    this.cache.delete(key);
    for (const h of this.handlers) {
      try {
        h.delete?.(old);
      } catch (e) {
        this.opts.log.error('informer handler failed', { informer: this.opts.name, key, ...errorFields(e) });
      }
    }
  }

  private replace(items: T[]): void {
    const seen = new Set<string>();
    for (const obj of items) {
      seen.add(keyOf(obj));
      this.upsert(obj);
    }
    for (const [key, obj] of [...this.cache]) if (!seen.has(key)) this.remove(obj);
  }
}
