// The OpenAPI document: checked in as generated, valid OpenAPI 3.1, every route and example real, nothing left
// undescribed, and served without a token. Its agreement with docs/capacity-api.md: test/unit/openapi-doc.test.ts.
import fs from 'node:fs';
import path from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { describe, expect, it } from 'vitest';
import { parseInput } from '../core/schemas.ts';
import { silentLogger } from '../log.ts';
import { CAPACITY_PATHS, createApp } from './app.ts';
import type { Authorizer } from './authz.ts';
import type { CapacityService } from './capacity-service.ts';
import { API_VERSION, buildOpenApiDocument, METHODS, OPENAPI_PATH, openApiJson, type CapacityMethodName } from './openapi.ts';
import { OPENAPI_EXAMPLES } from './openapi-examples.ts';
import { listen } from '../http/server.ts';

const ROOT = path.join(import.meta.dirname, '..', '..');
type Doc = { paths: Record<string, Record<string, { operationId: string; security?: unknown[] }>>; components: { schemas: Record<string, unknown> } };
const doc = buildOpenApiDocument(CAPACITY_PATHS) as unknown as Doc;

describe('docs/openapi.json', () => {
  it('is what `npm run openapi` writes (run it after changing a schema)', () => {
    const checkedIn = fs.readFileSync(path.join(ROOT, 'docs/openapi.json'), 'utf8');
    expect(checkedIn, 'docs/openapi.json is out of date: npm run openapi').toBe(openApiJson(CAPACITY_PATHS));
  });

  it('is a valid OpenAPI 3.1 document', async () => {
    const validator = new Validator();
    const res = await validator.validate(structuredClone(doc) as unknown as Record<string, unknown>);
    expect(res.errors ?? []).toEqual([]);
    expect(res.valid).toBe(true);
    expect(validator.version).toBe('3.1');
    // And the validator does refuse: a response without its required description.
    const broken = structuredClone(doc);
    delete (broken.paths[CAPACITY_PATHS.summary]!.post as unknown as { responses: Record<string, { description?: string }> }).responses['200']!.description;
    expect((await new Validator().validate(broken as unknown as Record<string, unknown>)).valid).toBe(false);
  });

  it('resolves every $ref', async () => {
    const validator = new Validator();
    await validator.validate(structuredClone(doc) as unknown as Record<string, unknown>);
    expect(JSON.stringify(validator.resolveRefs())).not.toContain('"$ref"');
  });

  it("has the package's version", () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
    expect(API_VERSION).toBe(pkg.version);
  });
});

describe('what the document covers', () => {
  it('documents every capacity route as a POST, and only those besides health, readiness and itself', () => {
    const documented = Object.keys(doc.paths).sort();
    expect(documented).toEqual([...Object.values(CAPACITY_PATHS), OPENAPI_PATH, '/healthz', '/readyz'].sort());
    for (const [name, p] of Object.entries(CAPACITY_PATHS)) expect(doc.paths[p]?.post?.operationId).toBe(`capacity_${name}`);
  });

  it('asks a bearer token for the capacity methods and none for health, readiness and the document', () => {
    const d = doc as unknown as { security: unknown; components: { securitySchemes: unknown } };
    expect(d.security).toEqual([{ bearer: [] }]);
    expect(d.components.securitySchemes).toEqual({ bearer: expect.objectContaining({ type: 'http', scheme: 'bearer' }) });
    for (const p of Object.values(CAPACITY_PATHS)) expect(doc.paths[p]?.post?.security).toBeUndefined();
    for (const p of [OPENAPI_PATH, '/healthz', '/readyz']) expect(doc.paths[p]?.get?.security).toEqual([]);
  });

  it('leaves no schema empty (a zod check without a JSON Schema would come out as {})', () => {
    const empty: string[] = [];
    const walk = (v: unknown, at: string): void => {
      if (Array.isArray(v)) return v.forEach((x, i) => walk(x, `${at}[${i}]`));
      if (typeof v !== 'object' || v === null) return;
      const o = v as Record<string, unknown>;
      if (Object.keys(o).length === 0) empty.push(at);
      for (const [k, x] of Object.entries(o)) if (k !== 'examples' && k !== 'default') walk(x, `${at}.${k}`);
    };
    walk(doc.components.schemas, 'schemas');
    expect(empty).toEqual([]);
  });

  it.each(Object.keys(METHODS) as CapacityMethodName[])('every example of %s is a valid request', (name) => {
    const examples = Object.values(OPENAPI_EXAMPLES[name]);
    expect(examples.length).toBeGreaterThan(0);
    for (const ex of examples) expect(() => parseInput(METHODS[name].input, ex.value), ex.summary).not.toThrow();
  });
});

describe(`GET ${OPENAPI_PATH}`, () => {
  it('serves the checked-in document without a token (the authorizer refuses everything and is never asked)', async () => {
    let asked = 0;
    const refuseAll: Authorizer = {
      authenticate: () => {
        asked++;
        throw new Error('no caller is authenticated in this test');
      },
      authorizeCapacityRead: () => {
        asked++;
        throw new Error('no caller is authorized in this test');
      },
    } as unknown as Authorizer;
    const app = createApp({ service: {} as CapacityService, authorizer: refuseAll, log: silentLogger, ready: async () => {} });
    const server = await listen(app, { host: '127.0.0.1', port: 0 });
    try {
      const res = await fetch(`${server.url}${OPENAPI_PATH}`);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toMatch(/^application\/json/);
      expect(await res.text()).toBe(fs.readFileSync(path.join(ROOT, 'docs/openapi.json'), 'utf8'));
      const other = await fetch(`${server.url}${CAPACITY_PATHS.summary}`, { method: 'POST', body: '{}' });
      expect(other.status).toBe(500); // the refusing authorizer was asked here (a thrown Error is INTERNAL)
      expect(asked).toBe(1);
    } finally {
      await server.close(100);
    }
  });
});
