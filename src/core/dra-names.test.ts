import { describe, expect, it } from 'vitest';
import { draDeviceName } from './dra-names.ts';

const dnsLabel = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

describe('draDeviceName', () => {
  it('keeps an id that is already a DNS label', () => {
    expect(draDeviceName('gpu-0')).toBe('gpu-0');
  });
  it('makes any id a DNS label, and distinct ids distinct names', () => {
    const ids = ['GPU-1b2c/MIG-3g.40gb/0', 'gpu-1b2c/mig-3g.40gb/0', 'GPU-1B2C:slot:3', 'x'.repeat(200), 'y'.repeat(200), '///', 'GPU-a_b'];
    const names = ids.map(draDeviceName);
    for (const n of names) expect(n).toMatch(dnsLabel);
    expect(new Set(names).size).toBe(ids.length);
    expect(draDeviceName(ids[0]!)).toBe(draDeviceName(ids[0]!));
  });
});
