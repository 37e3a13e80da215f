// Device selectors: a conjunction of clauses over a device's typed attributes (gpuProduct, gpuModel, vramGiB,
// numaNode, nvlinkDomain, ...). Two ways in, one canonical way out:
//
//   parseSelector('vramGiB >= 80 && gpuModel == "H100"')          (CLI `--selector`)
//   selectorFromObject({ gpuModel: 'H100', vramGiB: { gte: 80 } })  (API `devices[].selector`)
//   formatSelector(sel)                                            (canonical text; parses back to the same clauses)
//
// Pure: no I/O, no clock.

export type Scalar = string | number | boolean;
export type Op = '==' | '!=' | '>' | '>=' | '<' | '<=' | 'in' | 'notin' | 'exists' | '!exists';
export interface Clause {
  attr: string;
  op: Op;
  value?: Scalar | readonly Scalar[];
}
/** A conjunction of clauses; `[]` matches every device. */
export type Selector = readonly Clause[];

export const MAX_SELECTOR_LENGTH = 4096;
export const MAX_SELECTOR_CLAUSES = 64;

export class SelectorError extends Error {
  readonly code = 'INVALID_SELECTOR';
  /** 0-based character offset in the selector text (string form only). */
  position?: number;

  constructor(message: string, position?: number) {
    super(message);
    this.name = 'SelectorError';
    if (position !== undefined) this.position = position;
  }
}

// `__proto__` matches this too but is refused everywhere: copying such a key into an object changes its prototype.
const ATTR_RE = /^[A-Za-z_][A-Za-z0-9_.]*$/;
const COMPARISONS: ReadonlySet<Op> = new Set<Op>(['>', '>=', '<', '<=']);
const ALL_OPS: ReadonlySet<string> = new Set<Op>(['==', '!=', '>', '>=', '<', '<=', 'in', 'notin', 'exists', '!exists']);

function isScalar(v: unknown): v is Scalar {
  return typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v));
}

/** -0 and 0 are the same value to a selector; keep one spelling so that round trips deep-equal. */
function normalizeScalar(v: Scalar): Scalar {
  return typeof v === 'number' && v === 0 ? 0 : v;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return false;
  const proto: unknown = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

function describe(v: unknown): string {
  if (v === undefined) return 'undefined';
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object' && v !== null) return 'an object';
  return JSON.stringify(v);
}

// ---------------------------------------------------------------------------------------------------------------
// String form

const WS = new Set([' ', '\t', '\n', '\r']);
const NUMBER_RE = /-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
const WORD_RE = /[A-Za-z_][A-Za-z0-9_.]*/y;

class Parser {
  pos = 0;
  constructor(private readonly text: string) {}

  fail(message: string, position = this.pos): never {
    throw new SelectorError(`${message} at position ${position}`, position);
  }

  atEnd(): boolean {
    return this.pos >= this.text.length;
  }

  peek(n = 1): string {
    return this.text.slice(this.pos, this.pos + n);
  }

  skipWs(): void {
    while (this.pos < this.text.length && WS.has(this.text[this.pos] as string)) this.pos++;
  }

  where(): string {
    if (this.atEnd()) return 'end of selector';
    return JSON.stringify(this.text[this.pos]);
  }

  matchSticky(re: RegExp): string | undefined {
    re.lastIndex = this.pos;
    const m = re.exec(this.text);
    if (!m) return undefined;
    this.pos += m[0].length;
    return m[0];
  }

  parse(): Clause[] {
    const clauses: Clause[] = [];
    this.skipWs();
    if (this.atEnd()) return clauses;
    for (;;) {
      const start = this.pos;
      const clause = this.clause();
      if (clauses.length >= MAX_SELECTOR_CLAUSES) {
        this.fail(`too many clauses (at most ${MAX_SELECTOR_CLAUSES})`, start);
      }
      clauses.push(clause);
      this.skipWs();
      if (this.atEnd()) return clauses;
      if (this.peek(2) !== '&&') this.fail(`expected '&&' or end of selector, found ${this.where()}`);
      this.pos += 2;
      this.skipWs();
      if (this.atEnd()) this.fail("expected a clause after '&&'");
    }
  }

  attr(): string {
    const start = this.pos;
    const name = this.matchSticky(WORD_RE);
    if (name === undefined) {
      this.fail(`expected an attribute name ([A-Za-z_][A-Za-z0-9_.]*), found ${this.where()}`, start);
    }
    if (name === '__proto__') this.fail('"__proto__" is not allowed as an attribute name', start);
    return name;
  }

  clause(): Clause {
    if (this.peek() === '!') {
      this.pos++;
      this.skipWs();
      return { attr: this.attr(), op: '!exists' };
    }
    const attr = this.attr();
    this.skipWs();
    if (this.atEnd() || this.peek(2) === '&&') return { attr, op: 'exists' };

    const opStart = this.pos;
    const two = this.peek(2);
    let op: Op;
    if (two === '==' || two === '!=' || two === '>=' || two === '<=') {
      op = two;
      this.pos += 2;
    } else if (two[0] === '>' || two[0] === '<') {
      op = two[0];
      this.pos += 1;
    } else if (two[0] === '=') {
      this.fail("unexpected '='; use '==' for equality");
    } else {
      const word = this.matchSticky(WORD_RE);
      if (word === 'in' || word === 'notin') {
        op = word;
      } else {
        this.fail(
          `expected an operator (==, !=, >, >=, <, <=, in, notin), '&&' or end of selector after attribute "${attr}", found ${
            word === undefined ? this.where() : JSON.stringify(word)
          }`,
          opStart,
        );
      }
    }
    this.skipWs();

    if (op === 'in' || op === 'notin') return { attr, op, value: this.list(op) };

    const valueStart = this.pos;
    const value = this.scalar();
    if (COMPARISONS.has(op) && typeof value !== 'number') {
      this.fail(`operator '${op}' needs a number, found ${JSON.stringify(value)}`, valueStart);
    }
    return { attr, op, value };
  }

  list(op: 'in' | 'notin'): Scalar[] {
    if (this.peek() !== '[') this.fail(`expected '[' after '${op}', found ${this.where()}`);
    const open = this.pos;
    this.pos++;
    this.skipWs();
    if (this.peek() === ']') this.fail(`the list after '${op}' must not be empty`, open);
    const items: Scalar[] = [];
    for (;;) {
      this.skipWs();
      items.push(this.scalar());
      this.skipWs();
      const c = this.peek();
      if (c === ',') {
        this.pos++;
        continue;
      }
      if (c === ']') {
        this.pos++;
        return items;
      }
      if (this.atEnd()) this.fail(`unterminated list: expected ',' or ']'`, open);
      this.fail(`expected ',' or ']' in list, found ${this.where()}`);
    }
  }

  scalar(): Scalar {
    const start = this.pos;
    const c = this.peek();
    if (c === '"') return this.string();
    if (c === '-' || (c >= '0' && c <= '9')) {
      const token = this.matchSticky(NUMBER_RE);
      if (token === undefined) this.fail(`expected a number, found ${this.where()}`, start);
      const n = Number(token);
      if (!Number.isFinite(n)) this.fail(`number ${token} is out of range`, start);
      return normalizeScalar(n);
    }
    const word = this.matchSticky(WORD_RE);
    if (word === 'true') return true;
    if (word === 'false') return false;
    if (word !== undefined) {
      this.fail(`expected a value, found ${JSON.stringify(word)}; strings must be double-quoted, e.g. "${word}"`, start);
    }
    this.fail(`expected a value (a double-quoted string, a number, true or false), found ${this.where()}`, start);
  }

  string(): string {
    const start = this.pos;
    this.pos++; // opening quote
    let out = '';
    for (;;) {
      if (this.atEnd()) this.fail('unterminated string', start);
      const c = this.text[this.pos] as string;
      if (c === '"') {
        this.pos++;
        return out;
      }
      if (c === '\\') {
        const next = this.text[this.pos + 1];
        if (next !== '"' && next !== '\\') {
          this.fail(`unsupported escape ${next === undefined ? '\\' : JSON.stringify('\\' + next)}; only \\" and \\\\ are allowed`);
        }
        out += next;
        this.pos += 2;
        continue;
      }
      out += c;
      this.pos++;
    }
  }
}

/**
 * Parses the text form: clauses joined by `&&`; `attr OP value` (OP one of `== != > >= < <=`), `attr in [v, ...]`,
 * `attr notin [v, ...]`, `attr` (exists), `!attr` (does not exist). Values are double-quoted strings (escapes `\"`
 * and `\\`), numbers, `true` or `false`. Empty or blank text is the empty selector. Throws SelectorError only.
 */
export function parseSelector(text: string): Selector {
  if (typeof text !== 'string') throw new SelectorError('selector must be a string');
  if (text.length > MAX_SELECTOR_LENGTH) {
    throw new SelectorError(
      `selector is too long (${text.length} characters, at most ${MAX_SELECTOR_LENGTH})`,
      MAX_SELECTOR_LENGTH,
    );
  }
  return new Parser(text).parse();
}

// ---------------------------------------------------------------------------------------------------------------
// Object form

const OBJECT_OPS = ['eq', 'ne', 'gt', 'gte', 'lt', 'lte', 'in', 'notIn', 'exists'] as const;
type ObjectOp = (typeof OBJECT_OPS)[number];
const OBJECT_OP_TO_OP: Record<Exclude<ObjectOp, 'exists'>, Op> = {
  eq: '==',
  ne: '!=',
  gt: '>',
  gte: '>=',
  lt: '<',
  lte: '<=',
  in: 'in',
  notIn: 'notin',
};

function isObjectOp(k: string): k is ObjectOp {
  return (OBJECT_OPS as readonly string[]).includes(k);
}

function objectClause(attr: string, key: ObjectOp, v: unknown): Clause {
  const where = `attribute "${attr}", operator "${key}"`;
  switch (key) {
    case 'exists':
      if (typeof v !== 'boolean') throw new SelectorError(`${where}: must be true or false, got ${describe(v)}`);
      return { attr, op: v ? 'exists' : '!exists' };
    case 'in':
    case 'notIn': {
      if (!Array.isArray(v)) throw new SelectorError(`${where}: must be a list of values, got ${describe(v)}`);
      if (v.length === 0) throw new SelectorError(`${where}: the list must not be empty`);
      const items = v.map((item: unknown, i) => {
        if (!isScalar(item)) {
          throw new SelectorError(`${where}: item ${i} must be a string, a finite number or a boolean, got ${describe(item)}`);
        }
        return normalizeScalar(item);
      });
      return { attr, op: OBJECT_OP_TO_OP[key], value: items };
    }
    case 'gt':
    case 'gte':
    case 'lt':
    case 'lte':
      if (typeof v !== 'number' || !Number.isFinite(v)) {
        throw new SelectorError(`${where}: must be a finite number, got ${describe(v)}`);
      }
      return { attr, op: OBJECT_OP_TO_OP[key], value: normalizeScalar(v) };
    case 'eq':
    case 'ne':
      if (!isScalar(v)) throw new SelectorError(`${where}: must be a string, a finite number or a boolean, got ${describe(v)}`);
      return { attr, op: OBJECT_OP_TO_OP[key], value: normalizeScalar(v) };
  }
}

/**
 * Builds a selector from the API's object form: `{ gpuModel: 'H100', vramGiB: { gte: 80 }, numaNode: { in: [0, 1] },
 * nvlinkDomain: { exists: true } }`. A scalar means equality; an operator object may combine `eq ne gt gte lt lte in
 * notIn exists`, each becoming one clause (in the order given). Throws SelectorError.
 */
export function selectorFromObject(obj: unknown): Selector {
  if (!isPlainObject(obj)) {
    throw new SelectorError(`selector must be an object mapping attribute names to values or operator objects, got ${describe(obj)}`);
  }
  const clauses: Clause[] = [];
  const push = (c: Clause): void => {
    if (clauses.length >= MAX_SELECTOR_CLAUSES) throw new SelectorError(`too many clauses (at most ${MAX_SELECTOR_CLAUSES})`);
    clauses.push(c);
  };
  for (const [attr, spec] of Object.entries(obj)) {
    if (!ATTR_RE.test(attr) || attr === '__proto__') {
      throw new SelectorError(`invalid attribute name ${JSON.stringify(attr)}: must match [A-Za-z_][A-Za-z0-9_.]*`);
    }
    if (isScalar(spec)) {
      push({ attr, op: '==', value: normalizeScalar(spec) });
      continue;
    }
    if (!isPlainObject(spec)) {
      throw new SelectorError(
        `attribute "${attr}": must be a string, a finite number, a boolean or an operator object, got ${describe(spec)}`,
      );
    }
    const keys = Object.keys(spec);
    if (keys.length === 0) throw new SelectorError(`attribute "${attr}": the operator object must not be empty`);
    for (const key of keys) {
      if (!isObjectOp(key)) {
        throw new SelectorError(`attribute "${attr}": unknown operator ${JSON.stringify(key)} (expected one of ${OBJECT_OPS.join(', ')})`);
      }
      push(objectClause(attr, key, spec[key]));
    }
  }
  const text = formatSelector(clauses);
  if (text.length > MAX_SELECTOR_LENGTH) {
    throw new SelectorError(`selector is too long (${text.length} characters as text, at most ${MAX_SELECTOR_LENGTH})`);
  }
  return clauses;
}

// ---------------------------------------------------------------------------------------------------------------
// Formatting

function formatScalar(v: unknown): string {
  if (typeof v === 'string') return `"${v.replace(/[\\"]/g, '\\$&')}"`;
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'number' && Number.isFinite(v)) return v === 0 ? '0' : String(v);
  throw new SelectorError(`cannot format value ${describe(v)}: must be a string, a finite number or a boolean`);
}

function formatClause(c: Clause): string {
  if (!ATTR_RE.test(c.attr) || c.attr === '__proto__') throw new SelectorError(`invalid attribute name ${JSON.stringify(c.attr)}`);
  if (!ALL_OPS.has(c.op)) throw new SelectorError(`invalid operator ${JSON.stringify(c.op)}`);
  switch (c.op) {
    case 'exists':
      return c.attr;
    case '!exists':
      return `!${c.attr}`;
    case 'in':
    case 'notin':
      if (!Array.isArray(c.value) || c.value.length === 0) {
        throw new SelectorError(`operator '${c.op}' on "${c.attr}" needs a non-empty list`);
      }
      return `${c.attr} ${c.op} [${(c.value as readonly unknown[]).map(formatScalar).join(', ')}]`;
    default:
      if (COMPARISONS.has(c.op) && (typeof c.value !== 'number' || !Number.isFinite(c.value))) {
        throw new SelectorError(`operator '${c.op}' on "${c.attr}" needs a number`);
      }
      return `${c.attr} ${c.op} ${formatScalar(c.value)}`;
  }
}

/**
 * The canonical text of a selector: clauses in order joined by ` && `; the empty selector is `""`.
 * `parseSelector(formatSelector(s))` deep-equals `s` for every selector either parser returns.
 * Throws SelectorError on a structurally invalid clause (bad name, operator or value shape).
 */
export function formatSelector(sel: Selector): string {
  return sel.map(formatClause).join(' && ');
}

// ---------------------------------------------------------------------------------------------------------------
// Matching

function scalarEquals(a: unknown, b: unknown): boolean {
  // No coercion: "80" is not 80, true is not 1. Numbers compare numerically (=== does; NaN never matches).
  return a === b;
}

function matchesClause(c: Clause, attrs: Readonly<Record<string, unknown>>): boolean {
  // Own properties only, so that "constructor" or "toString" never "exist" through the prototype.
  const v = Object.hasOwn(attrs, c.attr) ? attrs[c.attr] : undefined;
  switch (c.op) {
    case 'exists':
      return v !== undefined && v !== null;
    case '!exists':
      return v === undefined || v === null;
    case '==':
      return scalarEquals(v, c.value);
    case '!=':
      return !scalarEquals(v, c.value);
    case '>':
      return typeof v === 'number' && typeof c.value === 'number' && v > c.value;
    case '>=':
      return typeof v === 'number' && typeof c.value === 'number' && v >= c.value;
    case '<':
      return typeof v === 'number' && typeof c.value === 'number' && v < c.value;
    case '<=':
      return typeof v === 'number' && typeof c.value === 'number' && v <= c.value;
    case 'in':
      return Array.isArray(c.value) && c.value.some((x: unknown) => scalarEquals(v, x));
    case 'notin':
      return Array.isArray(c.value) && !c.value.some((x: unknown) => scalarEquals(v, x));
    default:
      return false;
  }
}

/**
 * Whether a device's attributes satisfy every clause. Comparisons need a number on both sides (a missing or
 * non-number attribute does not match); `==` is strict equality without coercion; `!=` and `notin` match a missing
 * attribute; `exists` means present and not null.
 */
export function matchesSelector(sel: Selector, attrs: Readonly<Record<string, unknown>>): boolean {
  return sel.every((c) => matchesClause(c, attrs));
}
