import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseSelector, selectorFromObject, SelectorError } from '../core/selector.ts';
import { selectorTextToObject, selectorToObject } from './selector-object.ts';

describe('selectorToObject', () => {
  it.each<[string, Record<string, unknown>]>([
    ['', {}],
    ['vramGiB >= 80', { vramGiB: { gte: 80 } }],
    ['vramGiB >= 80 && vramGiB < 200', { vramGiB: { gte: 80, lt: 200 } }],
    ['gpuModel == "H100"', { gpuModel: { eq: 'H100' } }],
    ['gpuModel != "A100"', { gpuModel: { ne: 'A100' } }],
    ['numaNode in [0, 1]', { numaNode: { in: [0, 1] } }],
    ['numaNode notin [2]', { numaNode: { notIn: [2] } }],
    ['nvlinkDomain', { nvlinkDomain: { exists: true } }],
    ['!mig', { mig: { exists: false } }],
    ['x > 1 && y <= 2.5 && z == true', { x: { gt: 1 }, y: { lte: 2.5 }, z: { eq: true } }],
  ])('%j', (text, object) => {
    expect(selectorTextToObject(text)).toEqual(object);
    // The API's parser reads it back to the same clauses (up to their order).
    const back = selectorFromObject(object);
    const sorted = (s: readonly { attr: string; op: string }[]) => [...s].sort((a, b) => `${a.attr}${a.op}`.localeCompare(`${b.attr}${b.op}`));
    expect(sorted(back)).toEqual(sorted(parseSelector(text)));
  });

  it('refuses two clauses with one operator on one attribute', () => {
    expect(() => selectorTextToObject('vramGiB >= 40 && vramGiB >= 80')).toThrow(SelectorError);
    expect(() => selectorTextToObject('a && !a')).toThrow(/two "exists" clauses/);
  });

  it('passes a parse error through', () => {
    expect(() => selectorTextToObject('vramGiB >=')).toThrow(SelectorError);
  });

  it('property: for selectors with one clause per attribute and operator, the object form means the same', () => {
    const attr = fc.constantFrom('vramGiB', 'numaNode', 'gpuModel', 'mig', 'a.b');
    const clause = fc.oneof(
      fc.record({ attr, op: fc.constantFrom('>', '>=', '<', '<='), value: fc.integer({ min: -1000, max: 1000 }) }),
      fc.record({ attr, op: fc.constantFrom('==', '!='), value: fc.oneof(fc.string({ maxLength: 5 }), fc.integer(), fc.boolean()) }),
      fc.record({ attr, op: fc.constantFrom('in', 'notin'), value: fc.array(fc.oneof(fc.integer(), fc.string({ maxLength: 3 })), { minLength: 1, maxLength: 3 }) }),
      fc.record({ attr, op: fc.constantFrom('exists', '!exists') }),
    );
    fc.assert(
      fc.property(fc.uniqueArray(clause, { selector: (c) => `${c.attr}/${c.op.replace('!exists', 'exists')}`, maxLength: 6 }), (clauses) => {
        const obj = selectorToObject(clauses as never);
        const back = selectorFromObject(obj);
        expect(back).toHaveLength(clauses.length);
        const key = (c: { attr: string; op: string; value?: unknown }) => JSON.stringify([c.attr, c.op, c.value]);
        const normalized = (c: { attr: string; op: string; value?: unknown }) => key({ ...c, value: c.value === 0 ? 0 : c.value }); // -0 is 0
        expect(back.map(key).sort()).toEqual(clauses.map(normalized).sort());
      }),
    );
  });
});
