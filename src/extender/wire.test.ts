import { describe, expect, it } from 'vitest';
import { ExtenderArgsSchema, nodeNamesOf } from './wire.ts';

const pod = { metadata: { name: 'p', uid: 'u' }, spec: { containers: [] } };
const issues = (body: unknown) => {
  const r = ExtenderArgsSchema.safeParse(body);
  return r.success ? [] : r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
};

describe('the extender arguments: NodeNames', () => {
  it('a list of names passes as it came (not copied), and so does an absent or null one', () => {
    const names = ['node-a', 'node-b'];
    const r = ExtenderArgsSchema.parse({ Pod: pod, NodeNames: names });
    expect(r.NodeNames).toBe(names);
    expect(nodeNamesOf(ExtenderArgsSchema.parse({ Pod: pod, NodeNames: [] }))).toEqual([]);
    expect(ExtenderArgsSchema.parse({ Pod: pod, NodeNames: null }).NodeNames).toBeNull();
    expect(ExtenderArgsSchema.parse({ Pod: pod }).NodeNames).toBeUndefined();
  });

  it('anything else is refused, naming the first element that is not a string by its index', () => {
    expect(issues({ Pod: pod, NodeNames: [1] })).toEqual(['NodeNames: expected an array of node names; item 0 is number']);
    expect(issues({ Pod: pod, NodeNames: ['a', 'b', null, 4] })).toEqual(['NodeNames: expected an array of node names; item 2 is null']);
    expect(issues({ Pod: pod, NodeNames: ['a', { name: 'b' }] })).toEqual(['NodeNames: expected an array of node names; item 1 is object']);
    expect(issues({ Pod: pod, NodeNames: 'node-a' })).toEqual(['NodeNames: expected an array of node names, received string']);
    expect(issues({ Pod: pod, NodeNames: { 0: 'node-a' } })).toEqual(['NodeNames: expected an array of node names, received object']);
  });
});
