// The CRDs checked by the API server's own validation code, offline (tools/crdcheck): each CRD is valid, and each sample
// in tools/crdcheck/testdata is accepted or refused as its name says (schema, list-map keys, CEL rules).
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { goToolVerdicts } from '../support/go-tool.ts';

const TOOL = path.join(import.meta.dirname, '../../tools/crdcheck');

const samples = fs.readdirSync(path.join(TOOL, 'testdata'));
const crds = [...new Set(samples.map((f) => f.split('.')[0]!))];
/** The CRD file of a sample's kind (`nodedevices` → nodedevices.yaml, `reservation` → reservations.yaml). */
const crdFile = (kind: string) => (kind.endsWith('s') ? `${kind}.yaml` : `${kind}s.yaml`);

describe('tools/crdcheck', () => {
  it('found samples for the CRDs that have CEL or list-map rules', () => {
    expect(crds.sort()).toEqual(['nodedevices', 'reservation']);
  });

  for (const kind of crds) {
    it(`crds/${crdFile(kind)}: valid, and every ${kind} sample accepted or refused as named`, async () => {
      const mine = samples.filter((f) => f.startsWith(`${kind}.`)).map((f) => `testdata/${f}`);
      const verdicts = await goToolVerdicts('crdcheck', [`../../crds/${crdFile(kind)}`, ...mine]);
      expect(verdicts.filter((l) => l.startsWith('FAIL'))).toEqual([]);
      // One verdict per sample at least (the CRD's own checks come on top).
      for (const f of mine) expect(verdicts.some((l) => l.includes(f))).toBe(true);
    }, 900_000);
  }
});
