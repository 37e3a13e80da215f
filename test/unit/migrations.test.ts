// The migration files' rules (ADR 0032), without a database: one file per SQL function, no function body in a
// numbered migration, and the numbered migrations applied before checksums were recorded never change.
import { describe, expect, it } from 'vitest';
import { UNRECORDED_CHECKSUMS } from '../../src/db/migration-checksums.ts';
import { checkFunctionFile, readFunctions, readMigrations } from '../../src/db/migrate.ts';

describe('numbered migrations', () => {
  it('applied before checksums were recorded are the text UNRECORDED_CHECKSUMS knows (an applied file never changes)', async () => {
    const migrations = await readMigrations();
    for (const [name, sum] of Object.entries(UNRECORDED_CHECKSUMS)) {
      const m = migrations.find((x) => x.name === name);
      expect(m?.checksum, `${name}.sql changed after it was applied: put the change in a new migration`).toBe(sum);
    }
  });

  it('define no function body: a function DDL needs early is a one-line placeholder, its body in functions/', async () => {
    const functions = new Set((await readFunctions()).map((f) => f.name));
    for (const m of await readMigrations()) {
      for (const line of m.sql.split('\n').filter((l) => /^\s*CREATE\s+(OR\s+REPLACE\s+)?FUNCTION/i.test(l))) {
        expect(line, `${m.name}.sql`).toMatch(/^CREATE FUNCTION (\w+)\(\) RETURNS \w+ LANGUAGE \w+( STABLE)? AS '[^']*';$/);
        expect(functions, `${m.name}.sql: ${line}`).toContain(/FUNCTION (\w+)/.exec(line)![1]);
        // A BEFORE trigger's placeholder must let the row through (NULL would skip it), should a write come first.
        if (line.includes('RETURNS trigger')) expect(line, `${m.name}.sql`).toMatch(/AS 'BEGIN RETURN NEW; END';$/);
      }
      expect(m.sql, `${m.name}.sql`).not.toMatch(/\$\$|ALTER FUNCTION/i);
    }
  });
});

describe('function files', () => {
  it('each define the one function their name says, with CREATE OR REPLACE', async () => {
    expect((await readFunctions()).length).toBeGreaterThan(30);
    const ok = 'CREATE OR REPLACE FUNCTION bc_x(p int) RETURNS int LANGUAGE sql AS $$ SELECT p $$;';
    expect(() => checkFunctionFile('bc_x.sql', `-- a comment\n${ok}\n`)).not.toThrow();
    expect(() => checkFunctionFile('bc_y.sql', ok)).toThrow(/defines bc_x, not bc_y/);
    expect(() => checkFunctionFile('bc_x.sql', ok.replace(' OR REPLACE', ''))).toThrow(/CREATE OR REPLACE/);
    expect(() => checkFunctionFile('bc_x.sql', `${ok}\n${ok.replace('bc_x', 'bc_z')}`)).toThrow(/one function, not 2/);
  });
});
