// The CRDs checked by the API server's own validation code, offline (tools/crdcheck): each CRD is valid, and each sample
// in tools/crdcheck/testdata is accepted or refused as its name says (schema, list-map keys, CEL rules).
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const TOOL = path.join(import.meta.dirname, '../../tools/crdcheck');
const GO = fs.existsSync('/usr/local/go/bin/go') ? '/usr/local/go/bin/go' : 'go';
// The same build cache as e2e/cluster/build.sh: apiextensions-apiserver is compiled once for both.
const GOCACHE = process.env.BC_GOCACHE ?? path.join(os.homedir(), '.cache/better-compute/go-build');

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
      const { stdout } = await promisify(execFile)(GO, ['run', '.', `../../crds/${crdFile(kind)}`, ...mine], {
        cwd: TOOL,
        env: { ...process.env, GOCACHE, GOFLAGS: '-buildvcs=false', CGO_ENABLED: '0' },
        maxBuffer: 16 * 1024 * 1024,
      }).catch((e: { stdout?: string; message: string }) => {
        throw new Error(`crdcheck failed:\n${e.stdout ?? ''}\n${e.message}`);
      });
      const verdicts = stdout.split('\n').filter((l) => /^(ok|FAIL):/.test(l));
      expect(verdicts.filter((l) => l.startsWith('FAIL'))).toEqual([]);
      // One verdict per sample at least (the CRD's own checks come on top).
      for (const f of mine) expect(verdicts.some((l) => l.includes(f))).toBe(true);
    }, 900_000);
  }
});
