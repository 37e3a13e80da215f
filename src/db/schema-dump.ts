// A deterministic text listing of the migrated schema, read from the catalog (no pg_dump): extensions, tables and
// views with their columns, constraints, indexes and triggers, sequences, and every function with its definition.
// `npm run db:dump` writes it to migrations/schema.dump; test/db/schema.test.ts compares a fresh database with it.
import type pg from 'pg';

/** Where the checked-in dump lives, next to the migrations (not ending in .sql: the function bodies stand once). */
export const SCHEMA_DUMP_FILE = 'schema.dump';

const SCHEMA = `n.nspname = current_schema()`;

async function lines(client: pg.ClientBase, sql: string): Promise<string[]> {
  const { rows } = await client.query<{ line: string }>(sql);
  return rows.map((r) => r.line);
}

function extensions(client: pg.ClientBase): Promise<string[]> {
  return lines(client, `SELECT 'extension ' || extname AS line FROM pg_extension WHERE extname <> 'plpgsql' ORDER BY extname`);
}

function relations(client: pg.ClientBase): Promise<string[]> {
  return lines(
    client,
    `SELECT CASE c.relkind WHEN 'r' THEN 'table ' WHEN 'p' THEN 'table ' WHEN 'v' THEN 'view ' WHEN 'm' THEN 'materialized view '
              WHEN 'S' THEN 'sequence ' END || c.relname AS line
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE ${SCHEMA} AND c.relkind IN ('r', 'p', 'v', 'm', 'S') ORDER BY c.relname`,
  );
}

function columns(client: pg.ClientBase): Promise<string[]> {
  return lines(
    client,
    `SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
            || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
            || CASE a.attidentity WHEN 'a' THEN ' identity always' WHEN 'd' THEN ' identity by default' ELSE '' END
            || CASE WHEN a.attgenerated = 's' THEN ' generated ' || pg_get_expr(d.adbin, d.adrelid)
                    WHEN d.adbin IS NOT NULL THEN ' default ' || pg_get_expr(d.adbin, d.adrelid) ELSE '' END AS line
     FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
     LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE ${SCHEMA} AND c.relkind IN ('r', 'p', 'v', 'm') AND a.attnum > 0 AND NOT a.attisdropped
     ORDER BY c.relname, a.attnum`,
  );
}

function constraints(client: pg.ClientBase): Promise<string[]> {
  return lines(
    client,
    `SELECT 'constraint ' || c.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid) AS line
     FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE ${SCHEMA} ORDER BY c.relname, k.conname`,
  );
}

function indexes(client: pg.ClientBase): Promise<string[]> {
  return lines(
    client,
    `SELECT 'index ' || pg_get_indexdef(i.indexrelid) AS line
     FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid
     JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE ${SCHEMA} ORDER BY t.relname, c.relname`,
  );
}

function triggers(client: pg.ClientBase): Promise<string[]> {
  return lines(
    client,
    `SELECT 'trigger ' || pg_get_triggerdef(g.oid) AS line
     FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE ${SCHEMA} AND NOT g.tgisinternal ORDER BY c.relname, g.tgname`,
  );
}

function views(client: pg.ClientBase): Promise<string[]> {
  return lines(
    client,
    `SELECT 'view ' || c.relname || E' AS\n' || pg_get_viewdef(c.oid) AS line
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE ${SCHEMA} AND c.relkind IN ('v', 'm') ORDER BY c.relname`,
  );
}

function functions(client: pg.ClientBase): Promise<string[]> {
  return lines(
    client,
    `SELECT rtrim(pg_get_functiondef(p.oid), E'\n') AS line
     FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
     LEFT JOIN pg_depend e ON e.classid = 'pg_proc'::regclass AND e.objid = p.oid AND e.deptype = 'e'
     WHERE ${SCHEMA} AND p.prokind IN ('f', 'p') AND e.objid IS NULL
     ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)`,
  );
}

/** The schema of the connection's current schema (and the extensions), one section per kind, each sorted by name. */
export async function dumpSchema(client: pg.ClientBase): Promise<string> {
  const sections: [string, (c: pg.ClientBase) => Promise<string[]>][] = [
    ['extensions', extensions],
    ['relations', relations],
    ['columns', columns],
    ['constraints', constraints],
    ['indexes', indexes],
    ['triggers', triggers],
    ['views', views],
    ['functions', functions],
  ];
  const out = ['-- The migrated schema, read from the catalog (src/db/schema-dump.ts). Written by `npm run db:dump`; do not edit.'];
  for (const [name, read] of sections) {
    out.push('', `-- ${name}`);
    for (const line of await read(client)) out.push(...(name === 'functions' || name === 'views' ? [line, ''] : [line]));
  }
  return `${out.join('\n').trimEnd()}\n`;
}
