// The CDI device names the node's CDI specs define (`<kind>=<name>`), for the `auto` device-list strategy
// (src/core/device-list.ts resolveDeviceList). The specs are another party's files (nvidia-ctk's, the toolkit's refresh
// units', an operator's): each is size-capped and checked with zod, and one that cannot be read or does not parse is
// left out with a warning, so it only ever makes `auto` choose volume-mounts, never a name the runtime cannot resolve.
import fs from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'yaml';
import { z } from 'zod';

/** CDI specs are a few KiB; nvidia-ctk's for 8 GPUs with MIG stays well below this. */
const MAX_SPEC_BYTES = 4 * 1024 * 1024;

const CdiSpecSchema = z.object({
  kind: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9.-]*\/[A-Za-z0-9][A-Za-z0-9_-]*$/),
  devices: z.array(z.object({ name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]*$/) }).passthrough()).max(100_000),
}).passthrough();

/** The fully qualified names one spec's text defines (pure); throws when it is not a CDI spec. */
export function cdiNamesOfSpec(text: string): string[] {
  const spec = CdiSpecSchema.parse(parse(text));
  return spec.devices.map((d) => `${spec.kind}=${d.name}`);
}

export interface CdiScan {
  names: Set<string>;
  /** Files left out, with why. */
  skipped: { file: string; error: string }[];
}

/** Reads every *.yaml, *.yml and *.json spec in these directories (a missing directory holds none). */
export async function readCdiNames(dirs: readonly string[]): Promise<CdiScan> {
  const out: CdiScan = { names: new Set(), skipped: [] };
  for (const dir of dirs) {
    let entries: string[];
    try {
      entries = await fs.readdir(dir);
    } catch {
      continue;
    }
    for (const entry of entries.filter((e) => /\.(ya?ml|json)$/.test(e)).sort()) {
      const file = path.join(dir, entry);
      try {
        const stat = await fs.stat(file);
        if (!stat.isFile()) continue;
        if (stat.size > MAX_SPEC_BYTES) throw new Error(`${stat.size} bytes, over ${MAX_SPEC_BYTES}`);
        for (const n of cdiNamesOfSpec(await fs.readFile(file, 'utf8'))) out.names.add(n);
      } catch (e) {
        out.skipped.push({ file, error: e instanceof z.ZodError ? 'not a CDI spec (kind and devices[].name)' : (e as Error).message });
      }
    }
  }
  return out;
}
