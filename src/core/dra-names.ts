// Names of the DRA side (ADR 0043): an atom of the ledger is one device of its node's ResourceSlice, named by a DNS
// label derived from its atom id. Pure: the agent (publishing) and the controller (allocating, checking) derive the same
// name from the same id.

const MAX = 63;

/** FNV-1a, 32 bits, as 8 hex digits: a short, stable suffix that keeps two ids that clean up alike apart. */
function fnv1a(s: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, '0');
}

/**
 * The ResourceSlice device name of an atom: the id itself when it is already a DNS label (lower case alphanumerics and
 * '-', at most 63, starting and ending alphanumeric); otherwise the id lower-cased with every other character made '-',
 * cut to fit, and '-' plus a hash of the original id appended, so distinct ids give distinct names.
 */
export function draDeviceName(atomId: string): string {
  if (/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(atomId)) return atomId;
  const suffix = `-${fnv1a(atomId)}`;
  const cleaned = atomId
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, '-')
    .replace(/-+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, MAX - suffix.length)
    .replace(/-+$/, '');
  return `${cleaned || 'atom'}${suffix}`;
}
