// The Reservation cache keeps no selector larger than any valid one: a valid selector at the text limit is kept as it
// is (the same object), and an oversized one is replaced by a marker that the reconciler's schema refuses.
import { describe, expect, it } from 'vitest';
import { SelectorObject } from '../core/schemas.ts';
import { MAX_SELECTOR_CLAUSES, MAX_SELECTOR_LENGTH, formatSelector, selectorFromObject } from '../core/selector.ts';
import { boundReservation, MAX_CACHED_SELECTOR_JSON } from './bounds.ts';
import type { Reservation } from './types.ts';

const rsv = (selector: Record<string, unknown>): Reservation => ({
  metadata: { name: 'r', namespace: 'ns' },
  spec: { pool: 'p', devices: [{ class: 'gpu', count: 1 }, { class: 'gpu', count: 1, selector }] },
});

describe('boundReservation', () => {
  it('keeps the largest valid selectors as they are, the same object', () => {
    // 64 attributes, each an `in` list, as long as the text limit lets them be.
    const big: Record<string, unknown> = {};
    for (let i = 0; i < MAX_SELECTOR_CLAUSES; i++) big[`a${i}`] = { in: ['x'.repeat(40)] };
    expect(formatSelector(selectorFromObject(big)).length).toBeLessThanOrEqual(MAX_SELECTOR_LENGTH);
    const r = rsv(big);
    expect(boundReservation(r)).toBe(r);
    // Escapes make JSON longer than text: a selector of quotes is still kept while it is valid.
    const quotes = { a: { in: ['"'.repeat(MAX_SELECTOR_LENGTH / 2 - 20)] } };
    expect(SelectorObject.safeParse(quotes).success).toBe(true);
    expect(boundReservation(rsv(quotes)).spec.devices[1]!.selector).toBe(quotes);
  });

  it('replaces an oversized selector by a marker the schema refuses, saying how large it was', () => {
    const huge = { gpuModel: { in: Array.from({ length: 20_000 }, (_, i) => `m${i}`) } };
    const n = JSON.stringify(huge).length;
    expect(n).toBeGreaterThan(MAX_CACHED_SELECTOR_JSON);
    const r = rsv(huge);
    const b = boundReservation(r);
    expect(b).not.toBe(r);
    expect(r.spec.devices[1]!.selector).toBe(huge); // the given object is not changed
    const kept = b.spec.devices[1]!.selector!;
    expect(JSON.stringify(kept).length).toBeLessThan(200);
    expect(Object.keys(kept)[0]).toContain(`${n} characters`);
    const parsed = SelectorObject.safeParse(kept);
    expect(parsed.success).toBe(false);
    // Idempotent: the informer applies it to listed and watched objects alike.
    expect(boundReservation(b)).toBe(b);
    expect(b.spec.devices[0]).toBe(r.spec.devices[0]);
  });
});
