// Server-side HTML for the GPU calendar: an escaping template tag and the page frame. Every interpolated value is
// escaped unless it is itself an Html (a fragment built by this tag).

export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

type Value = Html | string | number | boolean | null | undefined | readonly Value[];

function render(v: Value): string {
  if (v === null || v === undefined || v === false) return '';
  if (v instanceof Html) return v.text;
  if (Array.isArray(v)) return v.map(render).join('');
  return escapeHtml(String(v));
}

/** html`<p>${text}</p>`: interpolations are escaped; arrays are joined; null, undefined and false render nothing. */
export function html(strings: TemplateStringsArray, ...values: Value[]): Html {
  let out = strings[0]!;
  values.forEach((v, i) => {
    out += render(v) + strings[i + 1]!;
  });
  return new Html(out);
}

/** JSON inside a <script type="application/json"> block: `<` escaped so that no value can close the element. */
export function jsonBlock(id: string, value: unknown): Html {
  const json = JSON.stringify(value).replace(/</g, '\\u003c').replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029');
  return new Html(`<script type="application/json" id="${escapeHtml(id)}">${json}</script>`);
}

export const ASSET_PATHS = { css: '/calendar/assets/calendar.css', js: '/calendar/assets/calendar.js' } as const;

/** The page frame: the stylesheet and the script from the listener itself (no CDN). */
export function page(title: string, body: Html, opts: { script?: boolean } = {}): string {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title}</title>
<link rel="stylesheet" href="${ASSET_PATHS.css}">
${opts.script ? html`<script src="${ASSET_PATHS.js}" defer></script>` : ''}
</head>
<body>
<a class="skip" href="#main">Skip to the calendar</a>
${body}
</body>
</html>
`.text;
}

const pad = (n: number) => String(n).padStart(2, '0');

/** 2026-12-03 14:00 UTC */
export function utc(ms: number): string {
  const d = new Date(ms);
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())} UTC`;
}

/** 14:00 */
export function hhmm(ms: number): string {
  const d = new Date(ms);
  return `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}`;
}

/** Thu 03 Dec */
export function day(ms: number): string {
  const d = new Date(ms);
  const days = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];
  const months = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  return `${days[d.getUTCDay()]} ${pad(d.getUTCDate())} ${months[d.getUTCMonth()]}`;
}
