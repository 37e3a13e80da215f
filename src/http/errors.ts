// Errors of the HTTP API and their one translation to a status and `{"error":{"code","message"}}`.
import { ValidationError } from '../core/schemas.ts';

export const ERROR_STATUS = {
  INVALID_INPUT: 400,
  UNAUTHENTICATED: 401,
  FORBIDDEN: 403,
  NOT_FOUND: 404,
  INTERNAL: 500,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

export interface ErrorBody {
  error: { code: ErrorCode; message: string };
}

/** An expected failure with a stable code; anything else that reaches the translator is INTERNAL. */
export class ApiError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
    this.name = 'ApiError';
  }

  get status(): number {
    return ERROR_STATUS[this.code];
  }
}

export const notFound = (message: string) => new ApiError('NOT_FOUND', message);
export const unauthenticated = (message: string) => new ApiError('UNAUTHENTICATED', message);
export const forbidden = (message: string) => new ApiError('FORBIDDEN', message);
export const invalidInput = (message: string) => new ApiError('INVALID_INPUT', message);

/** body-parser's error types for a body it could not read or parse: all of them are the caller's fault. */
const BODY_ERROR_TYPES = new Set([
  'entity.parse.failed',
  'entity.too.large',
  'entity.verify.failed',
  'encoding.unsupported',
  'charset.unsupported',
  'request.aborted',
  'request.size.invalid',
  'stream.encoding.set',
  'stream.not.readable',
  'parameters.too.many',
]);

function bodyErrorMessage(type: string, err: { message?: unknown; limit?: unknown }): string {
  switch (type) {
    case 'entity.parse.failed':
      return 'the body is not valid JSON';
    case 'entity.too.large':
      return `the body is too large (at most ${String(err.limit)} bytes)`;
    case 'encoding.unsupported':
      return 'unsupported content encoding';
    case 'charset.unsupported':
      return 'unsupported charset: send UTF-8';
    case 'request.aborted':
      return 'the request was aborted';
    default:
      return 'the body could not be read';
  }
}

/**
 * The one translation of an error to HTTP. Validation errors and body-parser errors are INVALID_INPUT; an ApiError
 * keeps its code; everything else is INTERNAL with a generic message (its details go to the log, not the caller).
 */
export function toErrorResponse(err: unknown): { status: number; body: ErrorBody; internal: boolean } {
  if (err instanceof ApiError) {
    return { status: err.status, body: { error: { code: err.code, message: err.message } }, internal: false };
  }
  if (err instanceof ValidationError) {
    return { status: 400, body: { error: { code: 'INVALID_INPUT', message: err.message } }, internal: false };
  }
  if (typeof err === 'object' && err !== null && 'type' in err && typeof err.type === 'string' && BODY_ERROR_TYPES.has(err.type)) {
    const message = bodyErrorMessage(err.type, err as { message?: unknown; limit?: unknown });
    return { status: 400, body: { error: { code: 'INVALID_INPUT', message } }, internal: false };
  }
  // Other client errors raised by express or its parsers (http-errors with a 4xx status) are the caller's fault too.
  const status = typeof err === 'object' && err !== null && 'status' in err ? err.status : undefined;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    return { status: 400, body: { error: { code: 'INVALID_INPUT', message: 'the request could not be read' } }, internal: false };
  }
  return { status: 500, body: { error: { code: 'INTERNAL', message: 'internal error' } }, internal: true };
}
