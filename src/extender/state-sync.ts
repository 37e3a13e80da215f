// Keeps the extender's in-memory state (state.ts) current from the ledger (ADR 0010): a dedicated LISTEN connection
// receives what changed (migrations/0006_extender_notify.sql) and one worker reloads only that, coalescing bursts; a
// full resync at start, after every reconnect and every `resyncEveryMs` repairs anything a notification missed. The
// state vouches for itself (fresh()) only while the LISTEN connection is up, its last ping answered within
// `maxStalenessMs`, the last full load succeeded and no reload is failing; otherwise the extender reads the database.
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import pg from 'pg';
import { systemClock } from '../clock.ts';
import type { NodeSnap, NodeSummary } from '../core/types.ts';
import type { Db } from '../db/pool.ts';
import { getPool, loadNodes } from '../db/snapshot.ts';
import { errorFields, type Logger } from '../log.ts';
import { loadHoldings, loadQuotas, loadReservations, nodePools, nodePoolsOf } from '../db/reads.ts';
import { ExtenderState, internSummary, quotaKeyOf, type FullLoad, type NodeLoad, type PodBookingApplied, type QuotaKey } from './state.ts';

export const EXTENDER_CHANNEL = 'bc_extender';

export interface StateSyncOptions {
  db: Db;
  /** A new, unconnected client for the LISTEN connection (default: the pool's settings; see listenClientFor). */
  listenClient?: () => pg.Client;
  log: Logger;
  /** The periodic full resync (default 30 s). */
  resyncEveryMs?: number;
  /** How often the LISTEN connection is pinged (default 1 s). */
  pingEveryMs?: number;
  /** The state is not answered from once its LISTEN connection has not answered a ping for this long (default 5 s). */
  maxStalenessMs?: number;
  /** Every call on the LISTEN connection: connect, LISTEN, ping (default 5 s). */
  callTimeoutMs?: number;
  /** The longest pause between reconnects and between retries of a failed reload (default 5 s). */
  maxBackoffMs?: number;
  /**
   * How long the worker, when idle, waits before it reloads what a notification with a transaction's id names (default
   * 5 ms): the result of this process's own booking, which the bind applies, comes about when its notifications do.
   */
  applyWaitMs?: number;
  /** A monotonic clock in milliseconds for the staleness bound (default systemClock.now, src/clock.ts; tests move it). */
  monotonic?: () => number;
}

/** A LISTEN client with the pool's connection settings and timeouts. */
export function listenClientFor(db: Db): () => pg.Client {
  return () => new pg.Client({ ...db.options, keepAlive: true, application_name: 'better-compute-extender-listen' });
}

/**
 * Per node or pod to reload: the transactions whose notifications named it, NO_TX for one without (bc_extender_notify:
 * the per-row notifications carry none).
 */
type Changes = Map<string, Set<string>>;
const NO_TX = '';

interface Pending {
  pools: Set<string>;
  nodes: Changes;
  reservations: Set<string>;
  pods: Changes;
  quotas: Map<string, QuotaKey>;
}

const emptyPending = (): Pending => ({ pools: new Set(), nodes: new Map(), reservations: new Set(), pods: new Map(), quotas: new Map() });
const isEmpty = (p: Pending) => !p.pools.size && !p.nodes.size && !p.reservations.size && !p.pods.size && !p.quotas.size;

function addChange(m: Changes, id: string, tx: string): void {
  const known = m.get(id);
  if (known) known.add(tx);
  else m.set(id, new Set([tx]));
}

function mergeChanges(into: Changes, from: Changes): void {
  for (const [id, txs] of from) for (const tx of txs) addChange(into, id, tx);
}

/**
 * The bookings this process applied to a node or a pod itself (applyPodBooking), the last few: each its transaction and
 * its place in the order of applies.
 */
type Applied = { tx: string; seq: number }[];

/** How many applied transactions are remembered per node or pod, and for how many pods. */
const APPLIED_TXS = 8;
const APPLIED_PODS = 10_000;

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
  });
  p.catch(() => undefined);
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/** Emits 'loaded' after each complete load that vouches, 'lost' when the LISTEN connection goes. */
export class ExtenderStateSync extends EventEmitter {
  readonly state = new ExtenderState();
  private readonly o: Required<Omit<StateSyncOptions, 'db' | 'log' | 'listenClient'>>;
  private readonly newClient: () => pg.Client;
  private client: pg.Client | undefined;
  private listening = false;
  private loaded = false;
  private failing = false;
  private vouchedAt = -Infinity;
  private stopped = true;
  private pending = emptyPending();
  private resyncWanted = false;
  private working: Promise<void> | undefined;
  /** Barriers received (caughtUp): resolved once the worker has drained what came before them. */
  private drained: (() => void)[] = [];
  private barriers = new Map<string, () => void>();
  private timers: NodeJS.Timeout[] = [];
  private reconnectTimer: NodeJS.Timeout | undefined;
  private kickTimer: NodeJS.Timeout | undefined;
  private connectDelay = 100;
  /** Counts LISTEN connections: a full load vouches only if it ran on one. */
  private generation = 0;
  private firstLoad: { promise: Promise<void>; resolve: () => void };
  /** Bookings applied by applyPodBooking, counted; and per node and pod, the last ones (ADR 0023). */
  private applies = 0;
  private readonly applied = { nodes: new Map<string, Applied>(), pods: new Map<string, Applied>() };
  /** Nodes and pods reloaded after a notification, and those not reloaded because their change was applied already. */
  readonly reloads = { nodes: 0, pods: 0, skipped: 0 };

  constructor(private readonly d: StateSyncOptions) {
    super();
    this.o = {
      resyncEveryMs: d.resyncEveryMs ?? 30_000,
      pingEveryMs: d.pingEveryMs ?? 1000,
      maxStalenessMs: d.maxStalenessMs ?? 5000,
      callTimeoutMs: d.callTimeoutMs ?? 5000,
      maxBackoffMs: d.maxBackoffMs ?? 5000,
      applyWaitMs: d.applyWaitMs ?? 5,
      monotonic: d.monotonic ?? (() => systemClock.now()),
    };
    this.newClient = d.listenClient ?? listenClientFor(d.db);
    let resolve = () => undefined as void;
    const promise = new Promise<void>((r) => (resolve = r));
    this.firstLoad = { promise, resolve };
  }

  /** Connects, loads everything and keeps it current until stop(); see ready() for the first complete load. */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    const every = (ms: number, fn: () => void) => {
      const t = setInterval(fn, ms);
      t.unref?.();
      this.timers.push(t);
    };
    every(this.o.resyncEveryMs, () => this.requestResync());
    every(this.o.pingEveryMs, () => void this.ping());
    void this.connect();
  }

  /** Resolves once the state has been loaded completely while listening (it may still turn stale later). */
  ready(): Promise<void> {
    return this.firstLoad.promise;
  }

  /** Whether filter and prioritize may answer from this state now. */
  fresh(): boolean {
    return this.listening && this.loaded && !this.failing && this.o.monotonic() - this.vouchedAt <= this.o.maxStalenessMs;
  }

  /**
   * Resolves once every change committed before this call has been applied (a barrier notification through the same
   * channel); rejects after `timeoutMs`. At once while not listening (filter reads the database then). Bind calls it
   * after its writes, so the scheduler's next filter sees them.
   */
  async caughtUp(timeoutMs = this.o.callTimeoutMs): Promise<void> {
    if (!this.listening) return;
    const token = randomUUID();
    const seen = new Promise<void>((r) => this.barriers.set(token, r));
    try {
      await this.d.db.query({ name: 'bc_extender_barrier', text: 'SELECT pg_notify($1, $2)', values: [EXTENDER_CHANNEL, JSON.stringify(['b', token])] });
      await withTimeout(seen, timeoutMs, 'the extender state');
    } finally {
      this.barriers.delete(token);
    }
  }

  /**
   * A pod's new booking, written by transaction `tx`, applied to the state at once (ADR 0023): the notifications of
   * that transaction for the node and the pod are then not reloaded, unless another change came with them. A load that
   * began before this apply does not overwrite it: the node (or pod) is loaded again. False when nothing was applied
   * (the state is not fresh, or does not hold the node); the caller waits for the notifications then (caughtUp).
   */
  applyPodBooking(b: PodBookingApplied & { tx: string }): boolean {
    if (!this.fresh() || !this.state.applyPodBooking(b)) return false;
    const seq = ++this.applies;
    const remember = (m: Map<string, Applied>, id: string) => {
      const known = m.get(id) ?? [];
      m.delete(id);
      m.set(id, [...known.slice(1 - APPLIED_TXS), { tx: b.tx, seq }]);
    };
    remember(this.applied.nodes, b.nodeId);
    remember(this.applied.pods, b.podUid);
    // The oldest pods first (a Map keeps insertion order, and remember re-inserts).
    for (const uid of this.applied.pods.keys()) {
      if (this.applied.pods.size <= APPLIED_PODS) break;
      this.applied.pods.delete(uid);
    }
    return true;
  }

  /** Marks the state for a full reload now (also what the periodic resync does). */
  requestResync(): void {
    if (this.stopped || !this.listening) return;
    this.resyncWanted = true;
    this.kick();
  }

  /** A full reload now; resolves when one that vouches has completed. */
  resyncNow(): Promise<void> {
    const done = new Promise<void>((r) => this.once('loaded', () => r()));
    this.requestResync();
    return done;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    clearTimeout(this.reconnectTimer);
    clearTimeout(this.kickTimer);
    const c = this.client;
    this.client = undefined;
    this.listening = false;
    if (c) await withTimeout(c.end(), this.o.callTimeoutMs, 'closing the LISTEN connection').catch(() => undefined);
    await this.working;
    for (const r of this.drained.splice(0)) r();
  }

  // ---- the LISTEN connection -----------------------------------------------------------------------------------

  private async connect(): Promise<void> {
    if (this.stopped || this.client) return;
    const c = this.newClient();
    this.client = c;
    const lost = (e?: unknown) => this.lost(c, e);
    c.on('error', lost);
    c.on('end', () => lost());
    c.on('notification', (m) => {
      if (this.client === c && m.channel === EXTENDER_CHANNEL) this.onNotification(m.payload ?? '');
    });
    try {
      await withTimeout(c.connect(), this.o.callTimeoutMs, 'the LISTEN connection');
      await c.query({ text: `LISTEN ${EXTENDER_CHANNEL}`, query_timeout: this.o.callTimeoutMs } as pg.QueryConfig);
      if (this.client !== c) {
        // Stopped (or replaced) meanwhile.
        c.end().catch(() => undefined);
        return;
      }
      this.listening = true;
      this.generation++;
      this.vouchedAt = this.o.monotonic();
      this.connectDelay = 100;
      this.d.log.info('extender state: listening for ledger changes');
      // Whatever changed while nobody listened: a full load.
      this.resyncWanted = true;
      this.kick();
    } catch (e) {
      if (this.client === c) this.lost(c, e);
      else c.end().catch(() => undefined);
    }
  }

  private lost(c: pg.Client, e?: unknown): void {
    if (this.client !== c) return;
    this.client = undefined;
    const was = this.listening;
    this.listening = false;
    // Notifications may be missed from now on: only a full load after the reconnect vouches again.
    this.loaded = false;
    c.end().catch(() => undefined);
    this.emit('lost');
    if (this.stopped) return;
    this.d.log.warn(was ? 'extender state: the LISTEN connection is lost; filter reads the database until it is back' : 'extender state: cannot listen for ledger changes; retrying', {
      retryInMs: this.connectDelay,
      ...(e ? errorFields(e) : {}),
    });
    clearTimeout(this.reconnectTimer);
    this.reconnectTimer = setTimeout(() => void this.connect(), this.connectDelay);
    this.reconnectTimer.unref?.();
    this.connectDelay = Math.min(this.connectDelay * 2, this.o.maxBackoffMs);
  }

  /** A ping on the LISTEN connection: its answer comes after every notification committed before it was sent. */
  private async ping(): Promise<void> {
    const c = this.client;
    if (!c || !this.listening) return;
    const sent = this.o.monotonic();
    try {
      await withTimeout(c.query({ text: 'SELECT 1', query_timeout: this.o.callTimeoutMs } as pg.QueryConfig), this.o.callTimeoutMs, 'the LISTEN connection');
      if (this.client === c) this.vouchedAt = Math.max(this.vouchedAt, sent);
    } catch (e) {
      this.lost(c, e);
    }
  }

  private onNotification(payload: string): void {
    let m: unknown;
    try {
      m = JSON.parse(payload);
    } catch {
      m = undefined;
    }
    if (!Array.isArray(m) || !m.every((x) => typeof x === 'string')) {
      this.d.log.warn('extender state: unknown notification ignored', { payload: payload.slice(0, 200) });
      return;
    }
    // A statement-level notification ends with its transaction's id (migrations/functions/bc_extender_notify.sql).
    const [kind, a, b, c] = m as string[];
    const p = this.pending;
    if (kind === 'n' && a) addChange(p.nodes, a, b ?? NO_TX);
    else if (kind === 'p' && a) p.pools.add(a);
    else if (kind === 'r' && a) p.reservations.add(a);
    else if (kind === 'u' && a) addChange(p.pods, a, b ?? NO_TX);
    else if (kind === 'q' && a && b && c) {
      const key = { tenantId: a, poolId: b, resource: c };
      p.quotas.set(quotaKeyOf(key), key);
    } else if (kind === 'b' && a) {
      const done = this.barriers.get(a);
      if (done) this.drained.push(done);
    }
    // A node or pod changed by a transaction: it may be a bind's of this process, which applies it itself (ADR 0023).
    if ((kind === 'n' || kind === 'u') && b) this.kickSoon();
    else this.kick();
  }

  /** kick() after applyWaitMs, unless the worker runs already (it takes what is pending when its step ends). */
  private kickSoon(): void {
    if (this.working || this.kickTimer) return;
    this.kickTimer = setTimeout(() => {
      this.kickTimer = undefined;
      if (!this.stopped) this.kick();
    }, this.o.applyWaitMs);
    this.kickTimer.unref?.();
  }

  // ---- the worker: full loads and reloads, one at a time ----------------------------------------------------------

  private kick(): void {
    this.working ??= this.work().finally(() => {
      this.working = undefined;
      // Work that arrived while the last step ran.
      if (!this.stopped && (this.resyncWanted || !isEmpty(this.pending))) this.kick();
    });
  }

  private async work(): Promise<void> {
    let delay = 100;
    while (!this.stopped) {
      try {
        if (this.resyncWanted) {
          this.resyncWanted = false;
          await this.fullLoad();
        } else if (!isEmpty(this.pending)) {
          const batch = this.pending;
          this.pending = emptyPending();
          this.dropApplied(batch);
          if (isEmpty(batch)) continue;
          try {
            await this.reload(batch);
          } catch (e) {
            this.merge(batch);
            throw e;
          }
        } else break;
        if (this.failing) this.d.log.info('extender state: reloads succeed again');
        this.failing = false;
        delay = 100;
      } catch (e) {
        if (!this.failing) this.d.log.warn('extender state: a reload failed; filter reads the database until one succeeds', errorFields(e));
        this.failing = true;
        if (!this.loaded) this.resyncWanted = true;
        await new Promise((r) => setTimeout(r, delay).unref?.());
        delay = Math.min(delay * 2, this.o.maxBackoffMs);
      }
    }
    for (const r of this.drained.splice(0)) r();
  }

  private merge(b: Pending): void {
    for (const x of b.pools) this.pending.pools.add(x);
    mergeChanges(this.pending.nodes, b.nodes);
    for (const x of b.reservations) this.pending.reservations.add(x);
    mergeChanges(this.pending.pods, b.pods);
    for (const [k, v] of b.quotas) this.pending.quotas.set(k, v);
  }

  /** Takes out of a batch the nodes and pods whose every change came from a transaction applied here already. */
  private dropApplied(b: Pending): void {
    const drop = (changes: Changes, applied: Map<string, Applied>) => {
      for (const [id, txs] of changes) {
        const a = applied.get(id);
        if (!a) continue;
        let all = true;
        for (const tx of txs) if (!a.some((x) => x.tx === tx)) all = false;
        if (!all) continue;
        changes.delete(id);
        this.reloads.skipped++;
      }
    };
    drop(b.nodes, this.applied.nodes);
    drop(b.pods, this.applied.pods);
  }

  /**
   * Whether a load of a node or pod that began when `since` applies had been made may be older than the state: a
   * booking applied after that whose notification had not come before the load began (`notified`: the transactions
   * named before it began). A notification comes after its transaction commits, so a load that began after it sees it.
   */
  private olderThanApplied(applied: Applied | undefined, since: number, notified: ReadonlySet<string> | undefined): boolean {
    return applied?.some((a) => a.seq > since && !notified?.has(a.tx)) ?? false;
  }

  /** When a load of this node or pod may be older than what was applied to it (olderThanApplied): pending again, true. */
  private loadAgain(kind: 'nodes' | 'pods', id: string, since: number, notified?: ReadonlySet<string>): boolean {
    if (!this.olderThanApplied(this.applied[kind].get(id), since, notified)) return false;
    addChange(this.pending[kind], id, NO_TX);
    return true;
  }

  private async fullLoad(): Promise<void> {
    const started = this.o.monotonic();
    const t0 = systemClock.now();
    const gen = this.generation;
    const listeningSince = this.listening;
    const since = this.applies;
    this.state.replaceAll(await loadAll(this.d.db));
    // What was applied while it loaded may be missing from the load: loaded again.
    for (const id of this.applied.nodes.keys()) this.loadAgain('nodes', id, since);
    for (const uid of this.applied.pods.keys()) this.loadAgain('pods', uid, since);
    const first = !this.loaded;
    // Only a load that ran wholly on one live LISTEN connection vouches: what committed after its reads began came as
    // notifications.
    const vouched = listeningSince && this.listening && gen === this.generation;
    if (vouched) {
      this.loaded = true;
      this.vouchedAt = Math.max(this.vouchedAt, started);
    }
    const fields = { ...this.state.counts(), ms: Math.round(systemClock.now() - t0) };
    if (first) this.d.log.info('extender state: loaded', fields);
    else this.d.log.debug('extender state: loaded', fields);
    if (vouched) {
      this.firstLoad.resolve();
      this.emit('loaded');
    }
  }

  private async reload(b: Pending): Promise<void> {
    const db = this.d.db;
    // A node or pod whose load may be older than what was applied to it meanwhile is not overwritten: loaded again.
    const since = this.applies;
    // Pools first: a node that joined a new pool finds it.
    await Promise.all(
      [...b.pools].map(async (id) => {
        const p = await loadPool(db, id, LOAD_NODES_BATCH);
        this.state.setPool(id, p);
        for (const n of p?.nodes ?? []) this.loadAgain('nodes', n.id, since);
      }),
    );
    await Promise.all([
      (async () => {
        if (!b.nodes.size) return;
        const ids = [...b.nodes.keys()];
        this.reloads.nodes += ids.length;
        const pools = await nodePoolsOf(db, ids);
        const gone = ids.filter((id) => !pools.has(id));
        const byPool = new Map<string, string[]>();
        const loads: NodeLoad[] = [];
        for (const [id, poolId] of pools) {
          if (!poolId) loads.push({ id, poolId: null });
          else byPool.set(poolId, [...(byPool.get(poolId) ?? []), id]);
        }
        await Promise.all(
          [...byPool].map(async ([poolId, members]) => {
            const snaps = new Map((await loadNodes(db, poolId, members)).map((n) => [n.id, n]));
            for (const id of members) loads.push({ id, poolId, ...(snaps.has(id) ? { snap: snaps.get(id)! } : {}) });
          }),
        );
        this.state.setNodes(
          loads.filter((n) => !this.loadAgain('nodes', n.id, since, b.nodes.get(n.id))),
          gone,
        );
      })(),
      (async () => {
        if (!b.reservations.size) return;
        const ids = [...b.reservations];
        const got = await loadReservations(db, ids);
        for (const id of ids) this.state.setReservation(id, got.get(id));
      })(),
      (async () => {
        if (!b.pods.size) return;
        const uids = [...b.pods.keys()];
        this.reloads.pods += uids.length;
        const got = await loadHoldings(db, uids);
        for (const uid of uids) if (!this.loadAgain('pods', uid, since, b.pods.get(uid))) this.state.setHolding(uid, got.get(uid));
      })(),
      (async () => {
        if (!b.quotas.size) return;
        const keys = [...b.quotas.values()];
        const got = new Map((await loadQuotas(db, keys)).map((q) => [quotaKeyOf(q), q]));
        for (const k of keys) this.state.setQuota(k, got.get(quotaKeyOf(k)));
      })(),
    ]);
  }
}

/**
 * The most nodes a full load reads in one statement. A whole pool of 5,000 nodes (45,000 rows) in one statement, its
 * rows made into snapshots and then all summarized in replaceAll, held the event loop 38–72 ms at a stretch, and every
 * filter call that came meanwhile waited, once per full resync; in batches of 200, 11–15 ms (ADR 0028).
 */
export const LOAD_NODES_BATCH = 200;

/** Everything the state holds, read from the ledger; a pool's nodes `batch` at a time. */
export async function loadAll(db: Db, batch = LOAD_NODES_BATCH): Promise<FullLoad> {
  const { rows } = await db.query<{ id: string }>('SELECT id FROM pools ORDER BY id');
  const pools: FullLoad['pools'][number][] = [];
  const summaries = new Map<string, NodeSummary>();
  // A few pools at a time, each a statement for the pool and one per batch of its nodes, on the shared pool.
  for (let i = 0; i < rows.length; i += 4) {
    const loaded = await Promise.all(rows.slice(i, i + 4).map((r) => loadPool(db, r.id, batch, summaries)));
    for (const p of loaded) if (p) pools.push(p);
  }
  const [np, reservations, holdings, quotas] = await Promise.all([nodePools(db), loadReservations(db, null), loadHoldings(db, null), loadQuotas(db, null)]);
  return { pools, nodePools: np, reservations, holdings, quotas, summaries };
}

/**
 * A pool and its nodes, `batch` at a time; with `summaries`, each batch summarized as it comes. The batches are read at
 * different moments, as the load's other statements are: what commits meanwhile comes as a notification, and is loaded
 * again after the load.
 */
async function loadPool(db: Db, poolId: string, batch: number, summaries?: Map<string, NodeSummary>): Promise<FullLoad['pools'][number] | undefined> {
  const info = await getPool(db, poolId);
  if (!info) return undefined;
  const { rows } = await db.query<{ id: string }>('SELECT id FROM nodes WHERE pool_id = $1 ORDER BY id', [poolId]);
  const nodes: NodeSnap[] = [];
  for (let i = 0; i < rows.length; i += batch) {
    for (const n of await loadNodes(db, poolId, rows.slice(i, i + batch).map((r) => r.id))) {
      if (summaries) internSummary(n, summaries);
      nodes.push(n);
    }
  }
  return { info, nodes };
}
