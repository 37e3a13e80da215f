// The CLI takes a selector as text (`--selector "vramGiB >= 80 && gpuModel == \"H100\""`); the API takes its object
// form (`{ vramGiB: { gte: 80 }, gpuModel: { eq: 'H100' } }`). This turns the parsed text into that object.
import { parseSelector, SelectorError, type Op, type Selector } from '../core/selector.ts';

const OP_KEYS: Record<Exclude<Op, 'exists' | '!exists'>, string> = {
  '==': 'eq',
  '!=': 'ne',
  '>': 'gt',
  '>=': 'gte',
  '<': 'lt',
  '<=': 'lte',
  in: 'in',
  notin: 'notIn',
};

/**
 * Clauses → `{ attr: { op: value } }`, clauses on one attribute merged into one operator object. Throws
 * SelectorError when two clauses on one attribute use the same operator (the object form has one key per operator;
 * write the tighter bound alone).
 */
export function selectorToObject(sel: Selector): Record<string, Record<string, unknown>> {
  const out: Record<string, Record<string, unknown>> = Object.create(null) as Record<string, Record<string, unknown>>;
  for (const c of sel) {
    const key = c.op === 'exists' || c.op === '!exists' ? 'exists' : OP_KEYS[c.op];
    const value = c.op === 'exists' ? true : c.op === '!exists' ? false : Array.isArray(c.value) ? [...c.value] : c.value;
    const ops = (out[c.attr] ??= {});
    if (Object.hasOwn(ops, key)) {
      throw new SelectorError(`attribute "${c.attr}" has two "${key}" clauses; the API's selector object takes one of each`);
    }
    ops[key] = value;
  }
  return { ...out };
}

/** Parses the text form and returns the object form. Throws SelectorError. */
export function selectorTextToObject(text: string): Record<string, Record<string, unknown>> {
  return selectorToObject(parseSelector(text));
}
