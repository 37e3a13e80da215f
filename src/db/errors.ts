// SQLSTATE → domain meaning, in one place.
export const SQLSTATE = {
  exclusionViolation: '23P01',
  checkViolation: '23514',
  uniqueViolation: '23505',
  deadlock: '40P01',
  serializationFailure: '40001',
} as const;

export function sqlState(e: unknown): string | undefined {
  return typeof e === 'object' && e !== null && 'code' in e && typeof e.code === 'string' ? e.code : undefined;
}

export function constraintName(e: unknown): string | undefined {
  return typeof e === 'object' && e !== null && 'constraint' in e && typeof e.constraint === 'string'
    ? e.constraint
    : undefined;
}

/** A transaction that lost a race in a way PostgreSQL resolves by aborting it: run it again. */
export function isRetryable(e: unknown): boolean {
  const s = sqlState(e);
  return s === SQLSTATE.deadlock || s === SQLSTATE.serializationFailure || s === SQLSTATE.exclusionViolation;
}
