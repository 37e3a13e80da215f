// A command's flags, parsed the one way every `better-compute` command parses them: strictly, the usage on a mistake.
import { parseArgs, type ParseArgsConfig } from 'node:util';

type ParseArgsOptionsConfig = NonNullable<ParseArgsConfig['options']>;

type Parsed<O extends ParseArgsOptionsConfig, P extends boolean> = ReturnType<
  typeof parseArgs<{ args: string[]; strict: true; allowPositionals: P; options: O }>
>;

/**
 * The flags (and positionals, where the command takes them), or the exit code once the usage is printed: 2 on stderr
 * after flags that do not parse, 0 on stdout for --help.
 */
export function parseFlags<const O extends ParseArgsOptionsConfig, const P extends boolean>(
  argv: string[],
  options: O,
  allowPositionals: P,
  usageText: string,
  io: { stdout: (text: string) => void; stderr: (text: string) => void },
): Parsed<O, P> | number {
  let parsed: Parsed<O, P>;
  try {
    parsed = parseArgs({ args: argv, strict: true as const, allowPositionals, options });
  } catch (e) {
    io.stderr(`${(e as Error).message}\n${usageText}`);
    return 2;
  }
  if ((parsed.values as { help?: unknown }).help) {
    io.stdout(usageText);
    return 0;
  }
  return parsed;
}

/** The values of a command's flags (no positionals), by its options table. */
export type FlagValues<O extends ParseArgsOptionsConfig> = Parsed<O, false>['values'];

/** The flags of a command that reads through the capacity API (or the database with --direct), and prints a listing. */
export const CLIENT_OPTIONS = {
  output: { type: 'string', short: 'o' },
  server: { type: 'string' },
  token: { type: 'string' },
  'ca-file': { type: 'string' },
  'tls-server-name': { type: 'string' },
  direct: { type: 'boolean' },
  progress: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;
