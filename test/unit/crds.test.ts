// crds/: structure the API server enforces for us and the controller relies on (a refused object never reaches the
// reconciler). The schemas are compiled by the API server in the cluster suite; here we read the YAML.
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { MAX_RECURRENCE_COUNT } from '../../src/controller/reservation/recurring.ts';
import { InventoryReportSchema } from '../../src/core/inventory.ts';
import { MAX_OCCURRENCE_SECONDS, parseClock, WEEKDAYS } from '../../src/core/recurrence.ts';
import { SelectorObject } from '../../src/core/schemas.ts';
import { MAX_SELECTOR_CLAUSES, MAX_SELECTOR_LENGTH } from '../../src/core/selector.ts';

const DIR = path.join(import.meta.dirname, '../../crds');
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Obj = Record<string, any>;
const crd = (file: string): Obj => YAML.parse(fs.readFileSync(path.join(DIR, file), 'utf8')) as Obj;
const schemaOf = (c: Obj): Obj => c.spec.versions.find((v: Obj) => v.storage).schema.openAPIV3Schema;

describe('crds/nodedevices.yaml', () => {
  const spec = schemaOf(crd('nodedevices.yaml')).properties.spec;
  const gpu = spec.properties.gpus;
  const mig = gpu.items.properties.mig;

  it('GPUs and their MIG instances are list maps: the API server refuses a GPU UUID or a MIG GI/CI listed twice', () => {
    expect(gpu['x-kubernetes-list-type']).toBe('map');
    expect(gpu['x-kubernetes-list-map-keys']).toEqual(['uuid']);
    expect(mig['x-kubernetes-list-type']).toBe('map');
    expect(mig['x-kubernetes-list-map-keys']).toEqual(['gi', 'ci']);
    // A list map's keys must be required (or defaulted) scalars.
    for (const [list, keys] of [
      [gpu, ['uuid']],
      [mig, ['gi', 'ci']],
    ] as const) {
      for (const k of keys) {
        expect(list.items.required).toContain(k);
        expect(['string', 'integer']).toContain(list.items.properties[k].type);
      }
    }
  });

  it('has every GPU and MIG field the controller reads (the API server prunes fields the schema lacks), migEnabled too', () => {
    const gpuShape = InventoryReportSchema.shape.gpus.element.shape;
    const migShape = gpuShape.mig.unwrap().element.shape;
    expect(Object.keys(gpu.items.properties).sort()).toEqual(Object.keys(gpuShape).sort());
    expect(Object.keys(mig.items.properties).sort()).toEqual(Object.keys(migShape).sort());
    expect(gpu.items.properties.migEnabled).toEqual({ type: 'boolean' });
  });

  it('scalars are whole numbers within the ledger integer counters', () => {
    for (const k of ['vcpu', 'memoryGiB', 'hugepages1Gi']) {
      const s = spec.properties.scalars.properties[k];
      expect(s.type, k).toBe('integer');
      expect(s.minimum, k).toBe(0);
      expect(s.maximum, k).toBeLessThanOrEqual(2 ** 31 - 1);
    }
  });
});

describe('crds/reservations.yaml: spec.devices[].selector', () => {
  const selector = schemaOf(crd('reservations.yaml')).properties.spec.properties.devices.items.properties.selector;
  const attrs = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`a${i}`, 'x']));

  it('is bounded as the zod schema bounds it: at most as many attributes as a selector has clauses', () => {
    expect(selector.type).toBe('object');
    expect(selector.maxProperties).toBe(MAX_SELECTOR_CLAUSES);
    // The same bound where the reconciler validates: each attribute is at least one clause.
    expect(SelectorObject.safeParse(attrs(MAX_SELECTOR_CLAUSES)).success).toBe(true);
    const over = SelectorObject.safeParse(attrs(MAX_SELECTOR_CLAUSES + 1));
    expect(over.success).toBe(false);
    expect(over.error?.issues[0]?.message).toContain(`at most ${MAX_SELECTOR_CLAUSES}`);
    expect(selector.description).toContain(`at most ${MAX_SELECTOR_CLAUSES} attributes`);
    expect(selector.description).toContain(`at most ${MAX_SELECTOR_LENGTH} characters as`);
  });
});

describe('crds/reservations.yaml: spec.recurrence', () => {
  const spec = schemaOf(crd('reservations.yaml')).properties.spec;
  const rec = spec.properties.recurrence;

  it('says what the reconciler’s zod schema says: weekday names, HH:MM, a window of at most a day, the largest count', () => {
    expect(rec.properties.days.items.enum).toEqual([...WEEKDAYS]);
    expect(rec.properties.days['x-kubernetes-list-type']).toBe('set');
    const pattern = new RegExp(rec.properties.startTime.pattern as string);
    expect(rec.properties.endTime.pattern).toBe(rec.properties.startTime.pattern);
    // Every string of the shape dd:dd: the CRD pattern and parseClock agree on all of them.
    for (let h = 0; h < 100; h++) {
      for (let m = 0; m < 100; m++) {
        const s = `${String(h).padStart(2, '0')}:${String(m).padStart(2, '0')}`;
        expect(pattern.test(s), s).toBe(parseClock(s) !== undefined);
      }
    }
    expect(rec.properties.duration['x-kubernetes-validations'][0].rule).toContain(`self <= ${MAX_OCCURRENCE_SECONDS}`);
    expect(rec.properties.count.maximum).toBe(MAX_RECURRENCE_COUNT);
    expect(spec.required).not.toContain('duration');
    expect(spec['x-kubernetes-validations'].map((v: Obj) => v.rule)).toContain('has(self.duration) != has(self.recurrence)');
  });
});

describe('crds/pools.yaml: the offering budget (ADR 0012)', () => {
  const schema = schemaOf(crd('pools.yaml'));
  const offering = schema.properties.spec.properties.offerings.items.properties;

  it('GPU-hours per resource are numbers >= 0, over a calendar period that defaults to a month', () => {
    for (const r of ['gpu', 'gpu.mig', 'gpu.slot']) expect(offering.gpuHours.properties[r], r).toEqual({ type: 'number', minimum: 0 });
    expect(offering.gpuHoursPeriod).toMatchObject({ type: 'string', enum: ['day', 'week', 'month'], default: 'month' });
  });

  it('an override names a resource and a window, with exactly one of add and set, ending after it starts (CEL)', () => {
    const o = offering.quotaOverrides;
    expect(o.maxItems).toBe(64);
    expect(o.items.required).toEqual(['resource', 'start', 'end']);
    expect(o.items.properties.resource.enum).toEqual(['gpu', 'gpu.mig', 'gpu.slot']);
    expect(o.items.properties.set).toEqual({ type: 'integer', minimum: 0 });
    expect(o.items['x-kubernetes-validations'].map((v: Obj) => v.rule)).toEqual([
      'has(self.add) != has(self.set)',
      'timestamp(self.end) > timestamp(self.start)',
    ]);
  });

  it('status.quota carries limit, used and reserved in GPUs and GPU-hours', () => {
    const q = schema.properties.status.properties.quota.items.properties;
    expect(Object.keys(q)).toEqual(['tenant', 'resource', 'limit', 'used', 'reserved', 'gpuHours']);
    expect(Object.keys(q.gpuHours.properties)).toEqual(['limit', 'period', 'periodStart', 'periodEnd', 'used', 'reserved']);
  });
});
