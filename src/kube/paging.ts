// LISTs in pages (`limit` + `continue`): a collection of 50,000 pods is never one response body in memory, only one
// page of it at a time, each mapped (e.g. to what the caller keeps) before the next is asked for. A list is complete
// only when its last page (no `continue`) arrived; a continue token that expired (410 Gone) restarts the list from
// its first page, since the pages after a fresh token would come from another snapshot (docs/adr/0042).
import type { ListResult } from './informer.ts';

/** One page as the API returns it: core clients name the token `_continue`, the custom-objects client `continue`. */
export interface ListPage<T> {
  items: T[];
  metadata?: { resourceVersion?: string; continue?: string; _continue?: string };
}

/** Asks for one page: at most `limit` items, after `continue` when given. */
export type PageFetcher<T> = (page: { limit: number; continue?: string }) => Promise<ListPage<T>>;

/** The default page size (the API server's own clients, e.g. kubectl, use 500). */
export const PAGE_SIZE = 500;

export interface ListAllOptions {
  /** Items per page (default PAGE_SIZE). */
  limit?: number;
  /** How many times an expired continue token may restart the list before it fails (default 3). */
  maxRestarts?: number;
}

/** A list that restarted too often (each continue token expired before the next page was asked for). */
export class ListRestartsExhaustedError extends Error {
  constructor(readonly restarts: number) {
    super(`the list restarted ${restarts} times on an expired continue token (410 Gone) and gave up`);
    this.name = 'ListRestartsExhaustedError';
  }
}

/** The HTTP status of a client error (ApiException.code; client.ts's statusOf, which imports this module). */
const statusOf = (e: unknown): unknown => (e as { code?: unknown; statusCode?: unknown } | null)?.code ?? (e as { statusCode?: unknown } | null)?.statusCode;

const tokenOf = (p: ListPage<unknown>): string | undefined => p.metadata?.continue || p.metadata?._continue || undefined;

/**
 * Every page of a list, each item through `map` as its page arrives; the list's resourceVersion is its first
 * page's (every page of one list shares that snapshot). Rejects when a page fails (nothing partial is returned).
 */
export async function listAllPages<T, U = T>(fetch: PageFetcher<T>, map: (item: T) => U, o: ListAllOptions = {}): Promise<ListResult<U> & { restarts: number; pages: number }> {
  const limit = o.limit ?? PAGE_SIZE;
  const maxRestarts = o.maxRestarts ?? 3;
  let restarts = 0;
  for (;;) {
    const items: U[] = [];
    let resourceVersion: string | undefined;
    let cont: string | undefined;
    let pages = 0;
    try {
      do {
        const page = await fetch({ limit, ...(cont ? { continue: cont } : {}) });
        pages++;
        if (resourceVersion === undefined) resourceVersion = page.metadata?.resourceVersion ?? '';
        for (const item of page.items) items.push(map(item));
        cont = tokenOf(page);
      } while (cont);
    } catch (e) {
      // 410 on a continued page: the token expired. Only the first page's snapshot makes the list consistent.
      if (!(cont && statusOf(e) === 410)) throw e;
      if (++restarts > maxRestarts) throw new ListRestartsExhaustedError(maxRestarts);
      continue;
    }
    return { items, metadata: { resourceVersion: resourceVersion ?? '' }, restarts, pages };
  }
}
