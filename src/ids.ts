import { ulid } from 'ulid';

// Resource ids as the spec writes them: a prefix and a lowercase ULID (Crockford base32, no i, l, o, u).
export const newPoolId = (): string => `pool_${ulid().toLowerCase()}`;
export const newReservationId = (): string => `rsv_${ulid().toLowerCase()}`;
export const newAllocationId = (): string => `alloc_${ulid().toLowerCase()}`;
