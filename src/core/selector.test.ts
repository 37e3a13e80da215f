import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  formatSelector,
  matchesSelector,
  MAX_SELECTOR_CLAUSES,
  MAX_SELECTOR_LENGTH,
  parseSelector,
  SelectorError,
  selectorFromObject,
  type Clause,
  type Op,
  type Scalar,
  type Selector,
} from './selector.ts';

function errorOf(fn: () => unknown): SelectorError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(SelectorError);
    return err as SelectorError;
  }
  throw new Error('expected a SelectorError');
}

const h100 = { gpuProduct: 'NVIDIA-H100-80GB-HBM3', gpuModel: 'H100', vramGiB: 80, numaNode: 1, nvlinkDomain: 'nvl-a', mig: false };

describe('parseSelector', () => {
  it.each<[string, Selector]>([
    ['', []],
    ['   \n\t ', []],
    ['vramGiB >= 80 && gpuModel == "H100"', [
      { attr: 'vramGiB', op: '>=', value: 80 },
      { attr: 'gpuModel', op: '==', value: 'H100' },
    ]],
    ['a==1', [{ attr: 'a', op: '==', value: 1 }]],
    ['a!=1', [{ attr: 'a', op: '!=', value: 1 }]],
    ['a>1', [{ attr: 'a', op: '>', value: 1 }]],
    ['a>=1', [{ attr: 'a', op: '>=', value: 1 }]],
    ['a<1', [{ attr: 'a', op: '<', value: 1 }]],
    ['a<=1', [{ attr: 'a', op: '<=', value: 1 }]],
    ['a > -2.5', [{ attr: 'a', op: '>', value: -2.5 }]],
    ['a == 1e+21', [{ attr: 'a', op: '==', value: 1e21 }]],
    ['a == 1.5E-7', [{ attr: 'a', op: '==', value: 1.5e-7 }]],
    ['a == -0', [{ attr: 'a', op: '==', value: 0 }]],
    ['a == true', [{ attr: 'a', op: '==', value: true }]],
    ['a != false', [{ attr: 'a', op: '!=', value: false }]],
    ['a == ""', [{ attr: 'a', op: '==', value: '' }]],
    ['a == "say \\"hi\\" \\\\ bye"', [{ attr: 'a', op: '==', value: 'say "hi" \\ bye' }]],
    ['a == "&& == [ ] , !"', [{ attr: 'a', op: '==', value: '&& == [ ] , !' }]],
    ['numaNode in [0, 1]', [{ attr: 'numaNode', op: 'in', value: [0, 1] }]],
    ['x in["a",1,true]', [{ attr: 'x', op: 'in', value: ['a', 1, true] }]],
    ['x notin [ "a" ]', [{ attr: 'x', op: 'notin', value: ['a'] }]],
    ['nvlinkDomain', [{ attr: 'nvlinkDomain', op: 'exists' }]],
    ['!nvlinkDomain', [{ attr: 'nvlinkDomain', op: '!exists' }]],
    ['! nvlinkDomain', [{ attr: 'nvlinkDomain', op: '!exists' }]],
    ['a&&!b&&c', [{ attr: 'a', op: 'exists' }, { attr: 'b', op: '!exists' }, { attr: 'c', op: 'exists' }]],
    ['_x.y_1.z == 1', [{ attr: '_x.y_1.z', op: '==', value: 1 }]],
    ['in in [1]', [{ attr: 'in', op: 'in', value: [1] }]],
    ['true == false', [{ attr: 'true', op: '==', value: false }]],
    ['\n a\t==\r\n"b"  &&\n c ', [{ attr: 'a', op: '==', value: 'b' }, { attr: 'c', op: 'exists' }]],
  ])('parses %j', (text, expected) => {
    expect(parseSelector(text)).toEqual(expected);
  });

  it.each<[string, number, RegExp]>([
    ['a ==', 4, /expected a value/],
    ['a = 1', 2, /use '=='/],
    ['a == H100', 5, /strings must be double-quoted/],
    ['a == "H100', 5, /unterminated string/],
    ['a == "x\\n"', 7, /unsupported escape/],
    ['a > "80"', 4, /needs a number/],
    ['a >= true', 5, /needs a number/],
    ['a in []', 5, /must not be empty/],
    ['a in [ ]', 5, /must not be empty/],
    ['a in [1,]', 8, /expected a value/],
    ['a in [1 2]', 8, /expected ',' or ']'/],
    ['a in [1', 5, /unterminated list/],
    ['a in 1', 5, /expected '\['/],
    ['a notin', 7, /expected '\['/],
    ['a ~ 1', 2, /expected an operator/],
    ['a like "x"', 2, /expected an operator/],
    ['a b', 2, /expected an operator/],
    ['a == 1 b == 2', 7, /expected '&&'/],
    ['a == 1 &', 7, /expected '&&'/],
    ['a == 1 ||b', 7, /expected '&&'/],
    ['a &&', 4, /expected a clause after '&&'/],
    ['&& a', 0, /expected an attribute name/],
    ['a && && b', 5, /expected an attribute name/],
    ['1a == 1', 0, /expected an attribute name/],
    ['!', 1, /expected an attribute name/],
    ['!!a', 1, /expected an attribute name/],
    ['__proto__ == 1', 0, /not allowed/],
    ['a && !__proto__', 6, /not allowed/],
    ['a == 80GiB', 7, /expected '&&'/],
    ['a == +1', 5, /expected a value/],
    ['a == .5', 5, /expected a value/],
    ['a == 1e999', 5, /out of range/],
    ['a == -', 5, /expected a number/],
    ['a == nothing', 5, /strings must be double-quoted/],
  ])('rejects %j at position %i', (text, position, message) => {
    const err = errorOf(() => parseSelector(text));
    expect(err.code).toBe('INVALID_SELECTOR');
    expect(err.position).toBe(position);
    expect(err.message).toMatch(message);
    expect(err.message).toContain(`at position ${position}`);
  });

  it(`accepts ${MAX_SELECTOR_LENGTH} characters and rejects ${MAX_SELECTOR_LENGTH + 1}`, () => {
    const pad = (n: number) => `a == "${'x'.repeat(n - 7)}"`;
    expect(pad(MAX_SELECTOR_LENGTH)).toHaveLength(MAX_SELECTOR_LENGTH);
    expect(parseSelector(pad(MAX_SELECTOR_LENGTH))).toHaveLength(1);
    const err = errorOf(() => parseSelector(pad(MAX_SELECTOR_LENGTH + 1)));
    expect(err.message).toMatch(/too long/);
    expect(err.position).toBe(MAX_SELECTOR_LENGTH);
  });

  it(`accepts ${MAX_SELECTOR_CLAUSES} clauses and rejects ${MAX_SELECTOR_CLAUSES + 1}`, () => {
    const text = (n: number) => Array.from({ length: n }, (_, i) => `a${i}`).join(' && ');
    expect(parseSelector(text(MAX_SELECTOR_CLAUSES))).toHaveLength(MAX_SELECTOR_CLAUSES);
    const err = errorOf(() => parseSelector(text(MAX_SELECTOR_CLAUSES + 1)));
    expect(err.message).toMatch(/too many clauses/);
    expect(err.position).toBe(text(MAX_SELECTOR_CLAUSES).length + 4);
  });

  it('rejects a non-string with a SelectorError', () => {
    expect(errorOf(() => parseSelector(42 as unknown as string)).message).toMatch(/must be a string/);
  });
});

describe('selectorFromObject', () => {
  it.each<[string, unknown, Selector]>([
    ['empty object', {}, []],
    ['the API example', { gpuModel: 'H100', vramGiB: { gte: 80 }, numaNode: { in: [0, 1] }, nvlinkDomain: { exists: true } }, [
      { attr: 'gpuModel', op: '==', value: 'H100' },
      { attr: 'vramGiB', op: '>=', value: 80 },
      { attr: 'numaNode', op: 'in', value: [0, 1] },
      { attr: 'nvlinkDomain', op: 'exists' },
    ]],
    ['scalar number', { vramGiB: 80 }, [{ attr: 'vramGiB', op: '==', value: 80 }]],
    ['scalar boolean', { mig: false }, [{ attr: 'mig', op: '==', value: false }]],
    ['eq', { a: { eq: 'x' } }, [{ attr: 'a', op: '==', value: 'x' }]],
    ['ne', { a: { ne: true } }, [{ attr: 'a', op: '!=', value: true }]],
    ['gt', { a: { gt: 1 } }, [{ attr: 'a', op: '>', value: 1 }]],
    ['gte', { a: { gte: 1 } }, [{ attr: 'a', op: '>=', value: 1 }]],
    ['lt', { a: { lt: 1 } }, [{ attr: 'a', op: '<', value: 1 }]],
    ['lte', { a: { lte: 1 } }, [{ attr: 'a', op: '<=', value: 1 }]],
    ['in', { a: { in: ['x', 2, false] } }, [{ attr: 'a', op: 'in', value: ['x', 2, false] }]],
    ['notIn', { a: { notIn: [3] } }, [{ attr: 'a', op: 'notin', value: [3] }]],
    ['exists false', { a: { exists: false } }, [{ attr: 'a', op: '!exists' }]],
    ['several operators at once', { vramGiB: { gte: 40, lt: 100, ne: 48 } }, [
      { attr: 'vramGiB', op: '>=', value: 40 },
      { attr: 'vramGiB', op: '<', value: 100 },
      { attr: 'vramGiB', op: '!=', value: 48 },
    ]],
    ['-0 normalised', { a: -0, b: { in: [-0] } }, [{ attr: 'a', op: '==', value: 0 }, { attr: 'b', op: 'in', value: [0] }]],
    ['null-prototype object', Object.assign(Object.create(null) as object, { a: 1 }), [{ attr: 'a', op: '==', value: 1 }]],
  ])('%s', (_name, obj, expected) => {
    expect(selectorFromObject(obj)).toEqual(expected);
  });

  it.each<[string, unknown, RegExp]>([
    ['null', null, /must be an object/],
    ['an array', [{ a: 1 }], /must be an object/],
    ['a string', 'a == 1', /must be an object/],
    ['undefined', undefined, /must be an object/],
    ['a class instance', new Date(0), /must be an object/],
    ['bad attribute name', { '1a': 1 }, /invalid attribute name/],
    ['attribute name with a dash', { 'gpu-model': 'x' }, /invalid attribute name/],
    ['empty attribute name', { '': 1 }, /invalid attribute name/],
    ['__proto__ attribute', JSON.parse('{"__proto__": 1}') as unknown, /invalid attribute name "__proto__"/],
    ['null value', { a: null }, /attribute "a": must be a string/],
    ['array value', { a: [1, 2] }, /attribute "a": must be a string/],
    ['NaN value', { a: Number.NaN }, /attribute "a": must be a string/],
    ['Infinity value', { a: Number.POSITIVE_INFINITY }, /attribute "a"/],
    ['empty operator object', { a: {} }, /must not be empty/],
    ['unknown operator', { a: { gteq: 1 } }, /unknown operator "gteq"/],
    ['wrong-case operator', { a: { notin: [1] } }, /unknown operator "notin"/],
    ['unknown among known', { a: { gte: 1, between: [1, 2] } }, /unknown operator "between"/],
    ['gte with a string', { a: { gte: '80' } }, /operator "gte": must be a finite number/],
    ['lt with a boolean', { a: { lt: true } }, /operator "lt": must be a finite number/],
    ['eq with an object', { a: { eq: { x: 1 } } }, /operator "eq": must be a string/],
    ['ne with null', { a: { ne: null } }, /operator "ne": must be a string/],
    ['in with a scalar', { a: { in: 1 } }, /operator "in": must be a list/],
    ['in empty', { a: { in: [] } }, /the list must not be empty/],
    ['notIn empty', { a: { notIn: [] } }, /the list must not be empty/],
    ['in with a nested list', { a: { in: [[1]] } }, /item 0 must be a string/],
    ['in with null', { a: { in: [1, null] } }, /item 1 must be a string/],
    ['exists not boolean', { a: { exists: 1 } }, /operator "exists": must be true or false/],
  ])('rejects %s', (_name, obj, message) => {
    const err = errorOf(() => selectorFromObject(obj));
    expect(err.code).toBe('INVALID_SELECTOR');
    expect(err.message).toMatch(message);
  });

  it(`accepts ${MAX_SELECTOR_CLAUSES} clauses and rejects ${MAX_SELECTOR_CLAUSES + 1}`, () => {
    const obj = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`a${i}`, i]));
    expect(selectorFromObject(obj(MAX_SELECTOR_CLAUSES))).toHaveLength(MAX_SELECTOR_CLAUSES);
    expect(errorOf(() => selectorFromObject(obj(MAX_SELECTOR_CLAUSES + 1))).message).toMatch(/too many clauses/);
    // Clauses are counted, not attributes.
    const ops = { ...obj(MAX_SELECTOR_CLAUSES - 1), z: { gte: 1, lte: 2 } };
    expect(errorOf(() => selectorFromObject(ops)).message).toMatch(/too many clauses/);
  });

  it('rejects an object whose text form would exceed the length limit', () => {
    const ok = { a: 'x'.repeat(MAX_SELECTOR_LENGTH - 7) }; // a == "…" is 7 characters plus the value
    expect(formatSelector(selectorFromObject(ok))).toHaveLength(MAX_SELECTOR_LENGTH);
    expect(errorOf(() => selectorFromObject({ a: 'x'.repeat(MAX_SELECTOR_LENGTH - 6) })).message).toMatch(/too long/);
  });
});

describe('formatSelector', () => {
  it.each<[Selector, string]>([
    [[], ''],
    [[{ attr: 'vramGiB', op: '>=', value: 80 }, { attr: 'gpuModel', op: '==', value: 'H100' }], 'vramGiB >= 80 && gpuModel == "H100"'],
    [[{ attr: 'a', op: 'in', value: ['x', 1, true] }], 'a in ["x", 1, true]'],
    [[{ attr: 'a', op: 'notin', value: [-1.5] }], 'a notin [-1.5]'],
    [[{ attr: 'a', op: 'exists' }, { attr: 'b', op: '!exists' }], 'a && !b'],
    [[{ attr: 'a', op: 'exists', value: 'ignored' }], 'a'],
    [[{ attr: 'a', op: '==', value: 'q"b\\s' }], 'a == "q\\"b\\\\s"'],
    [[{ attr: 'a', op: '!=', value: -0 }], 'a != 0'],
    [[{ attr: 'a', op: '<', value: 1e21 }], 'a < 1e+21'],
  ])('formats %j as %j', (sel, text) => {
    expect(formatSelector(sel)).toBe(text);
  });

  it.each<[string, Clause]>([
    ['bad attribute', { attr: 'a b', op: 'exists' }],
    ['__proto__ attribute', { attr: '__proto__', op: 'exists' }],
    ['bad operator', { attr: 'a', op: '=~' as Op }],
    ['in without a list', { attr: 'a', op: 'in', value: 1 }],
    ['in with an empty list', { attr: 'a', op: 'in', value: [] }],
    ['comparison with a string', { attr: 'a', op: '>', value: '1' }],
    ['equality without a value', { attr: 'a', op: '==' }],
    ['NaN', { attr: 'a', op: '==', value: Number.NaN }],
    ['object in a list', { attr: 'a', op: 'in', value: [{}] as unknown as Scalar[] }],
  ])('throws SelectorError on %s', (_name, clause) => {
    errorOf(() => formatSelector([clause]));
  });
});

describe('matchesSelector', () => {
  it.each<[string, Clause, Record<string, unknown>, boolean]>([
    ['== string', { attr: 'gpuModel', op: '==', value: 'H100' }, h100, true],
    ['== string, other', { attr: 'gpuModel', op: '==', value: 'A100' }, h100, false],
    ['== is case-sensitive', { attr: 'gpuModel', op: '==', value: 'h100' }, h100, false],
    ['== number', { attr: 'vramGiB', op: '==', value: 80 }, h100, true],
    ['== number vs decimal spelling', { attr: 'vramGiB', op: '==', value: 80.0 }, h100, true],
    ['== no string-to-number coercion', { attr: 'vramGiB', op: '==', value: '80' }, h100, false],
    ['== no number-to-string coercion', { attr: 'v', op: '==', value: 80 }, { v: '80' }, false],
    ['== no boolean coercion', { attr: 'v', op: '==', value: true }, { v: 1 }, false],
    ['== boolean', { attr: 'mig', op: '==', value: false }, h100, true],
    ['== missing', { attr: 'nope', op: '==', value: 'x' }, h100, false],
    ['== null', { attr: 'v', op: '==', value: 'x' }, { v: null }, false],
    ['== NaN attribute', { attr: 'v', op: '==', value: 1 }, { v: Number.NaN }, false],
    ['== 0 and -0', { attr: 'v', op: '==', value: 0 }, { v: -0 }, true],
    ['!= other', { attr: 'gpuModel', op: '!=', value: 'A100' }, h100, true],
    ['!= same', { attr: 'gpuModel', op: '!=', value: 'H100' }, h100, false],
    ['!= missing matches', { attr: 'nope', op: '!=', value: 'x' }, h100, true],
    ['!= null matches', { attr: 'v', op: '!=', value: 'x' }, { v: null }, true],
    ['!= different type matches', { attr: 'vramGiB', op: '!=', value: '80' }, h100, true],
    ['> true', { attr: 'vramGiB', op: '>', value: 79 }, h100, true],
    ['> equal', { attr: 'vramGiB', op: '>', value: 80 }, h100, false],
    ['>= equal', { attr: 'vramGiB', op: '>=', value: 80 }, h100, true],
    ['>= below', { attr: 'vramGiB', op: '>=', value: 81 }, h100, false],
    ['< true', { attr: 'vramGiB', op: '<', value: 81 }, h100, true],
    ['< equal', { attr: 'vramGiB', op: '<', value: 80 }, h100, false],
    ['<= equal', { attr: 'vramGiB', op: '<=', value: 80 }, h100, true],
    ['<= above', { attr: 'vramGiB', op: '<=', value: 79.5 }, h100, false],
    ['> negative', { attr: 'v', op: '>', value: -1 }, { v: 0 }, true],
    ['> missing', { attr: 'nope', op: '>', value: 0 }, h100, false],
    ['< missing', { attr: 'nope', op: '<', value: 1e9 }, h100, false],
    ['>= numeric string', { attr: 'v', op: '>=', value: 1 }, { v: '80' }, false],
    ['<= boolean', { attr: 'v', op: '<=', value: 1 }, { v: true }, false],
    ['< null', { attr: 'v', op: '<', value: 1 }, { v: null }, false],
    ['> NaN', { attr: 'v', op: '>', value: 0 }, { v: Number.NaN }, false],
    ['> Infinity', { attr: 'v', op: '>', value: 0 }, { v: Number.POSITIVE_INFINITY }, true],
    ['in hit', { attr: 'numaNode', op: 'in', value: [0, 1] }, h100, true],
    ['in miss', { attr: 'numaNode', op: 'in', value: [0, 2] }, h100, false],
    ['in no coercion', { attr: 'numaNode', op: 'in', value: ['1'] }, h100, false],
    ['in mixed', { attr: 'gpuModel', op: 'in', value: [1, 'H100'] }, h100, true],
    ['in missing', { attr: 'nope', op: 'in', value: ['x'] }, h100, false],
    ['notin hit', { attr: 'numaNode', op: 'notin', value: [0, 1] }, h100, false],
    ['notin miss', { attr: 'numaNode', op: 'notin', value: [0] }, h100, true],
    ['notin missing matches', { attr: 'nope', op: 'notin', value: ['x'] }, h100, true],
    ['exists', { attr: 'nvlinkDomain', op: 'exists' }, h100, true],
    ['exists false value', { attr: 'mig', op: 'exists' }, h100, true],
    ['exists 0', { attr: 'v', op: 'exists' }, { v: 0 }, true],
    ['exists empty string', { attr: 'v', op: 'exists' }, { v: '' }, true],
    ['exists missing', { attr: 'nope', op: 'exists' }, h100, false],
    ['exists null', { attr: 'v', op: 'exists' }, { v: null }, false],
    ['exists undefined', { attr: 'v', op: 'exists' }, { v: undefined }, false],
    ['!exists missing', { attr: 'nope', op: '!exists' }, h100, true],
    ['!exists null', { attr: 'v', op: '!exists' }, { v: null }, true],
    ['!exists present', { attr: 'nvlinkDomain', op: '!exists' }, h100, false],
    ['prototype properties do not exist', { attr: 'constructor', op: 'exists' }, h100, false],
    ['toString is missing', { attr: 'toString', op: '!exists' }, {}, true],
    ['unknown op never matches', { attr: 'a', op: '~' as Op, value: 1 }, { a: 1 }, false],
  ])('%s', (_name, clause, attrs, expected) => {
    expect(matchesSelector([clause], attrs)).toBe(expected);
  });

  it('the empty selector matches everything', () => {
    expect(matchesSelector([], {})).toBe(true);
    expect(matchesSelector([], h100)).toBe(true);
  });

  it('parsed text and object forms agree on the guide example', () => {
    const text = parseSelector('vramGiB >= 80 && gpuModel == "H100" && numaNode in [0, 1] && nvlinkDomain');
    const obj = selectorFromObject({ vramGiB: { gte: 80 }, gpuModel: 'H100', numaNode: { in: [0, 1] }, nvlinkDomain: { exists: true } });
    expect(text).toEqual(obj);
    expect(matchesSelector(text, h100)).toBe(true);
    expect(matchesSelector(text, { ...h100, vramGiB: 40 })).toBe(false);
    expect(matchesSelector(text, { ...h100, nvlinkDomain: null })).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------------------------------
// Properties

const attrName = fc.stringMatching(/^[A-Za-z_][A-Za-z0-9_.]{0,12}$/).filter((a) => a !== '__proto__');
const finiteNumber = fc
  .oneof(fc.integer({ min: -1000, max: 1000 }), fc.double({ noNaN: true, noDefaultInfinity: true }))
  .map((n) => (n === 0 ? 0 : n));
const scalar: fc.Arbitrary<Scalar> = fc.oneof(fc.string({ unit: 'grapheme-composite' }), fc.string(), finiteNumber, fc.boolean());
const clause: fc.Arbitrary<Clause> = fc.oneof(
  fc.record({ attr: attrName, op: fc.constantFrom<Op>('==', '!='), value: scalar }),
  fc.record({ attr: attrName, op: fc.constantFrom<Op>('>', '>=', '<', '<='), value: finiteNumber }),
  fc.record({ attr: attrName, op: fc.constantFrom<Op>('in', 'notin'), value: fc.array(scalar, { minLength: 1, maxLength: 5 }) }),
  fc.record({ attr: attrName, op: fc.constantFrom<Op>('exists', '!exists') }),
);
const selector = fc.array(clause, { maxLength: 12 });

// Attributes drawn from a small pool of names and values, so that clauses often hit.
const smallAttr = fc.constantFrom('a', 'b', 'c');
const smallValue = fc.constantFrom<Scalar>(0, 1, 2, -1, 'x', 'y', '', true, false);
const smallClause: fc.Arbitrary<Clause> = fc.oneof(
  fc.record({ attr: smallAttr, op: fc.constantFrom<Op>('==', '!='), value: smallValue }),
  fc.record({ attr: smallAttr, op: fc.constantFrom<Op>('>', '>=', '<', '<='), value: fc.constantFrom(-1, 0, 1, 2) }),
  fc.record({ attr: smallAttr, op: fc.constantFrom<Op>('in', 'notin'), value: fc.array(smallValue, { minLength: 1, maxLength: 3 }) }),
  fc.record({ attr: smallAttr, op: fc.constantFrom<Op>('exists', '!exists') }),
);
const smallAttrs = fc.dictionary(smallAttr, fc.oneof(smallValue, fc.constant(null), fc.constant(undefined)));

describe('selector properties', () => {
  it('formatSelector then parseSelector is the identity', () => {
    fc.assert(
      fc.property(selector, (sel) => {
        expect(parseSelector(formatSelector(sel))).toEqual(sel);
      }),
      { numRuns: 1000 },
    );
  });

  it('formatSelector is canonical: format(parse(format(s))) === format(s)', () => {
    fc.assert(
      fc.property(selector, (sel) => {
        const text = formatSelector(sel);
        expect(formatSelector(parseSelector(text))).toBe(text);
      }),
    );
  });

  it('matching a conjunction is the AND of its clauses', () => {
    fc.assert(
      fc.property(fc.array(smallClause, { maxLength: 6 }), smallAttrs, (sel, attrs) => {
        expect(matchesSelector(sel, attrs)).toBe(sel.every((c) => matchesSelector([c], attrs)));
      }),
      { numRuns: 2000 },
    );
  });

  it('== and != are complements, as are in and notin, and exists and !exists', () => {
    fc.assert(
      fc.property(smallClause, smallAttrs, (c, attrs) => {
        const flip: Partial<Record<Op, Op>> = { '==': '!=', '!=': '==', in: 'notin', notin: 'in', exists: '!exists', '!exists': 'exists' };
        const other = flip[c.op];
        if (other === undefined) return;
        expect(matchesSelector([{ ...c, op: other }], attrs)).toBe(!matchesSelector([c], attrs));
      }),
    );
  });

  it('parseSelector throws nothing but SelectorError on arbitrary strings', () => {
    const alphabet = fc.constantFrom(...'ab_.019-+eE "\\[],=!<>&|in notin true false'.split(''));
    const text = fc.oneof(
      fc.string(),
      fc.string({ unit: 'binary' }),
      fc.string({ unit: alphabet, maxLength: 60 }),
      fc.array(fc.constantFrom('a', 'b.c', '==', '!=', '>=', '<', 'in', 'notin', '[', ']', ',', '&&', '!', '"x"', '1', '-2.5', 'true', ' '), { maxLength: 20 }).map((p) => p.join('')),
    );
    fc.assert(
      fc.property(text, (s) => {
        try {
          const sel = parseSelector(s);
          // Whatever parses, formats and parses back to itself.
          expect(parseSelector(formatSelector(sel))).toEqual(sel);
        } catch (err) {
          if (!(err instanceof SelectorError)) throw err;
          expect(err.code).toBe('INVALID_SELECTOR');
          expect(typeof err.position).toBe('number');
        }
      }),
      { numRuns: 3000 },
    );
  });

  it('selectorFromObject throws nothing but SelectorError, and what it returns round-trips', () => {
    const value = fc.oneof(
      scalar,
      fc.constant(null),
      fc.array(scalar, { maxLength: 3 }),
      fc.dictionary(
        fc.constantFrom('eq', 'ne', 'gt', 'gte', 'lt', 'lte', 'in', 'notIn', 'exists', 'bogus'),
        fc.oneof(scalar, fc.array(fc.oneof(scalar, fc.constant(null)), { maxLength: 3 }), fc.constant(null)),
      ),
    );
    fc.assert(
      fc.property(fc.dictionary(fc.oneof(attrName, fc.string()), value), (obj) => {
        try {
          const sel = selectorFromObject(obj);
          expect(parseSelector(formatSelector(sel))).toEqual(sel);
        } catch (err) {
          if (!(err instanceof SelectorError)) throw err;
        }
      }),
      { numRuns: 1000 },
    );
  });
});
