// docs/capacity-api.md and the OpenAPI document cannot drift: every input table of the doc (Field | Type | Required |
// Constraints, under a heading naming the method's `POST /api/compute/...` path) is parsed, and each row's type,
// requirement and constraints (lengths, patterns, ranges, item counts, enums, defaults) must be the OpenAPI schema's,
// both ways: a constraint the doc states and the schema lacks fails, and so does one the schema has and the doc omits,
// and a field on one side only. The reference (shared/spec/capacity-api.md), where this checkout has it, is held to the
// same schemas.
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CAPACITY_PATHS } from '../../src/api/app.ts';
import { buildOpenApiDocument } from '../../src/api/openapi.ts';

const ROOT = path.join(import.meta.dirname, '..', '..');
const DOC = path.join(ROOT, 'docs/capacity-api.md');
/** The reference beside the checkout (/work/shared for /work/main and for a worktree under /work/wt/), if any. */
const SPEC = [path.join(ROOT, '..', 'shared'), path.join(ROOT, '..', '..', 'shared')]
  .map((d) => path.join(d, 'spec/capacity-api.md'))
  .find((f) => fs.existsSync(f));

type Schema = Record<string, unknown> & { properties?: Record<string, Schema>; items?: Schema; required?: string[]; anyOf?: Schema[] };

interface Row {
  field: string;
  type: string;
  required: boolean;
  constraints: string;
}

interface Table {
  path: string;
  rows: Row[];
}

/** `| a | b \| c |` → ['a', 'b | c']. */
export function cells(line: string): string[] {
  const inner = line.trim().replace(/^\|/, '').replace(/\|$/, '');
  return inner.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

const HEADER = ['field', 'type', 'required', 'constraints'];
const PATH_IN_HEADING = /^#{2,4} .*`POST (\/api\/compute\/[\w/]+)`/;

/** Every input table, with the method path of the heading above it. */
export function inputTables(markdown: string): Table[] {
  const lines = markdown.split('\n');
  const tables: Table[] = [];
  let heading: string | undefined;
  for (let i = 0; i < lines.length; i++) {
    const m = PATH_IN_HEADING.exec(lines[i]!);
    if (m) heading = m[1];
    if (!lines[i]!.startsWith('|') || cells(lines[i]!).map((c) => c.toLowerCase()).join() !== HEADER.join()) continue;
    if (heading === undefined) throw new Error(`line ${i + 1}: an input table under no method heading`);
    const rows: Row[] = [];
    for (i += 2; i < lines.length && lines[i]!.startsWith('|'); i++) {
      const [field, type, required, constraints] = cells(lines[i]!);
      rows.push({ field: field!.replace(/^`|`$/g, ''), type: type!, required: required === 'yes', constraints: constraints ?? '' });
    }
    tables.push({ path: heading, rows });
  }
  return tables;
}

/** The constraint keywords a row states, as JSON Schema keywords. Text that is none of them fails (unchecked prose). */
export function constraintsOf(text: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const part of text.split(/;\s*(?![^`]*`(?:[^`]*`[^`]*`)*[^`]*$)/).map((p) => p.trim()).filter(Boolean)) {
    let m: RegExpExecArray | null;
    if ((m = /^at most (\d+) characters$/.exec(part))) out.maxLength = Number(m[1]);
    else if ((m = /^matches `(.+)`$/.exec(part))) out.pattern = m[1];
    else if ((m = /^(\d+)-(\d+) items$/.exec(part))) Object.assign(out, { minItems: Number(m[1]), maxItems: Number(m[2]) });
    else if ((m = /^(\d+)-(\d+)$/.exec(part))) Object.assign(out, { minimum: Number(m[1]), maximum: Number(m[2]) });
    else if ((m = /^at least (\d+)$/.exec(part))) out.minimum = Number(m[1]);
    else if ((m = /^default `(.+)`$/.exec(part))) out.default = JSON.parse(m[1]!);
    else throw new Error(`a constraint this test cannot check: "${part}"`);
  }
  return out;
}

/** `devices[].class` → the schema of `class` inside the items of `devices`, and its parent object. */
function resolve(root: Schema, field: string): { schema: Schema; parent: Schema; name: string } | undefined {
  let parent = root;
  const parts = field.split('.');
  for (const [i, part] of parts.entries()) {
    const name = part.replace(/\[\]$/, '');
    const schema = parent.properties?.[name];
    if (!schema) return undefined;
    if (i === parts.length - 1) return { schema, parent, name };
    parent = part.endsWith('[]') ? schema.items! : schema;
  }
  return undefined;
}

/** The row's Type column for a schema, in the doc's words. */
function typeWords(s: Schema): string {
  if (Array.isArray(s.enum)) return `one of ${(s.enum as string[]).map((v) => `\`${v}\``).join(', ')}`;
  if (s.anyOf) return s.anyOf.map((b) => String(b.type)).join(',');
  if (s.type === 'array') return `list of ${String(s.items?.type)}`;
  return String(s.type);
}

const KEYWORDS = ['maxLength', 'pattern', 'minItems', 'maxItems', 'minimum', 'maximum', 'default'] as const;

/** The constraint keywords of a field's own schema, without z.int()'s implicit safe-integer bounds. */
function schemaConstraints(s: Schema): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const k of KEYWORDS) if (k in s) out[k] = s[k];
  if (out.maximum === Number.MAX_SAFE_INTEGER) delete out.maximum;
  if (out.minimum === Number.MIN_SAFE_INTEGER) delete out.minimum;
  return out;
}

/** Every field path of an object schema, in the doc's notation (`devices[].count`). */
function fieldsOf(s: Schema, prefix = ''): string[] {
  const out: string[] = [];
  for (const [name, p] of Object.entries(s.properties ?? {})) {
    const at = `${prefix}${name}`;
    out.push(at);
    if (p.type === 'object') out.push(...fieldsOf(p, `${at}.`));
    if (p.type === 'array' && p.items?.type === 'object') out.push(...fieldsOf(p.items, `${at}[].`));
  }
  return out;
}

const openapi = buildOpenApiDocument(CAPACITY_PATHS) as {
  paths: Record<string, { post?: { requestBody: { content: { 'application/json': { schema: { $ref: string } } } } } }>;
  components: { schemas: Record<string, Schema> };
};

function inputSchema(methodPath: string): Schema {
  const ref = openapi.paths[methodPath]?.post?.requestBody.content['application/json'].schema.$ref;
  if (!ref) throw new Error(`${methodPath} is not in the OpenAPI document`);
  return openapi.components.schemas[ref.replace('#/components/schemas/', '')]!;
}

/** Every disagreement between one table and the schema of its method, as sentences (empty: they agree). */
export function disagreements(table: Table, root: Schema, o: { defaultsInProse?: boolean } = {}): string[] {
  const out: string[] = [];
  for (const row of table.rows) {
    const found = resolve(root, row.field);
    if (!found) {
      out.push(`${row.field}: in the doc, not in the schema`);
      continue;
    }
    const { schema, parent, name } = found;
    if (typeWords(schema) !== row.type) out.push(`${row.field}: type "${row.type}" in the doc, "${typeWords(schema)}" in the schema`);
    const required = (parent.required ?? []).includes(name);
    if (required !== row.required) out.push(`${row.field}: required ${String(row.required)} in the doc, ${String(required)} in the schema`);
    const [stated, actual] = [constraintsOf(row.constraints), schemaConstraints(schema)];
    // The reference states some defaults in its prose (timeline's stepMinutes), not in its tables.
    if (o.defaultsInProse && !('default' in stated)) delete actual.default;
    if (JSON.stringify(sorted(stated)) !== JSON.stringify(sorted(actual))) {
      out.push(`${row.field}: ${JSON.stringify(sorted(stated))} in the doc, ${JSON.stringify(sorted(actual))} in the schema`);
    }
  }
  const documented = new Set(table.rows.map((r) => r.field));
  for (const f of fieldsOf(root)) if (!documented.has(f)) out.push(`${f}: in the schema, not in the doc`);
  return out;
}

const sorted = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));

describe('docs/capacity-api.md against the OpenAPI document', () => {
  const tables = inputTables(fs.readFileSync(DOC, 'utf8'));

  it('has one input table for every capacity method', () => {
    expect(tables.map((t) => t.path).sort()).toEqual(Object.values(CAPACITY_PATHS).sort());
  });

  it.each(tables.map((t) => [t.path, t] as const))('%s: every field, type, requirement and constraint agrees', (_p, table) => {
    expect(disagreements(table, inputSchema(table.path))).toEqual([]);
  });
});

describe.skipIf(SPEC === undefined)('the reference (shared/spec/capacity-api.md) against the OpenAPI document', () => {
  const tables = SPEC === undefined ? [] : inputTables(fs.readFileSync(SPEC, 'utf8'));

  it('has the four methods', () => {
    expect(tables.map((t) => t.path)).toEqual([CAPACITY_PATHS.summary, CAPACITY_PATHS.byPool, CAPACITY_PATHS.preview, CAPACITY_PATHS.timeline]);
  });

  it.each(tables.map((t) => [t.path, t] as const))('%s agrees', (_p, table) => {
    expect(disagreements(table, inputSchema(table.path), { defaultsInProse: true })).toEqual([]);
  });
});

describe('the check itself', () => {
  const schema = inputSchema(CAPACITY_PATHS.timeline);
  const table = inputTables(fs.readFileSync(DOC, 'utf8')).find((t) => t.path === CAPACITY_PATHS.timeline)!;
  const edit = (field: string, patch: Partial<Row>): Table => ({
    path: table.path,
    rows: table.rows.map((r) => (r.field === field ? { ...r, ...patch } : r)),
  });

  it.each([
    ['a changed bound', edit('stepMinutes', { constraints: '5-1439; default `60`' }), /stepMinutes: .*"maximum":1439/],
    ['a missing default', edit('stepMinutes', { constraints: '5-1440' }), /stepMinutes: .*in the schema/],
    ['a wrong type', edit('from', { type: 'string' }), /from: type "string"/],
    ['a wrong requirement', edit('poolId', { required: false }), /poolId: required false/],
    ['a changed pattern', edit('poolId', { constraints: 'at most 57 characters; matches `^pool_[0-9a-z]{26,52}$`' }), /poolId: /],
    ['a field the schema lacks', { ...table, rows: [...table.rows, { field: 'until', type: 'integer', required: false, constraints: '' }] }, /until: in the doc, not in the schema/],
    ['a field the doc lacks', { ...table, rows: table.rows.filter((r) => r.field !== 'to') }, /to: in the schema, not in the doc/],
  ])('finds %s', (_name, changed, message) => {
    const found = disagreements(changed, schema);
    expect(found).toHaveLength(1);
    expect(found[0]).toMatch(message);
  });

  it('refuses prose it cannot check', () => {
    expect(() => constraintsOf('at most 40 characters; a real calendar date')).toThrow(/cannot check: "a real calendar date"/);
  });

  it('reads an escaped pipe inside a pattern as part of the cell', () => {
    expect(cells('| `x` | string |  | matches `^(a\\|b)$` |')).toEqual(['`x`', 'string', '', 'matches `^(a|b)$`']);
    expect(constraintsOf('at most 3 characters; matches `^(a;b|c)$`')).toEqual({ maxLength: 3, pattern: '^(a;b|c)$' });
  });
});
