// Assertions on API answers.
import { expect } from 'vitest';
import { ERROR_STATUS, type ErrorCode } from '../../src/http/errors.ts';
import type { HttpResponse } from './http.ts';

/** Whether a body is exactly `{"error":{"code","message"}}` with a known code and a non-empty message. */
export function isErrorBody(json: unknown): json is { error: { code: ErrorCode; message: string } } {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return false;
  if (Object.keys(json).join() !== 'error') return false;
  const e = (json as { error: unknown }).error;
  if (typeof e !== 'object' || e === null || Array.isArray(e)) return false;
  if (Object.keys(e).sort().join() !== 'code,message') return false;
  const { code, message } = e as { code: unknown; message: unknown };
  return typeof code === 'string' && Object.hasOwn(ERROR_STATUS, code) && typeof message === 'string' && message.length > 0;
}

/** Asserts an error answer with this code (status, content type, exact body shape); returns its message. */
export function expectError(res: HttpResponse, code: ErrorCode): string {
  expect(res.status, res.text).toBe(ERROR_STATUS[code]);
  expect(res.headers['content-type']).toMatch(/^application\/json/);
  expect(isErrorBody(res.json), res.text).toBe(true);
  const body = res.json as { error: { code: string; message: string } };
  expect(body.error.code).toBe(code);
  return body.error.message;
}
