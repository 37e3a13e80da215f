import { getRandomValues } from 'node:crypto';
import { ulid } from 'ulid';

// ulid()'s own source draws one byte from the system per character (16 per id, two ids per placement); this one hands
// out the bytes of a buffer refilled 4 KiB at a time, the same uniform byte / 256.
const random = new Uint8Array(4096);
let next = random.length;
function prng(): number {
  if (next === random.length) {
    getRandomValues(random);
    next = 0;
  }
  return random[next++]! / 256;
}

// Resource ids as the spec writes them: a prefix and a lowercase ULID (Crockford base32, no i, l, o, u).
export const newPoolId = (): string => `pool_${ulid(undefined, prng).toLowerCase()}`;
export const newReservationId = (): string => `rsv_${ulid(undefined, prng).toLowerCase()}`;
export const newAllocationId = (): string => `alloc_${ulid(undefined, prng).toLowerCase()}`;
