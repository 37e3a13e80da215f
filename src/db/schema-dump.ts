// A deterministic text listing of the migrated schema, read from the catalog (no pg_dump): extensions, tables and
// views with their columns, constraints, indexes and triggers, sequences, and every function with its definition.
// `npm run db:dump` writes it to migrations/schema.dump; test/db/schema.test.ts compares a fresh database with it.
import type pg from 'pg';

/** Where the checked-in dump lives, next to the migrations (not ending in .sql: the function bodies stand once). */
export const SCHEMA_DUMP_FILE = 'schema.dump';

const SCHEMA = `n.nspname = current_schema()`;

interface Section {
  name: string;
  /** The line, from `c` (pg_class, the relation) and `n` (its namespace) joined in `from`. */
  line: string;
  from: string;
  where?: string;
  order: string;
}

const ON_CLASS = 'JOIN pg_namespace n ON n.oid = c.relnamespace';

const SECTIONS: Section[] = [
  {
    name: 'extensions',
    line: `'extension ' || x.extname`,
    from: 'pg_extension x',
    where: `x.extname <> 'plpgsql'`,
    order: 'x.extname',
  },
  {
    name: 'relations',
    line: `CASE c.relkind WHEN 'v' THEN 'view ' WHEN 'm' THEN 'materialized view ' WHEN 'S' THEN 'sequence ' ELSE 'table ' END
           || c.relname`,
    from: `pg_class c ${ON_CLASS}`,
    where: `${SCHEMA} AND c.relkind IN ('r', 'p', 'v', 'm', 'S')`,
    order: 'c.relname',
  },
  {
    name: 'columns',
    line: `'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
           || CASE a.attidentity WHEN 'a' THEN ' identity always' WHEN 'd' THEN ' identity by default' ELSE '' END
           || CASE WHEN a.attgenerated = 's' THEN ' generated ' || pg_get_expr(d.adbin, d.adrelid)
                   WHEN d.adbin IS NOT NULL THEN ' default ' || pg_get_expr(d.adbin, d.adrelid) ELSE '' END`,
    from: `pg_attribute a JOIN pg_class c ON c.oid = a.attrelid ${ON_CLASS}
           LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum`,
    where: `${SCHEMA} AND c.relkind IN ('r', 'p', 'v', 'm') AND a.attnum > 0 AND NOT a.attisdropped`,
    order: 'c.relname, a.attnum',
  },
  {
    name: 'constraints',
    line: `'constraint ' || c.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid)`,
    from: `pg_constraint k JOIN pg_class c ON c.oid = k.conrelid ${ON_CLASS}`,
    order: 'c.relname, k.conname',
  },
  {
    name: 'indexes',
    line: `'index ' || pg_get_indexdef(i.indexrelid)`,
    from: `pg_index i JOIN pg_class c ON c.oid = i.indrelid ${ON_CLASS} JOIN pg_class x ON x.oid = i.indexrelid`,
    order: 'c.relname, x.relname',
  },
  {
    name: 'triggers',
    line: `'trigger ' || pg_get_triggerdef(g.oid)`,
    from: `pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid ${ON_CLASS}`,
    where: `${SCHEMA} AND NOT g.tgisinternal`,
    order: 'c.relname, g.tgname',
  },
  {
    name: 'views',
    line: `'view ' || c.relname || E' AS\\n' || pg_get_viewdef(c.oid) || E'\\n'`,
    from: `pg_class c ${ON_CLASS}`,
    where: `${SCHEMA} AND c.relkind IN ('v', 'm')`,
    order: 'c.relname',
  },
  {
    // The extension's own functions (btree_gist's, in this schema) are the extension's, not the migrations'.
    name: 'functions',
    line: `rtrim(pg_get_functiondef(p.oid), E'\\n') || E'\\n'`,
    from: `pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
           LEFT JOIN pg_depend e ON e.classid = 'pg_proc'::regclass AND e.objid = p.oid AND e.deptype = 'e'`,
    where: `${SCHEMA} AND p.prokind IN ('f', 'p') AND e.objid IS NULL`,
    order: 'p.proname, pg_get_function_identity_arguments(p.oid)',
  },
];

async function lines(client: pg.ClientBase, s: Section): Promise<string[]> {
  const { rows } = await client.query<{ line: string }>(
    `SELECT ${s.line} AS line FROM ${s.from} WHERE ${s.where ?? SCHEMA} ORDER BY ${s.order}`,
  );
  return rows.map((r) => r.line);
}

/** The schema of the connection's current schema (and the extensions), one section per kind, each sorted by name. */
export async function dumpSchema(client: pg.ClientBase): Promise<string> {
  const out = ['-- The migrated schema, read from the catalog (src/db/schema-dump.ts). Written by `npm run db:dump`; do not edit.'];
  for (const s of SECTIONS) out.push('', `-- ${s.name}`, ...(await lines(client, s)));
  return `${out.join('\n').trimEnd()}\n`;
}
