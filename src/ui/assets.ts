// The GPU calendar's stylesheet and client script, served by the listener itself (no CDN, works offline). Kept as
// strings in the module so that the build (tsc into dist/) carries them without a copy step. The script is small and
// optional: every page works without it; with it, a click (or Enter) on one of your bars shows its Reservation in
// place, Escape returns focus to the bar, and the calendar scrolls to now on load.

export const CALENDAR_CSS = `
:root { --own: #1f4e99; --pod: #0b6b5d; --booked: #59616b; --now: #c0161b; --line: #c9ced6; --bg: #ffffff; --fg: #1a1d21;
  --muted: #4d5560; --label: 13rem; --hour: 2rem; --lane-h: 1.5rem; font-family: system-ui, sans-serif; color: var(--fg); background: var(--bg); }
body { margin: 0; font-size: 15px; line-height: 1.4; }
a { color: #174a96; }
:focus-visible { outline: 3px solid #f2a900; outline-offset: 1px; }
.skip { position: absolute; left: -999px; } .skip:focus { left: 0.5rem; top: 0.5rem; background: #fff; padding: 0.3rem; z-index: 10; }
.top { display: flex; align-items: center; justify-content: space-between; padding: 0.5rem 1rem; border-bottom: 1px solid var(--line); }
h1 { font-size: 1.3rem; margin: 0.3rem 0; } h1 .sub { font-weight: normal; color: var(--muted); font-size: 1rem; margin-left: 0.5rem; }
h2 { font-size: 1.1rem; margin: 0.8rem 0 0.4rem; }
.narrow { max-width: 36rem; margin: 2rem auto; padding: 0 1rem; }
.signin { display: grid; gap: 0.4rem; } .signin input { font: inherit; padding: 0.4rem; }
button { font: inherit; padding: 0.3rem 0.8rem; border: 1px solid #3d4450; background: #f3f4f6; color: var(--fg); border-radius: 3px; cursor: pointer; }
.error { color: #9b1111; font-weight: 600; }
.muted { color: var(--muted); }
.layout { display: grid; grid-template-columns: minmax(0, 1fr) 24rem; gap: 1rem; padding: 0 1rem 1rem; }
@media (max-width: 1100px) { .layout { grid-template-columns: minmax(0, 1fr); } }
.range { color: var(--muted); margin: 0.5rem 0; }
.legend { list-style: none; display: flex; gap: 1.2rem; padding: 0; margin: 0.3rem 0 0.6rem; flex-wrap: wrap; }
.swatch { display: inline-block; width: 1rem; height: 0.8rem; vertical-align: middle; border-radius: 2px; }
.swatch.own-reservation { background: var(--own); } .swatch.own-pod { background: var(--pod); }
.swatch.booked { background: var(--booked); } .swatch.now { background: var(--now); width: 3px; }
.scroller { overflow-x: auto; border: 1px solid var(--line); position: relative; max-height: 70vh; overflow-y: auto; }
.grid { position: relative; width: calc(var(--label) + var(--hours) * var(--hour)); }
.row { display: flex; border-bottom: 1px solid #eceef1; }
.row .label { position: sticky; left: 0; z-index: 3; flex: none; width: var(--label); box-sizing: border-box; padding: 0.2rem 0.5rem;
  background: #f7f8fa; border-right: 1px solid var(--line); white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.row .track { position: relative; flex: 1; min-height: var(--lane-h); }
.row.node .track { height: calc(var(--lanes) * var(--lane-h) + 0.3rem);
  background-image: repeating-linear-gradient(to right, #eef0f3 0, #eef0f3 1px, transparent 1px, transparent var(--hour)); }
.row.axis { position: sticky; top: 0; z-index: 4; background: #fff; }
.row.axis .track { height: 1.6rem; }
.tick { position: absolute; top: 0.2rem; font-size: 0.75rem; color: var(--muted); white-space: nowrap; padding-left: 2px; border-left: 1px solid var(--line); }
.tick.day { font-weight: 700; color: var(--fg); border-left: 2px solid #6b7380; }
.row.free .cell { position: absolute; top: 0; bottom: 0; font-size: 0.75rem; text-align: center; overflow: hidden; box-sizing: border-box; border-right: 1px solid #fff; }
.cell.all { background: #d8f0dc; color: #143d1c; } .cell.some { background: #fff0b8; color: #4a3b00; } .cell.none { background: #f6d3d3; color: #5c1010; }
.domain-name .label { font-weight: 700; background: #e9edf3; }
.bar { position: absolute; top: calc(var(--lane) * var(--lane-h) + 0.15rem); height: calc(var(--lane-h) - 0.2rem); box-sizing: border-box;
  border-radius: 3px; color: #fff; font-size: 0.78rem; padding: 0 0.3rem; white-space: nowrap; overflow: hidden; text-overflow: ellipsis;
  text-decoration: none; line-height: calc(var(--lane-h) - 0.2rem); min-width: 3px; z-index: 1; }
.bar.own-reservation { background: var(--own); } .bar.own-pod { background: var(--pod); }
.bar.booked { background: repeating-linear-gradient(135deg, var(--booked) 0, var(--booked) 6px, #4a5058 6px, #4a5058 12px); }
.bar[aria-pressed="true"], .bar.selected { box-shadow: 0 0 0 3px #f2a900; }
.now-mark { position: absolute; top: 0; bottom: 0; width: 2px; margin-left: -1px; background: var(--now); z-index: 2; pointer-events: none; }
.side section { border: 1px solid var(--line); padding: 0 0.8rem 0.6rem; margin-bottom: 1rem; }
.detail dl { display: grid; grid-template-columns: auto 1fr; gap: 0.2rem 0.8rem; margin: 0; } .detail dt { font-weight: 600; }
.detail dd { margin: 0; overflow-wrap: anywhere; }
.summary table { border-collapse: collapse; width: 100%; font-size: 0.9rem; } .summary th[scope="row"] { white-space: nowrap; } abbr { text-decoration: none; } .summary th, .summary td { text-align: right; padding: 0.2rem 0.4rem; border-bottom: 1px solid #eceef1; }
.summary th[scope="row"], .summary thead th:first-child { text-align: left; } .summary tr.current { background: #eef3fb; }
.find-form { display: flex; gap: 0.5rem; align-items: center; flex-wrap: wrap; } .find-form input { width: 5rem; font: inherit; padding: 0.2rem; }
.slots { padding-left: 1.4rem; } .slots ul { margin: 0.2rem 0 0.5rem; }
code { background: #f1f3f5; padding: 0 0.2rem; }
`;

export const CALENDAR_JS = `'use strict';
(function () {
  var data = document.getElementById('calendar-details');
  var details = data ? JSON.parse(data.textContent || '[]') : [];
  var body = document.getElementById('detail-body');
  var panel = document.getElementById('detail');
  var last = null;
  function pad(n) { return String(n).padStart(2, '0'); }
  function utc(ms) {
    var d = new Date(ms);
    return d.getUTCFullYear() + '-' + pad(d.getUTCMonth() + 1) + '-' + pad(d.getUTCDate()) + ' ' + pad(d.getUTCHours()) + ':' + pad(d.getUTCMinutes()) + ' UTC';
  }
  function el(tag, text, field) {
    var e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (field) e.setAttribute('data-field', field);
    return e;
  }
  function row(dl, name, field, value) {
    dl.appendChild(el('dt', name));
    var dd = el('dd', undefined, field);
    (Array.isArray(value) ? value : [value]).forEach(function (v) { dd.appendChild(el('div', v)); });
    dl.appendChild(dd);
  }
  function show(d) {
    var dl = document.createElement('dl');
    row(dl, 'id', 'id', d.id);
    if (d.name) row(dl, 'name', 'name', d.name);
    row(dl, 'window', 'window', utc(d.start) + ' to ' + utc(d.end));
    row(dl, 'state', 'state', d.state + (d.spot ? ' (spot)' : ''));
    row(dl, 'atoms', 'atoms', d.atoms.map(function (a) { return a.nodeId + ': ' + a.atoms.join(', '); }));
    row(dl, 'conditions', 'conditions', d.conditions.map(function (c) {
      return c.type + '=' + c.status + (c.reason ? ' (' + c.reason + ')' : '') + (c.message ? ': ' + c.message : '');
    }));
    body.replaceChildren(dl);
  }
  document.addEventListener('click', function (ev) {
    var bar = ev.target.closest && ev.target.closest('a.bar[data-rsv]');
    if (!bar || !body) return;
    var d = details.find(function (x) { return x.id === bar.getAttribute('data-rsv'); });
    if (!d) return;
    ev.preventDefault();
    document.querySelectorAll('.bar.selected').forEach(function (b) { b.classList.remove('selected'); });
    bar.classList.add('selected');
    last = bar;
    show(d);
    panel.focus();
  });
  document.addEventListener('keydown', function (ev) {
    if (ev.key === 'Escape' && last) { last.focus(); }
  });
  var now = document.getElementById('now');
  var scroller = document.getElementById('scroller');
  if (now && scroller) {
    var label = scroller.querySelector('.row .label');
    var offset = label ? label.getBoundingClientRect().width : 0;
    var x = now.getBoundingClientRect().left - scroller.getBoundingClientRect().left + scroller.scrollLeft;
    scroller.scrollLeft = Math.max(0, x - offset - scroller.clientWidth * 0.15);
  }
})();
`;
