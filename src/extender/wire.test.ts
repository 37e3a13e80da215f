import { describe, expect, it } from 'vitest';
import { ExtenderArgsSchema, nodeNamesOf, parseExtenderBody } from './wire.ts';

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

/** What JSON.parse makes of the text, or the error it throws (its message: the same words reach the caller). */
function jsonParse(text: string): { value: unknown } | { error: string } {
  try {
    return { value: JSON.parse(text) as unknown };
  } catch (e) {
    return { error: (e as Error).message };
  }
}
function fastParse(text: string): { value: unknown } | { error: string } {
  try {
    return { value: parseExtenderBody(Buffer.from(text, 'utf8')) };
  } catch (e) {
    return { error: (e as Error).message };
  }
}

describe('the extender request body', () => {
  const goBody = (names: string[]) => JSON.stringify({ Pod: pod, Nodes: null, NodeNames: names });

  it('gives what JSON.parse gives, for the bodies kube-scheduler sends and for odd and broken ones', () => {
    const bodies = [
      goBody(['node-a', 'node-b.example.com', 'n']),
      goBody([]),
      goBody(['']),
      goBody(['', '']),
      goBody(['a","b']), // an escaped quote: JSON.parse reads it
      goBody(['a\\b', 'tab\there']),
      goBody(['nœud-ü', '節点']), // beyond ASCII in the names
      JSON.stringify({ Pod: { ...pod, metadata: { ...pod.metadata, annotations: { note: 'ü ,"NodeNames":["x"] \u2028' } } }, NodeNames: ['a'] }),
      JSON.stringify({ Pod: pod, NodeNames: ['a', 'b'] }, null, 2), // spaces between the names
      '{"Pod":{},"NodeNames":[ "a"]}',
      '{"Pod":{},"NodeNames":["a" ,"b"]}',
      '{"Pod":{},"NodeNames":["a",1]}',
      '{"Pod":{},"NodeNames":["a",null,"b"]}',
      '{"Pod":{},"NodeNames":[["a"]]}',
      '{"NodeNames":["first"],"Pod":{},"NodeNames":["last"]}', // the last key wins
      '{"NodeNames":["a"],"Pod":{}}', // the names not last
      '{"Pod":{},"NodeNames":["a"],"Nodes":null}',
      '{"Pod":{"x":1,"NodeNames":["inner"]},"NodeNames":["outer"]}',
      '{"Pod":{"x":1,"NodeNames":["inner"]}}',
      '{"Pod":{"x":{"y":1,"NodeNames":["a"]}',
      '{"__proto__":{"polluted":1},"NodeNames":["a"]}',
      // broken: each must be refused as JSON.parse refuses it
      '{,"NodeNames":["a"]}',
      '{"Pod":{},,"NodeNames":["a"]}',
      '{"Pod":"open,"NodeNames":["a"]}',
      '{"Pod":{}"x","NodeNames":["a"]}',
      '{"Pod":{},"NodeNames":["a]}',
      '{"Pod":{},"NodeNames":["a"]]',
      '{"Pod":{},"NodeNames":["a" }',
      '{"Pod":{},"NodeNames":["a"]} ',
      '{"Pod":{},"NodeNames":["a""b"]}',
      '{"Pod":{},"NodeNames":["a","]}',
      '{"Pod":{},"NodeNames":["a\u0001"]}',
      '{"Pod":{},"NodeNames":["a"]}', // a raw control character
      '[1,"NodeNames":["a"]}',
      '1,"NodeNames":["a"]}',
      '{"Pod":{}},"NodeNames":["a"]}',
      '\ufeff{"Pod":{},"NodeNames":["a"]}',
      '',
      '{}',
      'null',
    ];
    for (const body of bodies) expect(fastParse(body), body).toEqual(jsonParse(body));
  });

  it('gives what JSON.parse gives for random bodies built from JSON’s pieces (seeded)', () => {
    let seed = 20261202;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const pieces = ['{', '}', '[', ']', ',', ':', '"', '\\', ' ', 'a', 'ü', '"NodeNames"', ',"NodeNames":[', '"Pod":{}', '1', 'null', '\u0000'];
    let compared = 0;
    for (let i = 0; i < 20_000; i++) {
      // A body that ends in a list of names, with a few random pieces put in somewhere, or characters replaced.
      let body = `{"Pod":{"a":1},"NodeNames":[${Array.from({ length: rand(4) }, () => `"n${rand(100)}"`).join(',')}]}`;
      for (let k = rand(3); k > 0; k--) {
        const at = rand(body.length + 1);
        const piece = pieces[rand(pieces.length)]!;
        body = body.slice(0, at) + piece + body.slice(rand(2) ? at : at + 1);
      }
      expect(fastParse(body), body).toEqual(jsonParse(body));
      compared++;
    }
    expect(compared).toBe(20_000);
  });
});
