// The capacity API's OpenAPI 3.1 document, built from the zod schemas the routes validate with (src/core/schemas.ts)
// and the answers' schemas (answer-schemas.ts) by zod's own z.toJSONSchema: no constraint is copied by hand. Served at
// GET /api/compute/openapi.json without a token (ADR 0038) and checked in as docs/openapi.json (`npm run openapi`).
// Pure: the same paths give the same document, byte for byte.
import { z } from 'zod';
import { ByDomainInput, ByPoolInput, PreviewInput, QuotaInput, SummaryInput, TimelineInput, UsageInput } from '../core/schemas.ts';
import {
  ByDomainAnswer,
  ByPoolAnswer,
  CapacityRow,
  errorAnswer,
  PreviewAnswer,
  QuotaAnswer,
  SummaryAnswer,
  TimelineAnswer,
  UsageAnswer,
} from './answer-schemas.ts';
import { ERROR_STATUS, type ErrorCode } from '../http/errors.ts';
import { OPENAPI_EXAMPLES, type CapacityMethodName } from './openapi-examples.ts';

export type { CapacityMethodName };

export const OPENAPI_PATH = '/api/compute/openapi.json';
/** The document's `info.version`: the package's version (a unit test holds them equal). */
export const API_VERSION = '0.1.0';

export interface MethodSpec {
  input: z.ZodType;
  answer: z.ZodType;
  /** What `compute:capacity:read` is decided on. */
  on: 'tenant' | 'pool' | 'tenant, or pool when poolId is given';
  summary: string;
  description: string;
}

/** The capacity methods: what each takes and answers. Keys name the operations (`capacity_<key>`). */
export const METHODS: Record<CapacityMethodName, MethodSpec> = {
  summary: {
    input: SummaryInput,
    answer: SummaryAnswer,
    on: 'tenant',
    summary: 'Every pool the tenant owns or is offered, with its rollup rows and whole-GPU totals per GPU model',
    description: 'Archived pools appear only for their owner. `byGpuModel` sums each pool\'s `gpu` row; a pool without a model counts under `other`.',
  },
  byPool: {
    input: ByPoolInput,
    answer: ByPoolAnswer,
    on: 'pool',
    summary: "One pool's rollup rows, one per resource, ordered by resource",
    description: 'NOT_FOUND when the pool is not owned by or offered to the tenant, or is archived and the tenant is not its owner.',
  },
  preview: {
    input: PreviewInput,
    answer: PreviewAnswer,
    on: 'pool',
    summary: 'Whether a reservation request fits now, and where: the placer, without booking anything',
    description:
      'The input is `reservations.create`\'s, validated the same way. At most 10 candidates, best first; with `gang`, every member of the best gang. ' +
      'When a regular request does not fit, `preemptible` gives how many spot reservations it would displace and when it would start.',
  },
  timeline: {
    input: TimelineInput,
    answer: TimelineAnswer,
    on: 'pool',
    summary: 'Whole GPUs booked and free per time bucket of one pool',
    description:
      '`from` defaults to the start of the current UTC hour (database clock), `to` to `from` + 24 h, `stepMinutes` to 60. ' +
      'At most 7 days and 336 buckets, and `to` after `from`; otherwise INVALID_INPUT.',
  },
  byDomain: {
    input: ByDomainInput,
    answer: ByDomainAnswer,
    on: 'pool',
    summary: "One pool's capacity per placement domain (ADR 0014)",
    description: '`topologyKey` is the node label to group by; default: the pool\'s own. Nodes without the label come last, as `domain: null`.',
  },
  usage: {
    input: UsageInput,
    answer: UsageAnswer,
    on: 'tenant, or pool when poolId is given',
    summary: 'Usage per pool and resource over a window of whole UTC hours (ADR 0011)',
    description: 'Either `period` or `from`/`to`; neither: the current UTC month. At most 366 days, and 31 with `hourly`.',
  },
  quota: {
    input: QuotaInput,
    answer: QuotaAnswer,
    on: 'tenant, or pool when poolId is given',
    summary: "The tenant's quota keys: limit, used and reserved, in GPUs and GPU-hours (ADR 0012)",
    description: 'In one pool (NOT_FOUND for a pool the tenant cannot see), or in every pool it sees.',
  },
};

const ERROR_NAMES: Record<ErrorCode, string> = {
  INVALID_INPUT: 'InvalidInput',
  UNAUTHENTICATED: 'Unauthenticated',
  FORBIDDEN: 'Forbidden',
  NOT_FOUND: 'NotFound',
  INTERNAL: 'Internal',
};

const ERROR_WHEN: Record<ErrorCode, string> = {
  INVALID_INPUT: 'A schema or window rule, malformed JSON, a content type other than application/json, or a body over 64 KiB',
  UNAUTHENTICATED: 'No bearer token, or one that is not accepted',
  FORBIDDEN: "The caller may not read that tenant's (or pool's) capacity",
  NOT_FOUND: 'No such pool visible to the tenant (`pool <id> not found`), or no such route',
  INTERNAL: 'Anything else (the caller sees `internal error`)',
};

const Health = z.strictObject({ status: z.enum(['ok', 'ready']) });
const Unavailable = z.strictObject({ error: z.strictObject({ code: z.literal('UNAVAILABLE'), message: z.string() }) });

const ref = (id: string) => ({ $ref: `#/components/schemas/${id}` });
const inputId = (m: string) => `${m[0]!.toUpperCase()}${m.slice(1)}Input`;
const answerId = (m: string) => `${m[0]!.toUpperCase()}${m.slice(1)}Answer`;

/** Every schema of the document, by its components id, as JSON Schema 2020-12 (OpenAPI 3.1's dialect). */
export function componentSchemas(): Record<string, unknown> {
  const registry = z.registry<{ id: string }>();
  registry.add(CapacityRow, { id: 'CapacityRow' });
  for (const [name, m] of Object.entries(METHODS)) {
    if (!registry.has(m.input)) registry.add(m.input, { id: inputId(name) });
    registry.add(m.answer, { id: answerId(name) });
  }
  registry.add(errorAnswer(), { id: 'ErrorBody' });
  for (const code of Object.keys(ERROR_STATUS) as ErrorCode[]) registry.add(errorAnswer(code), { id: `${ERROR_NAMES[code]}Error` });
  registry.add(Health, { id: 'Health' });
  registry.add(Unavailable, { id: 'UnavailableError' });
  // io 'input': what a caller sends (defaults make a field optional; transforms are described by their input).
  const { schemas } = z.toJSONSchema(registry, {
    target: 'draft-2020-12',
    io: 'input',
    // A custom check (the selector, the duration) is described by its .meta() in schemas.ts; a test finds no schema left empty.
    unrepresentable: 'any',
    uri: (id) => `#/components/schemas/${id}`,
  });
  const out: Record<string, unknown> = {};
  for (const [id, schema] of Object.entries(schemas)) {
    const { $schema: _dialect, $id: _id, ...rest } = schema as Record<string, unknown>;
    out[id] = rest;
  }
  return out;
}

function errorResponses(codes: readonly ErrorCode[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const code of codes) out[String(ERROR_STATUS[code])] = { $ref: `#/components/responses/${ERROR_NAMES[code]}` };
  return out;
}

function operation(name: CapacityMethodName, m: MethodSpec): Record<string, unknown> {
  const errors: ErrorCode[] = ['INVALID_INPUT', 'UNAUTHENTICATED', 'FORBIDDEN', ...(m.on === 'tenant' ? [] : ['NOT_FOUND' as const]), 'INTERNAL'];
  return {
    post: {
      operationId: `capacity_${name}`,
      tags: ['capacity'],
      summary: m.summary,
      description: `${m.description}\n\nAuthorized as \`compute:capacity:read\` on the ${m.on}. Unknown keys are INVALID_INPUT.`,
      requestBody: {
        required: true,
        content: { 'application/json': { schema: ref(inputId(name)), examples: OPENAPI_EXAMPLES[name] } },
      },
      responses: {
        '200': { description: 'The answer', content: { 'application/json': { schema: ref(answerId(name)) } } },
        ...errorResponses(errors),
      },
    },
  };
}

function plainGet(operationId: string, summary: string, ok: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  return { get: { operationId, summary, security: [], responses: { '200': ok, ...extra } } };
}

function fixedPaths(): Record<string, unknown> {
  const health = { description: 'Up', content: { 'application/json': { schema: ref('Health') } } };
  const unavailable = { '503': { description: 'Not live / not ready', content: { 'application/json': { schema: ref('UnavailableError') } } } };
  return {
    [OPENAPI_PATH]: plainGet('openapi', 'This document (no token needed)', {
      description: 'The OpenAPI 3.1 document',
      content: { 'application/json': { schema: { type: 'object' } } },
    }),
    '/healthz': plainGet('healthz', 'Liveness (no token needed)', health, unavailable),
    '/readyz': plainGet('readyz', 'Readiness: the database answers (no token needed)', health, unavailable),
  };
}

/** The OpenAPI 3.1 document for the capacity methods served at `paths` (app.ts's CAPACITY_PATHS). */
export function buildOpenApiDocument(paths: Readonly<Record<CapacityMethodName, string>>): Record<string, unknown> {
  const methodPaths: Record<string, unknown> = {};
  for (const name of Object.keys(METHODS) as CapacityMethodName[]) methodPaths[paths[name]] = operation(name, METHODS[name]);
  const responses: Record<string, unknown> = {};
  for (const code of Object.keys(ERROR_STATUS) as ErrorCode[]) {
    responses[ERROR_NAMES[code]] = {
      description: `${code}: ${ERROR_WHEN[code]}`,
      content: { 'application/json': { schema: ref(`${ERROR_NAMES[code]}Error`) } },
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Better Compute capacity API',
      version: API_VERSION,
      description:
        'What the GPU pools a tenant can see hold, book and have free, without booking anything. Times are epoch milliseconds ' +
        '(ISO 8601 for usage). Every failure is `{"error": {"code", "message"}}`. Described in docs/capacity-api.md.',
    },
    tags: [{ name: 'capacity', description: 'The capacity methods (POST, JSON in and out)' }],
    security: [{ bearer: [] }],
    paths: { ...methodPaths, ...fixedPaths() },
    components: {
      securitySchemes: {
        bearer: {
          type: 'http',
          scheme: 'bearer',
          description: 'A static token (`BETTER_COMPUTE_TOKEN_FILE`) or a Kubernetes bearer token (TokenReview), as configured',
        },
      },
      schemas: componentSchemas(),
      responses,
    },
  };
}

/** The document as docs/openapi.json holds it and GET /api/compute/openapi.json sends it: 2-space JSON and a newline. */
export function openApiJson(paths: Readonly<Record<CapacityMethodName, string>>): string {
  return `${JSON.stringify(buildOpenApiDocument(paths), null, 2)}\n`;
}
