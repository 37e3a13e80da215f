// Writes the capacity API's OpenAPI 3.1 document (src/api/openapi.ts) to docs/openapi.json, where it is checked in;
// src/api/openapi.test.ts fails when the checked-in file is not what this writes.
//
//   npm run openapi              writes docs/openapi.json
//   npm run openapi -- --check   exits 1 when docs/openapi.json differs (nothing written)
import fs from 'node:fs';
import path from 'node:path';
import { CAPACITY_PATHS } from '../../src/api/app.ts';
import { openApiJson } from '../../src/api/openapi.ts';

export const OPENAPI_FILE = path.resolve(import.meta.dirname, '../../docs/openapi.json');

function main(args: string[]): number {
  const text = openApiJson(CAPACITY_PATHS);
  if (args.includes('--check')) {
    const current = fs.existsSync(OPENAPI_FILE) ? fs.readFileSync(OPENAPI_FILE, 'utf8') : '';
    if (current === text) return 0;
    process.stderr.write(`${path.relative(process.cwd(), OPENAPI_FILE)} is out of date: run npm run openapi\n`);
    return 1;
  }
  fs.writeFileSync(OPENAPI_FILE, text);
  process.stdout.write(`wrote ${path.relative(process.cwd(), OPENAPI_FILE)}\n`);
  return 0;
}

process.exitCode = main(process.argv.slice(2));
