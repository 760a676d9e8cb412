// sluice dashboard: plain script, same-origin fetches only, every text set with textContent
// (models, sessions and message content are untrusted).
'use strict';

const state = { tab: 'overview', requestsBefore: null, sessionsBefore: null, session: null, live: null, refresh: null };

// ---- formatting -------------------------------------------------------------------------
const nf = new Intl.NumberFormat('en-US');
function tokens(n) {
  if (n == null) return '—';
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(2) + 'B tok';
  if (a >= 1e6) return (n / 1e6).toFixed(2) + 'M tok';
  if (a >= 1e4) return (n / 1e3).toFixed(1) + 'k tok';
  return nf.format(n) + ' tok';
}
function usd(n) {
  if (n == null) return 'unknown';
  const a = Math.abs(n);
  const digits = a >= 100 ? 0 : a >= 1 ? 2 : a >= 0.01 ? 3 : 4;
  return (n < 0 ? '−$' : '$') + a.toFixed(digits);
}
// `1 error`, `3 errors`: a count and its noun, plural when it is not one.
function count(n, noun) { return nf.format(n) + ' ' + noun + (n === 1 ? '' : 's'); }
function pct(n) { return n == null ? '—' : n.toFixed(1) + '%'; }
// A savings figure (billed input saved, net, the headline; content tokens saved, net, beside it;
// the same as /stats billed_savings_pct and net_savings_pct): savings read positive, a loss
// negative.
function savedPct(n) {
  if (n == null) return '—';
  return n < 0 ? '−' + (-n).toFixed(2) + '% (cost more)' : n.toFixed(2) + '% saved';
}
function ms(n) { return n == null ? '—' : (n >= 100 ? n.toFixed(0) : n.toFixed(2)) + ' ms'; }
function when(ts) {
  if (ts == null) return '—';
  const d = new Date(ts);
  const age = Date.now() - ts;
  if (age < 60e3) return Math.max(0, Math.round(age / 1e3)) + ' s ago';
  if (age < 3600e3) return Math.round(age / 60e3) + ' min ago';
  return d.toLocaleString();
}
function signClass(n) { return n == null ? '' : n > 0 ? 'good' : n < 0 ? 'bad' : ''; }

// ---- DOM --------------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k === 'text') node.textContent = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children.flat(Infinity)) {
    if (child == null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}
const $ = (id) => document.getElementById(id);

function table(node, columns, rows, opts) {
  node.replaceChildren();
  const head = el('tr', {}, columns.map((c) => el('th', { class: c.num ? 'num' : null, text: c.title })));
  node.append(el('thead', {}, head));
  const body = el('tbody');
  if (!rows.length) {
    body.append(el('tr', {}, el('td', { class: 'empty', colspan: columns.length, text: (opts && opts.empty) || 'Nothing in this window yet.' })));
  }
  for (const row of rows) {
    const tr = el('tr', { class: opts && opts.onclick ? 'link' : null, 'data-id': row.id, 'data-testid': opts && opts.testid ? opts.testid : null });
    for (const c of columns) {
      const v = c.render(row);
      const td = el('td', { class: (c.num ? 'num ' : '') + (c.cls ? c.cls(row) : '') });
      td.append(v instanceof Node ? v : document.createTextNode(v == null ? '—' : String(v)));
      tr.append(td);
    }
    if (opts && opts.onclick) tr.addEventListener('click', () => opts.onclick(row));
    body.append(tr);
  }
  node.append(body);
}

// ---- API --------------------------------------------------------------------------------
function windowParams() {
  const span = Number($('window').value);
  const p = new URLSearchParams();
  if (span > 0) p.set('since', String(Date.now() - span));
  return p;
}
async function api(path, params) {
  const query = params && [...params].length ? '?' + params.toString() : '';
  const response = await fetch(path + query, { headers: { accept: 'application/json' } });
  if (!response.ok) throw new Error(path + ': ' + response.status);
  return response.json();
}

// ---- charts (hand-drawn SVG) --------------------------------------------------------------
// A namespace name, never fetched.
const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}
function lineChart(node, points, series, format) {
  node.replaceChildren();
  const W = 560, H = 190, L = 62, R = 10, T = 18, B = 24;
  const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img' });
  node.append(root);
  const values = points.flatMap((p) => series.map((s) => s.value(p)).filter((v) => v != null));
  if (points.length === 0 || values.length === 0) {
    const t = svg('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'empty' });
    t.textContent = 'No requests in this window yet';
    root.append(t);
    return;
  }
  const x0 = points[0].t, x1 = points[points.length - 1].t;
  const top = niceMax(Math.max(...values));
  const x = (t) => L + (x1 === x0 ? (W - L - R) / 2 : ((t - x0) / (x1 - x0)) * (W - L - R));
  const y = (v) => T + (1 - v / top) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4;
    root.append(svg('line', { x1: L, x2: W - R, y1: y(v), y2: y(v), class: 'axis' }));
    const label = svg('text', { x: L - 6, y: y(v) + 3, 'text-anchor': 'end', class: 'tick' });
    label.textContent = format(v);
    root.append(label);
  }
  const ticks = Math.min(points.length, 5);
  for (let i = 0; i < ticks; i++) {
    const p = points[Math.round((i * (points.length - 1)) / Math.max(1, ticks - 1))];
    const anchor = ticks > 1 && i === ticks - 1 ? 'end' : ticks > 1 && i === 0 ? 'start' : 'middle';
    const label = svg('text', { x: x(p.t), y: H - 6, 'text-anchor': anchor, class: 'tick' });
    const d = new Date(p.t);
    label.textContent = d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
    root.append(label);
  }
  series.forEach((s, i) => {
    const pts = points.filter((p) => s.value(p) != null).map((p) => `${x(p.t).toFixed(1)},${y(s.value(p)).toFixed(1)}`);
    if (pts.length === 1) {
      const [cx, cy] = pts[0].split(',');
      root.append(svg('circle', { cx, cy, r: 3, class: 'k' + s.cls }));
    } else {
      root.append(svg('polyline', { points: pts.join(' '), class: 's' + s.cls }));
    }
    const key = svg('g', {});
    key.append(svg('rect', { x: L + 4 + i * 150, y: 3, width: 10, height: 10, class: 'k' + s.cls }));
    const t = svg('text', { x: L + 18 + i * 150, y: 12, class: 'tick' });
    t.textContent = s.name;
    key.append(t);
    root.append(key);
  });
}
function shortTokens(v) { return v >= 1e6 ? (v / 1e6).toFixed(1) + 'M' : v >= 1e3 ? (v / 1e3).toFixed(0) + 'k' : String(Math.round(v)); }
function shortUsd(v) { return '$' + (v >= 1 ? v.toFixed(1) : v >= 0.01 ? v.toFixed(2) : v.toFixed(4)); }

// ---- overview ---------------------------------------------------------------------------
function tile(id, label, value, detail, cls) {
  return el('div', { class: 'tile', 'data-testid': 'tile-' + id },
    el('div', { class: 'label', text: label }),
    el('div', { class: 'value ' + (cls || ''), 'data-testid': 'value-' + id, text: value }),
    el('div', { class: 'detail', text: detail || '' }));
}
// The cache keep-alive since sluice started (cache.keepalive; nothing when it is off): pings,
// the gaps they kept, and both sides of their money. A ping answered with a write found the
// entry gone: shown as bad.
function keepaliveTile(k) {
  if (!k.enabled) return '';
  const wrote = k.keepalive_wrote_instead_of_read;
  return tile('keepalive', 'Keep-alive pings', nf.format(k.keepalive_pings),
    count(k.keepalive_kept, 'gap') + ' kept · spent ' + usd(k.keepalive_spend_usd) + ' · spared ' + usd(k.keepalive_saved_usd) +
    (wrote ? ' · ' + nf.format(wrote) + ' wrote instead of read' : ''), wrote ? 'bad' : '');
}
// The share of requests sluice forwarded as they came, by reason: a body it cannot read shows
// here at once instead of hiding behind a small saving.
function untouchedTile(o) {
  const rows = o.untouched || [];
  const share = rows.reduce((sum, r) => sum + r.pct, 0);
  const detail = rows.length ? rows.slice(0, 3).map((r) => r.reason + ' ' + pct(r.pct)).join(' · ') : 'every request was read';
  const unread = rows.some((r) => r.reason.startsWith('unparsed'));
  return tile('untouched', 'Forwarded untouched', pct(share), detail, unread ? 'bad' : '');
}
async function loadOverview() {
  const params = windowParams();
  const span = Number($('window').value) || 7 * 86400e3;
  const bucket = Math.max(60e3, Math.round(span / 48 / 60e3) * 60e3);
  const seriesParams = new URLSearchParams(params);
  seriesParams.set('bucket_ms', String(bucket));
  const [o, series, cost, keep] = await Promise.all([
    api('/dashboard/api/overview', params),
    api('/dashboard/api/series', seriesParams),
    api('/dashboard/api/cost', params),
    api('/dashboard/api/keepalive'),
  ]);
  const c = o.capture || {};
  $('tiles').replaceChildren(
    tile('requests', 'Requests', nf.format(o.requests), count(o.sessions, 'session') + ' · ' + count(o.errors, 'error')),
    tile('billed', 'Billed input saved, net', savedPct(o.billed_savings_pct),
      'before expand rounds ' + savedPct(o.billed_savings_pct_gross) + ' · ' + count(o.billed_requests, 'request') + ' with a usage report',
      signClass(o.billed_savings_pct)),
    tile('net', 'Content tokens saved, net', savedPct(o.net_savings_pct),
      'before expand rounds ' + savedPct(o.savings_pct_gross) + ' · ' + tokens(o.net_saved_tokens) +
      (o.failed_requests_excluded ? ' · ' + nf.format(o.failed_requests_excluded) + ' failed upstream, left out' : '') +
      (o.projected_requests ? ' · observe mode cuts nothing' : ''), signClass(o.net_savings_pct)),
    tile('worth', 'Content tokens saved, priced', usd(o.net_saved_usd), 'the same tokens at list prices · ' + nf.format(o.priced_requests) + ' priced', signClass(o.net_saved_usd)),
    tile('cost', 'Billed', usd(o.cost_usd), 'baseline ' + usd(o.baseline_cost_usd) + ' · content cut ' + tokens(o.saved_tokens)),
    tile('cache', 'Cache read / written', tokens(o.cache_read_tokens), 'written ' + tokens(o.cache_write_tokens) + ' · fresh ' + tokens(o.fresh_input_tokens)),
    tile('expand', 'Expand rounds', nf.format(o.expand_rounds), 'cost ' + usd(o.expand_cost_usd) + ' (in the net)'),
    tile('latency', 'Added by sluice', ms(o.added_ms_avg), 'average per request'),
    untouchedTile(o),
    keepaliveTile(keep),
    tile('capture', 'Capture', count(c.captured || 0, 'row'), nf.format(c.dropped || 0) + ' dropped · content ' + (c.content_enabled ? 'on' : 'off') + (c.kept === 'memory' ? ' · in memory, this run only' : ''), c.dropped ? 'bad' : ''),
  );
  const pts = series.points;
  lineChart($('chart-tokens'), pts, [
    { name: 'sent by the agent', cls: 0, value: (p) => p.tokens_before },
    { name: 'forwarded', cls: 1, value: (p) => p.tokens_before - p.saved_tokens },
  ], shortTokens);
  lineChart($('chart-cache'), pts, [
    { name: 'cache read', cls: 2, value: (p) => p.cache_read_tokens },
    { name: 'cache written', cls: 3, value: (p) => p.cache_write_tokens },
  ], shortTokens);
  lineChart($('chart-cost'), pts, [
    { name: 'baseline', cls: 0, value: (p) => p.baseline_cost_usd },
    { name: 'billed', cls: 1, value: (p) => p.cost_usd },
  ], shortUsd);
  table($('cost-table'), [
    { title: 'Model', render: (r) => r.model },
    { title: 'Requests', num: true, render: (r) => nf.format(r.requests) },
    { title: 'Billed', num: true, render: (r) => usd(r.cost_usd) },
    { title: 'Baseline', num: true, render: (r) => usd(r.baseline_cost_usd) },
    { title: 'Saved', num: true, render: (r) => usd(r.saved_usd) },
    { title: 'Expand cost', num: true, render: (r) => usd(r.expand_cost_usd) },
    { title: 'Net, priced', num: true, render: (r) => usd(r.net_saved_usd), cls: (r) => signClass(r.net_saved_usd) },
    { title: 'Billed input saved, net', num: true, render: (r) => savedPct(r.billed_savings_pct), cls: (r) => signClass(r.billed_savings_pct) },
    { title: 'Content tokens saved, net', num: true, render: (r) => savedPct(r.net_savings_pct), cls: (r) => signClass(r.net_savings_pct) },
  ], cost.models);
  $('capture-note').textContent = 'Billed input saved, net, is what the provider billed for the requests sluice forwarded (its own usage report: fresh input, cache reads at 0.1, cache writes at 1.25) against what it would have billed without sluice, expand rounds charged: the same figure as /stats billed_savings_pct and sluice replay\'s headline. ' +
    'Content tokens saved, net, is the tokens cut from requests the upstream completed, less the expand tool\'s declaration and what expand rounds restored and re-read (at 0.1), over those requests\' content: the same figure as /stats net_savings_pct. It counts tokens, not their price: most of a prompt is read from the provider\'s cache at a tenth of the price, so the bill changes less. ' +
    'Costs are list prices at the time each row was written; "unknown" means the model is not in the price table or the provider reported no usage. ' +
    'Priced, each of those tokens is at the tier it was billed: removed ones at the tier the request\'s new suffix paid.';
}

// ---- sessions ---------------------------------------------------------------------------
async function loadSessions(more) {
  const params = windowParams();
  if (more && state.sessionsBefore) params.set('before', String(state.sessionsBefore));
  const page = await api('/dashboard/api/sessions', params);
  const rows = more ? state.sessionRows.concat(page.sessions) : page.sessions;
  state.sessionRows = rows;
  state.sessionsBefore = page.next_before;
  table($('sessions-table'), [
    { title: 'Session', render: (r) => el('span', { class: 'mono', text: r.session }) },
    { title: 'Last active', render: (r) => when(r.last_ts) },
    { title: 'Requests', num: true, render: (r) => nf.format(r.requests) },
    { title: 'Content', num: true, render: (r) => tokens(r.tokens_before) },
    { title: 'Billed input saved, net', num: true, render: (r) => savedPct(r.billed_savings_pct), cls: (r) => signClass(r.billed_savings_pct) },
    { title: 'Content tokens saved, net', num: true, render: (r) => savedPct(r.net_savings_pct), cls: (r) => signClass(r.net_savings_pct) },
    { title: 'Expand rounds', num: true, render: (r) => nf.format(r.expand_rounds) },
    { title: 'Billed', num: true, render: (r) => usd(r.cost_usd) },
    { title: 'Net, priced', num: true, render: (r) => usd(r.net_saved_usd), cls: (r) => signClass(r.net_saved_usd) },
    { title: 'Model', render: (r) => r.models },
  ], rows, { onclick: (r) => { state.session = r.session; showTab('requests'); }, empty: 'No sessions in this window yet.' });
  $('sessions-more').classList.toggle('hidden', page.sessions.length < 50);
}

// ---- requests ---------------------------------------------------------------------------
async function loadRequests(more) {
  const params = windowParams();
  if (state.session) params.set('session', state.session);
  if ($('status-filter').value) params.set('status', $('status-filter').value);
  if (more && state.requestsBefore) params.set('before', String(state.requestsBefore));
  const page = await api('/dashboard/api/requests', params);
  const rows = more ? state.requestRows.concat(page.requests) : page.requests;
  state.requestRows = rows;
  state.requestsBefore = page.next_before;
  const chip = $('request-filter');
  chip.classList.toggle('hidden', !state.session);
  chip.replaceChildren();
  if (state.session) {
    chip.append('session ' + state.session + ' ', el('button', { text: '×', 'aria-label': 'clear', onclick: () => { state.session = null; loadRequests(false); } }));
  }
  table($('requests-table'), [
    { title: 'When', render: (r) => when(r.ts) },
    { title: 'Route', render: (r) => r.route + (r.stream ? ' · stream' : '') },
    { title: 'Model', render: (r) => r.model },
    { title: 'Status', num: true, render: (r) => r.status, cls: (r) => (r.status >= 400 ? 'bad' : '') },
    { title: 'Content', num: true, render: (r) => tokens(r.tokens_before) },
    { title: 'Billed input saved, net', num: true, render: (r) => savedPct(r.billed_savings_pct), cls: (r) => signClass(r.billed_savings_pct) },
    { title: 'Content tokens saved, net', num: true, render: (r) => (r.untouched ? 'untouched: ' + r.untouched : r.net_savings_pct == null ? 'not completed: left out' : savedPct(r.net_savings_pct)) },
    { title: 'Acted', render: (r) => el('span', {}, r.acted.map((a) => el('span', { class: 'chip act', text: a }))) },
    { title: 'Billed', num: true, render: (r) => usd(r.cost_usd) },
    { title: 'Net, priced', num: true, render: (r) => usd(r.net_saved_usd), cls: (r) => signClass(r.net_saved_usd) },
    { title: 'Added', num: true, render: (r) => ms(r.added_ms) },
  ], rows, { onclick: (r) => openRequest(r.id), testid: 'request-row', empty: 'No requests in this window yet.' });
  $('requests-more').classList.toggle('hidden', page.requests.length < 50);
}

async function openRequest(id) {
  const r = await api('/dashboard/api/requests/' + id);
  $('drawer-title').textContent = 'Request #' + r.id + ' · ' + (r.model || 'unknown model');
  const facts = [
    ['When', new Date(r.ts).toLocaleString()],
    ['Session', r.session || '—'],
    ['Route / mode', r.route + ' · ' + r.mode + (r.stream ? ' · streamed' : '')],
    ['Status', String(r.status) + (r.untouched ? ' · forwarded untouched: ' + r.untouched : '')],
    ['Messages', nf.format(r.messages)],
    ['Content tokens', tokens(r.tokens_before) + ' → ' + tokens(r.tokens_after) + ' (' + tokens(r.saved_tokens) + ' cut' + (r.projected ? ', projected' : '') + ')' +
      (r.expand_declared_tokens ? ' · expand tool declared: ' + tokens(r.expand_declared_tokens) : '')],
    ['Provider usage', 'fresh ' + tokens(r.fresh_input_tokens) + ' · cache read ' + tokens(r.cache_read_tokens) + ' · written ' + tokens(r.cache_write_tokens) + ' · output ' + tokens(r.output_tokens)],
    ['Expand rounds', nf.format(r.expand_rounds) + (r.expand_rounds ? ' (' + tokens(r.expand_tokens) + ' restored)' : '')],
    ['Billed / baseline', usd(r.cost_usd) + ' / ' + usd(r.baseline_cost_usd)],
    ['Content tokens saved, net', (r.net_savings_pct == null ? 'left out (not completed upstream)' : savedPct(r.net_savings_pct)) +
      ' · priced ' + usd(r.net_saved_usd) + ' (saved ' + usd(r.saved_usd) + ' − expand ' + usd(r.expand_cost_usd) + ')'],
    ['Time added', ms(r.added_ms) + ' · upstream head ' + ms(r.upstream_ms)],
  ];
  const body = $('drawer-body');
  body.replaceChildren(el('dl', { class: 'facts' }, facts.map(([k, v]) => [el('dt', { text: k }), el('dd', { text: v })])));
  body.append(el('h2', { text: 'Components, in pipeline order' }));
  const comps = el('table', { class: 'grid', 'data-testid': 'components-detail' });
  table(comps, [
    { title: 'Component', render: (c) => c.component },
    { title: 'Kind', render: (c) => c.kind },
    { title: 'Outcome', render: (c) => el('span', { class: 'chip ' + (c.reverted ? 'revert' : c.acted ? 'act' : ''), text: c.reverted ? 'reverted: ' + c.reverted : c.acted ? 'acted' : c.mutated ? 'changed bytes' : 'no change' }) },
    { title: 'Saved', num: true, render: (c) => tokens(c.saved_tokens) },
    { title: 'Time', num: true, render: (c) => ms(c.duration_ms) },
    { title: 'Skipped, and why', cls: () => 'wrap', render: (c) => el('span', {}, Object.entries(c.skipped).map(([k, n]) => el('span', { class: 'chip', text: k + ' × ' + n }))) },
  ], r.components, { empty: 'No pipeline run (the request went as it came).' });
  body.append(comps);
  body.append(el('h2', { text: 'Content' }));
  if (!r.content_visible) {
    body.append(el('p', { class: 'note', text: 'Message content is shown to loopback and trusted networks only.' }));
  } else if (!r.content || !r.content.length) {
    body.append(el('p', { class: 'note', text: r.capture_blocked_by ? 'Not captured: switched off by the ' + r.capture_blocked_by + ' (--dashboard-content, x-context-guru-capture).' : 'No message changed on this request.' }));
  } else {
    for (const m of r.content) {
      body.append(el('div', { class: 'head note', text: 'message ' + m.message + ' · ' + m.role + (m.tool ? ' (' + m.tool + ')' : '') + ' · ' + m.components + ' · ' + tokens(m.before_tokens) + ' → ' + tokens(m.after_tokens) }));
      body.append(el('div', { class: 'diff' }, el('pre', { text: m.before }), el('pre', { text: m.after })));
    }
  }
  $('drawer').classList.add('open');
  $('drawer').setAttribute('aria-hidden', 'false');
}

// ---- components -------------------------------------------------------------------------
async function loadComponents() {
  const data = await api('/dashboard/api/components', windowParams());
  table($('components-table'), [
    { title: 'Component', render: (c) => c.component },
    { title: 'Kind', render: (c) => c.kind },
    { title: 'Runs', num: true, render: (c) => nf.format(c.runs) },
    { title: 'Acted', num: true, render: (c) => nf.format(c.acted) + ' · ' + pct(c.act_rate_pct) },
    { title: 'Saved', num: true, render: (c) => tokens(c.saved_tokens) },
    { title: 'Avg time', num: true, render: (c) => ms(c.avg_ms) },
    { title: 'Reverted', num: true, render: (c) => nf.format(c.reverted), cls: (c) => (c.reverted ? 'bad' : '') },
    { title: 'Skipped, and why', cls: () => 'wrap', render: (c) => el('span', {}, Object.entries(c.skipped).sort((a, b) => b[1] - a[1]).map(([k, n]) => el('span', { class: 'chip', text: k + ' × ' + nf.format(n) }))) },
  ], data.components, { empty: 'No component has run in this window yet.' });
}

// ---- experiment --------------------------------------------------------------------------
function difference(d) {
  if (!d) return 'not yet: each arm needs two finished sessions';
  const signed = (x) => (x > 0 ? '+' : '') + (x * 100).toFixed(1) + '%';
  const verdict = d.settled ? 'settled' : d.more_sessions_per_arm == null ? 'no difference seen' : 'about ' + nf.format(d.more_sessions_per_arm) + ' more finished sessions per arm to settle';
  const basis = d.basis === 'usd' ? ' cost' : ' input-token equivalents (a model has no list price here)';
  return signed(d.relative) + basis + ' per session (95% interval ' + signed(d.low) + ' to ' + signed(d.high) + '): ' + verdict;
}
function armRows(g) {
  return [['control', g.control], ['treatment', g.treatment]].map(([arm, s]) => Object.assign({ arm }, s));
}
const ARM_COLUMNS = [
  { title: 'Arm', render: (r) => r.arm },
  { title: 'Sessions', num: true, render: (r) => nf.format(r.sessions) },
  { title: 'Open', num: true, render: (r) => nf.format(r.open) },
  { title: 'Cost / session', num: true, render: (r) => usd(r.cost_per_session) },
  { title: 'Tokens / session', num: true, render: (r) => tokens(r.tokens_per_session) },
  { title: 'Turns / session', num: true, render: (r) => r.turns_per_session.toFixed(1) },
  { title: 'Expand rounds / session', num: true, render: (r) => r.expand_rounds_per_session.toFixed(2) },
  { title: 'Errors', num: true, render: (r) => pct(r.error_rate * 100) },
  { title: 'No usage', num: true, render: (r) => nf.format(r.no_usage_turns) },
];
function groupTable(node, groups, empty) {
  const rows = [];
  for (const g of groups) for (const r of armRows(g)) rows.push(Object.assign({ group: g.name, diff: r.arm === 'treatment' ? difference(g.difference) : '' }, r));
  table(node, [{ title: '', render: (r) => (r.arm === 'control' ? r.group : '') }].concat(ARM_COLUMNS, [{ title: 'Treatment vs control', cls: () => 'wrap', render: (r) => r.diff }]), rows, { empty });
}
async function loadExperiment() {
  const data = await api('/dashboard/api/experiment');
  if (!data.running && !data.ended) {
    $('experiment-summary').textContent = 'No experiment runs. Start sluice with --ab 0.5 (or experiment.control_share in the config) to split sessions between sluice and forwarding untouched, and see here whether it saves money on your own traffic.';
    for (const id of ['experiment-table', 'experiment-agents', 'experiment-models']) $(id).replaceChildren();
    return;
  }
  $('experiment-summary').textContent = 'Experiment ' + data.experiment + (data.ended ? ' (ended: every session now gets the winner)' : '') + ': treatment ' + difference(data.overall.difference) + '.';
  table($('experiment-table'), ARM_COLUMNS, armRows(data.overall), { empty: 'No session yet.', testid: 'experiment-arm' });
  groupTable($('experiment-agents'), data.by_agent, 'No session yet.');
  groupTable($('experiment-models'), data.by_model, 'No session yet.');
}

// ---- tabs, refresh, live ------------------------------------------------------------------
const loaders = { overview: loadOverview, sessions: () => loadSessions(false), requests: () => loadRequests(false), components: loadComponents, experiment: loadExperiment };
function showTab(tab) {
  state.tab = tab;
  for (const b of document.querySelectorAll('.tab')) b.classList.toggle('active', b.dataset.tab === tab);
  for (const p of document.querySelectorAll('.panel')) p.classList.toggle('active', p.id === tab);
  refresh();
}
function refresh() {
  loaders[state.tab]().catch((e) => console.warn('dashboard refresh failed', e));
}
function scheduleRefresh() {
  // Rows arrive in bursts; one refresh per burst.
  if (state.refresh) return;
  state.refresh = setTimeout(() => { state.refresh = null; refresh(); }, 400);
}
function connect() {
  const live = $('live');
  const source = new EventSource('/dashboard/api/events');
  state.live = source;
  source.onopen = () => { live.textContent = '● live'; live.className = 'live on'; };
  source.addEventListener('request', () => scheduleRefresh());
  source.onerror = () => { live.textContent = '● reconnecting'; live.className = 'live off'; };
}

document.addEventListener('DOMContentLoaded', () => {
  for (const b of document.querySelectorAll('.tab')) b.addEventListener('click', () => showTab(b.dataset.tab));
  $('window').addEventListener('change', refresh);
  $('status-filter').addEventListener('change', () => loadRequests(false));
  $('sessions-more').addEventListener('click', () => loadSessions(true));
  $('requests-more').addEventListener('click', () => loadRequests(true));
  $('drawer-close').addEventListener('click', () => { $('drawer').classList.remove('open'); $('drawer').setAttribute('aria-hidden', 'true'); });
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape') $('drawer-close').click(); });
  showTab('overview');
  connect();
  setInterval(refresh, 30e3);
});
