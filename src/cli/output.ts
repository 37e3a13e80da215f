// The output formats every listing and get command takes with `-o`: `table` (default), `wide` (the table with the
// columns it leaves out; the same where it leaves none out), `json` and `yaml` (the command's answer as data: the API's
// answer for the API commands). Pure: data in, strings out.
import YAML from 'yaml';
import { z } from 'zod';

export const OUTPUT_FORMATS = ['table', 'wide', 'json', 'yaml'] as const;
export type OutputFormat = (typeof OUTPUT_FORMATS)[number];

const OutputFormatSchema = z.enum(OUTPUT_FORMATS);

/** The `-o` help line, the same in every command. */
export const OUTPUT_HELP = `  -o, --output FORMAT          ${OUTPUT_FORMATS.join('|')} (default table; wide: more columns)`;

/** `-o`'s value, or undefined for one that is not a format (the caller says so as a usage error). */
export function parseOutput(value: string | undefined): OutputFormat | undefined {
  const parsed = OutputFormatSchema.safeParse(value ?? 'table');
  return parsed.success ? parsed.data : undefined;
}

export const outputUsageMessage = (value: string) => `-o: one of ${OUTPUT_FORMATS.join(', ')}, not ${value}`;

/** True for the formats that print data rather than text for people. */
export const isData = (format: string): boolean => format === 'json' || format === 'yaml';

/** Data as JSON (2-space) or YAML, ending in a newline. */
export function formatData(format: 'json' | 'yaml', data: unknown): string {
  return format === 'json' ? `${JSON.stringify(data, null, 2)}\n` : YAML.stringify(data, { lineWidth: 0 });
}

/** What a command prints for its answer in `format`: the data, or the table (wide when asked and there is one). */
/** What a command prints: its answer (for -o json or yaml) and how to draw it as a table. */
export interface Shown {
  result: unknown;
  render: { table: () => string; wide?: () => string };
}

export function formatOutput(format: OutputFormat, data: unknown, render: { table: () => string; wide?: () => string }): string {
  if (format === 'json' || format === 'yaml') return formatData(format, data);
  return format === 'wide' && render.wide ? render.wide() : render.table();
}

/** A failure on stderr: `error CODE: message`, or `{"error": {code, message}}` as one line of JSON, or as YAML. */
export function formatFailure(format: string, code: string, message: string): string {
  if (format === 'json') return `${JSON.stringify({ error: { code, message } })}\n`;
  if (format === 'yaml') return formatData('yaml', { error: { code, message } });
  return `error ${code}: ${message}\n`;
}
