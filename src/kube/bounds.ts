// What the informers' caches keep of an object whose size a user chooses: a Reservation's `devices[].selector` is
// free-form in the CRD (its values cannot be typed in a structural schema: a scalar or an operator object), so a
// selector far larger than any valid one (MAX_SELECTOR_LENGTH characters as text) is not kept: every replica caches
// every Reservation. The reconciler refuses the marker left in its place like any invalid selector (docs/adr/0042).
import { MAX_SELECTOR_LENGTH } from '../core/selector.ts';
import type { DeviceSpec, Reservation } from './types.ts';

/**
 * The most JSON characters a cached selector keeps. A valid selector is at most MAX_SELECTOR_LENGTH characters as
 * text, and its JSON adds at most a few characters per clause (quotes, braces, the operator's name): 4× that is
 * beyond any valid one.
 */
export const MAX_CACHED_SELECTOR_JSON = 4 * MAX_SELECTOR_LENGTH;

/** The selector kept instead of one over the bound: an attribute name no selector accepts, saying why. */
export function droppedSelector(jsonLength: number): Record<string, unknown> {
  return { [`(a selector of ${jsonLength} characters as JSON, not kept; at most ${MAX_SELECTOR_LENGTH} as text)`]: true };
}

function boundDevice(d: DeviceSpec): DeviceSpec {
  if (d.selector === undefined || d.selector === null || typeof d.selector !== 'object') return d;
  const n = JSON.stringify(d.selector).length;
  return n > MAX_CACHED_SELECTOR_JSON ? { ...d, selector: droppedSelector(n) } : d;
}

/** The Reservation as cached: the same object unless a selector is over the bound (then a copy with the marker). */
export function boundReservation(r: Reservation): Reservation {
  const devices = r.spec?.devices;
  if (!Array.isArray(devices)) return r;
  const bounded = devices.map(boundDevice);
  return bounded.every((d, i) => d === devices[i]) ? r : { ...r, spec: { ...r.spec, devices: bounded } };
}
