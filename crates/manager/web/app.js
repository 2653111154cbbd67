// berth dashboard: one script, no framework, no CDN. It calls the manager's REST API with
// the session cookie (and the CSRF token on every change) and hears job changes as
// server-sent events from /ui/events. Everything it shows is written as text (textContent,
// never innerHTML), so job names, commands and reasons can never become markup.
'use strict';

const S = { user: null, role: null, csrf: null, runAs: null, events: null, onJob: null, timers: [] };
const STATES = ['PENDING', 'SCHEDULED', 'PREPARING', 'RUNNING', 'TERMINATING', 'SUCCEEDED', 'FAILED',
  'CANCELLED', 'TIMEOUT', 'LOST'];
const FINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED', 'TIMEOUT', 'LOST']);
const PAGE = 50;

// ---- DOM helpers -------------------------------------------------------------------------

/** An element with attributes (set as properties or attributes, never as HTML) and children. */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function main() { return document.getElementById('main'); }
function show(...nodes) { main().replaceChildren(...nodes); }
function errorBox(msg) { return el('p', { class: 'error', role: 'alert', text: msg }); }

// A replica ended by its endpoint scaling down is CANCELLED in the API, but no failure: it
// reads SCALED-DOWN, as in `berth ps`.
function stateBadge(s, cause) {
  const label = cause === 'scaled_down' ? 'SCALED-DOWN' : s;
  return el('span', { class: 'state state-' + label, text: label });
}

function age(ts) {
  if (!ts) return '';
  const secs = Math.max(0, (Date.now() - Date.parse(ts)) / 1000);
  if (secs < 60) return Math.floor(secs) + 's';
  if (secs < 3600) return Math.floor(secs / 60) + 'm';
  if (secs < 86400) return Math.floor(secs / 3600) + 'h';
  return Math.floor(secs / 86400) + 'd';
}

/** A time as ISO 8601 in the browser's time zone: `2026-11-29 14:05:09`. */
function when(ts) {
  if (!ts) return '';
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return '';
  const p = (n) => String(n).padStart(2, '0');
  return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + ' ' + p(d.getHours()) + ':'
    + p(d.getMinutes()) + ':' + p(d.getSeconds());
}

/** Seconds as berth writes durations (`berth_model::format_duration`): `30m`, `1h30m`, `2d`. */
function duration(secs) {
  secs = Math.round(secs);
  const parts = [[Math.floor(secs / 86400), 'd'], [Math.floor(secs % 86400 / 3600), 'h'],
    [Math.floor(secs % 3600 / 60), 'm'], [secs % 60, 's']];
  const out = parts.filter(([v]) => v > 0).map(([v, u]) => v + u).join('');
  return out || '0s';
}

/** A command's words as a shell would need them typed: quoted where a word holds anything
 *  but safe characters, its newlines kept (inside the quotes). */
function shellWords(argv) {
  return (argv || []).map((w) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(w) ? w : "'" + w.replace(/'/g, "'\\''") + "'")).join(' ');
}

/** CPU (or NUMA node) ids as ranges: `[0,1,2,3,8]` → `0-3,8`. */
function idRanges(ids) {
  const sorted = [...ids].sort((a, b) => a - b);
  const out = [];
  for (let i = 0; i < sorted.length; i++) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    out.push(j > i ? sorted[i] + '-' + sorted[j] : String(sorted[i]));
    i = j;
  }
  return out.join(',');
}

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + units[i];
}

function resources(j) {
  const parts = [(j.cpu_milli / 1000) + ' CPU', bytes(j.mem_bytes)];
  if (j.gpu_milli) parts.push((j.gpu_milli / 1000) + ' GPU');
  return parts.join(', ');
}

function bar(used, total, label, kind) {
  const pct = total > 0 ? Math.min(100, 100 * used / total) : 0;
  const fill = el('span');
  fill.style.width = pct.toFixed(1) + '%';
  return el('div', {}, el('div', { class: kind === 'used' ? 'bar used' : 'bar', title: label }, fill),
    el('div', { class: 'bar-label', text: label }));
}

/** Seconds of CPU or GPU time, short: `5.9 s`, `12.5 min`, `3.2 h`. */
function cpuTime(s) {
  if (s < 120) return s.toFixed(1) + ' s';
  if (s < 7200) return (s / 60).toFixed(1) + ' min';
  return (s / 3600).toFixed(1) + ' h';
}

/** A job's measured usage beside what it was given: bars for CPU and memory (and GPU time). */
function usageBlock(d) {
  const j = d.job;
  const u = j.usage;
  if (!u) {
    const why = FINAL.has(j.state) ? 'Nothing was measured (no cgroups on its node).' : (j.started_at ? 'Waiting for the first sample.' : 'Not running yet.');
    return el('p', { class: 'muted', text: why });
  }
  const cpus = d.kernels.reduce((a, k) => a + k.binding.cpu_milli / 1000, 0);
  const mem = d.kernels.reduce((a, k) => a + k.binding.mem_bytes, 0);
  const gpus = d.kernels.reduce((a, k) => a + k.binding.gpus.reduce((b, g) => b + g.milli / 1000, 0), 0);
  const start = j.started_at ? Date.parse(j.started_at) : null;
  const wall = start ? Math.max(0, ((j.ended_at ? Date.parse(j.ended_at) : Date.now()) - start) / 1000) : 0;
  const parts = [];
  if (u.cpu_percent !== undefined) {
    parts.push(bar(u.cpu_percent / 100, cpus, 'CPUs busy now: ' + (u.cpu_percent / 100).toFixed(2) + ' of ' + cpus, 'used'));
  }
  if (u.cpu_seconds !== undefined && wall > 0 && cpus > 0) {
    const eff = u.cpu_seconds / (cpus * wall);
    parts.push(bar(eff, 1, 'CPU time ' + cpuTime(u.cpu_seconds) + ': ' + (100 * eff).toFixed(1) + '% of ' + cpus + ' CPUs × ' + cpuTime(wall), 'used'));
  }
  if (u.memory_bytes !== undefined || u.memory_peak_bytes !== undefined) {
    const now = u.memory_bytes !== undefined ? bytes(u.memory_bytes) + ' now, ' : '';
    const peak = u.memory_peak_bytes !== undefined ? 'peak ' + bytes(u.memory_peak_bytes) : '';
    parts.push(bar(u.memory_peak_bytes || u.memory_bytes || 0, mem, 'Memory ' + now + peak + ' of ' + bytes(mem), 'used'));
  }
  if (u.gpu_seconds !== undefined && gpus > 0 && wall > 0) {
    parts.push(bar(u.gpu_seconds / (gpus * wall), 1, 'GPU busy ' + cpuTime(u.gpu_seconds) + ' of ' + gpus + ' GPUs × ' + cpuTime(wall), 'used'));
  }
  return el('div', { class: 'grid' }, parts);
}

// ---- API ---------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

/** Calls the API; a 401 means the session ended and sends the page back to the login screen. */
async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && S.csrf) headers['x-berth-csrf'] = S.csrf;
  const res = await fetch(path, {
    method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status === 401) {
    let msg = 'your session has ended';
    try { msg = (await res.json()).error || msg; } catch (_) { /* not JSON */ }
    loginScreen(msg);
    throw new ApiError(401, msg);
  }
  if (!res.ok) {
    let msg = res.status + ' ' + res.statusText;
    try { msg = (await res.json()).error || msg; } catch (_) { /* not JSON */ }
    throw new ApiError(res.status, msg);
  }
  if (res.status === 204) return null;
  const type = res.headers.get('content-type') || '';
  return type.includes('json') ? res.json() : res;
}

// ---- session and navigation ----------------------------------------------------------------

function loginScreen(message) {
  stopLive();
  if (S.events) { S.events.close(); S.events = null; }
  S.user = null;
  document.getElementById('nav').hidden = true;
  document.getElementById('logout').hidden = true;
  document.getElementById('who').textContent = '';
  show(el('section', { id: 'login' },
    el('h1', { text: 'Log in to berth' }),
    message ? el('p', { class: 'error', text: message }) : null,
    el('p', {}, 'Run ', el('code', { text: 'berth ui' }),
      ' in a terminal where you use berth. It prints a one-time link that logs this browser in.')));
}

async function boot() {
  document.getElementById('logout').addEventListener('click', logout);
  let me;
  try {
    me = await api('GET', '/ui/session');
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) show(errorBox(String(e.message || e)));
    return;
  }
  S.user = me.user; S.role = me.role; S.csrf = me.csrf; S.runAs = me.run_as;
  document.getElementById('nav').hidden = false;
  document.getElementById('who').textContent = me.user + (me.role === 'admin' ? ' (admin)' : '');
  document.getElementById('nav-admin').hidden = me.role !== 'admin';
  document.getElementById('logout').hidden = !me.csrf;
  listen();
  window.addEventListener('hashchange', route);
  route();
}

async function logout() {
  try { await api('POST', '/ui/logout'); } catch (_) { /* ended anyway */ }
  loginScreen('You are logged out.');
}

/** Job changes, pushed by the manager once stored. */
function listen() {
  const es = new EventSource('/ui/events');
  es.addEventListener('job', (ev) => { if (S.onJob) S.onJob(JSON.parse(ev.data)); });
  es.addEventListener('resync', () => route());
  es.addEventListener('error', async () => {
    if (es.readyState === EventSource.CLOSED) {
      // Refused (the session ended) or the manager went away: find out which.
      try { await api('GET', '/ui/session'); setTimeout(listen, 2000); } catch (_) { /* login screen */ }
    }
  });
  S.events = es;
}

function stopLive() {
  S.onJob = null;
  for (const t of S.timers) clearInterval(t);
  S.timers = [];
}

function route() {
  if (!S.user) return;
  stopLive();
  // `#/page/arg?query`: the query is the page's own (filters), not part of its name.
  const hash = location.hash.replace(/^#\/?/, '').split('?')[0] || 'jobs';
  const [page, arg] = hash.split('/');
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('active', a.getAttribute('href') === '#/' + page);
  }
  const views = { jobs: jobsView, nodes: nodesView, endpoints: endpointsView, queues: queuesView, usage: usageView, submit: submitView, admin: adminView };
  if (page === 'jobs' && arg) return jobView(arg);
  const v = views[page];
  if (!v) return show(el('h1', { text: 'Page not found' }), el('p', {}, el('a', { href: '#/jobs', text: 'Go to the jobs' })));
  v().catch((e) => { if (!(e instanceof ApiError && e.status === 401)) show(errorBox(String(e.message || e))); });
}

// ---- jobs ------------------------------------------------------------------------------------

async function jobsView() {
  const q = new URLSearchParams(location.hash.split('?')[1] || '');
  const stateSel = el('select', { name: 'state' }, el('option', { value: '', text: 'any' }),
    STATES.map((s) => el('option', { value: s, text: s, selected: q.get('state') === s })));
  const user = el('input', { name: 'user', value: q.get('user') || '', size: 10 });
  const queue = el('input', { name: 'queue', value: q.get('queue') || '', size: 10 });
  const name = el('input', { name: 'name', value: q.get('name') || '', size: 14 });
  const all = el('input', { type: 'checkbox', name: 'all', checked: q.get('all') === 'true' });
  const filters = el('form', { class: 'filters', id: 'job-filters' },
    el('label', {}, 'State', stateSel), el('label', {}, 'User', user), el('label', {}, 'Queue', queue),
    el('label', {}, 'Name', name), el('label', { class: 'check' }, all, 'finished too'),
    el('button', { type: 'submit', text: 'Filter' }));
  const body = el('tbody');
  const pager = el('div', { class: 'toolbar' });
  show(el('h1', { text: 'Jobs' }), filters, el('table', { id: 'jobs' },
    el('thead', {}, el('tr', {}, ['ID', 'Name', 'User', 'State', 'Queue', 'Resources', 'Age', 'Reason',
      'Expected start'].map((h) => el('th', { text: h })))), body), pager);

  let before = null;
  const stack = [];
  const params = () => {
    const p = new URLSearchParams({ limit: String(PAGE) });
    if (stateSel.value) p.set('state', stateSel.value);
    if (user.value.trim()) p.set('user', user.value.trim());
    if (queue.value.trim()) p.set('queue', queue.value.trim());
    if (name.value.trim()) p.set('name', name.value.trim());
    if (all.checked || FINAL.has(stateSel.value)) p.set('all', 'true');
    return p;
  };
  const matches = (j) => (!stateSel.value || j.state === stateSel.value)
    && (!user.value.trim() || j.user === user.value.trim())
    && (!queue.value.trim() || j.queue === queue.value.trim())
    && (!name.value.trim() || (j.name || '').includes(name.value.trim()));
  const load = async () => {
    const p = params();
    if (before) p.set('before', String(before));
    const jobs = await api('GET', '/v1/jobs?' + p);
    body.replaceChildren(...jobs.map(jobRow));
    if (!jobs.length) body.append(el('tr', {}, el('td', { colspan: 9, class: 'muted', text: 'No jobs.' })));
    const last = jobs.length ? jobs[jobs.length - 1].id : null;
    pager.replaceChildren(
      el('button', { type: 'button', class: 'secondary', disabled: !stack.length, text: '← Newer',
        onclick: () => { before = stack.pop(); load(); } }),
      el('button', { type: 'button', class: 'secondary', disabled: jobs.length < PAGE, text: 'Older →',
        onclick: () => { stack.push(before); before = last; load(); } }));
  };
  filters.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const p = params(); p.delete('limit');
    history.replaceState(null, '', '#/jobs?' + p);
    before = null; stack.length = 0;
    load().catch((e) => show(errorBox(e.message)));
  });
  S.onJob = (j) => {
    const row = document.getElementById('job-' + j.id);
    if (row) { row.replaceWith(jobRow(j, true)); return; }
    if (before === null && matches(j)) {
      const empty = body.querySelector('td[colspan]');
      if (empty) empty.parentElement.remove();
      body.prepend(jobRow(j, true));
    }
  };
  // Ages and expected starts move on without events.
  S.timers.push(setInterval(() => { for (const c of body.querySelectorAll('td[data-age]')) c.textContent = age(c.dataset.age); }, 5000));
  await load();
}

// A PREPARING job's setup: `env build 2/4`, `prefetch 1.5 GiB/3.0 GiB`
// (berth_model::SetupProgress::short).
function setupText(s) {
  if (!s) return '';
  if (s.step === 'datasets') return 'prefetch ' + bytes(s.done) + '/' + bytes(s.total);
  return (s.step === 'environment' ? 'env build' : s.step) + ' ' + s.done + '/' + s.total;
}

function jobRow(j, flash) {
  const waiting = j.pending_reason ? j.pending_reason.message
    : (FINAL.has(j.state) ? (j.reason || '') : setupText(j.setup));
  return el('tr', { id: 'job-' + j.id, class: flash ? 'flash' : null, 'data-state': j.state },
    el('td', { class: 'num' }, el('a', { href: '#/jobs/' + j.id, text: String(j.id) })),
    el('td', { text: j.name || '' }), el('td', { text: j.user }), el('td', {}, stateBadge(j.state, j.end_cause)),
    el('td', { text: j.queue }), el('td', { text: resources(j) }),
    el('td', { 'data-age': j.submitted_at, text: age(j.submitted_at) }), el('td', { text: waiting }),
    el('td', { text: j.expected_start ? when(j.expected_start) : '' }));
}

async function jobView(id) {
  const d = await api('GET', '/v1/jobs/' + encodeURIComponent(id));
  const j = d.job;
  const facts = el('dl', { class: 'facts', id: 'job-facts' });
  const fill = (j) => {
    const rows = [['State', stateBadge(j.state, j.end_cause)], ['Name', j.name || ''], ['User', j.user], ['Queue', j.queue],
      ['Project', d.spec.project || ''], ['Resources', resources(j) + (d.spec.nodes > 1 ? ' × ' + d.spec.nodes + ' nodes' : '')],
      ['Command', el('pre', { class: 'command', id: 'job-command', text: shellWords(d.spec.command) })],
      ['Working directory', d.spec.image || d.spec.code ? '' : (d.spec.workdir || "a new directory of the job's own")],
      ['Python environment', d.spec.environment ? 'Python ' + d.spec.environment.python : ''],
      ['Variables', Object.entries(d.spec.env || {}).map(([k, v]) => k + '=' + v).join('\n')],
      ['Folders', (d.spec.folders || []).map((f) => f.folder + ' at ' + (f.path || '/data/' + f.folder.split('/').pop()) + (f.read_only ? ' (read-only)' : '')).join(', ')],
      ['Image', d.spec.image || ''],
      ['Time limit', d.spec.time_limit_secs ? duration(d.spec.time_limit_secs) : 'none'],
      ['Submitted', when(j.submitted_at)], ['Started', when(j.started_at)], ['Ended', when(j.ended_at)],
      ['Exit code', j.exit_code === null || j.exit_code === undefined ? '' : String(j.exit_code)],
      ['Reason', j.reason || ''], ['Waiting for', j.pending_reason ? j.pending_reason.message : ''],
      ['Setup', j.setup ? setupText(j.setup) + (j.setup.detail ? ': ' + j.setup.detail : '') + ', since ' + when(j.setup.since) : ''],
      ['Expected start', when(j.expected_start)]];
    facts.replaceChildren(...rows.filter(([, v]) => v !== '').flatMap(([k, v]) => [el('dt', { text: k }), el('dd', {}, v)]));
    cancel.hidden = FINAL.has(j.state) || j.state === 'TERMINATING';
  };
  const msg = el('div');
  const cancel = el('button', { type: 'button', class: 'danger', id: 'cancel', text: 'Cancel job', onclick: async () => {
    if (!confirm('Cancel job ' + j.id + '?')) return;
    try { const r = await api('POST', '/v1/jobs/' + j.id + '/cancel'); msg.replaceChildren(el('p', { class: 'muted', text: 'Job is ' + r.state + '.' })); }
    catch (e) { msg.replaceChildren(errorBox(e.message)); }
  } });
  const kernels = el('table', { id: 'placement' }, el('thead', {}, el('tr', {}, ['Kernel', 'Node', 'CPUs', 'NUMA nodes', 'Memory', 'GPUs', 'Exit']
    .map((h) => el('th', { text: h })))), el('tbody', {}, d.kernels.map((k) => el('tr', {},
    el('td', { text: k.index + ' (' + k.role + ')' }), el('td', { text: k.binding.node }),
    el('td', { text: cpuText(k.binding) }),
    el('td', { text: k.binding.mems.length ? (k.binding.mems.length === 1 ? 'id ' : 'ids ') + idRanges(k.binding.mems) : '' }),
    el('td', { text: bytes(k.binding.mem_bytes) }),
    el('td', { text: k.binding.gpus.map((g) => 'GPU ' + g.index + ' × ' + (g.milli / 1000)).join(', ') }),
    el('td', { text: k.exit_code === null ? '' : String(k.exit_code) })))));
  // Apps open through the app proxy with a one-time link (a cookie for that app alone). The
  // window is opened at the click, so no popup blocker stops it, and loses its opener.
  const apps = el('ul', { id: 'job-apps' }, (d.spec.apps || []).map((a) => el('li', {},
    el('button', { type: 'button', 'data-app': a.name, text: 'Open ' + a.name, onclick: async () => {
      const w = window.open('', '_blank');
      try {
        const r = await api('POST', '/v1/jobs/' + j.id + '/apps/' + encodeURIComponent(a.name) + '/link');
        if (w) { w.opener = null; w.location = r.url; } else { location.assign(r.url); }
      } catch (e) { if (w) w.close(); msg.replaceChildren(errorBox(e.message)); }
    } }), ' ', el('span', { class: 'muted', text: a.kind === 'custom' ? 'port ' + a.port : a.kind }))));
  const history = el('ol', { class: 'timeline', id: 'history' }, historyItems(d.transitions));
  const usage = el('div', { id: 'job-usage' }, usageBlock(d));
  const stream = el('select', {}, el('option', { value: 'stdout', text: 'stdout' }), el('option', { value: 'stderr', text: 'stderr' }));
  const log = el('pre', { id: 'log' });
  show(el('h1', { text: 'Job ' + j.id + (j.name ? ': ' + j.name : '') }),
    el('div', { class: 'toolbar' }, cancel, el('a', { href: '#/jobs', text: '← all jobs' })), msg, facts,
    el('h2', { text: 'Placement' }), d.kernels.length ? kernels : el('p', { class: 'muted', text: 'Not placed yet.' }),
    ...(d.spec.apps && d.spec.apps.length ? [el('h2', { text: 'Apps' }), apps] : []),
    el('h2', { text: 'Usage' }), usage,
    el('h2', { text: 'History' }), history,
    el('h2', {}, 'Log ', stream), log);
  fill(j);
  S.onJob = async (ev) => {
    if (ev.id !== j.id) return;
    fill(ev);
    try {
      const fresh = await api('GET', '/v1/jobs/' + j.id);
      history.replaceChildren(...historyItems(fresh.transitions));
      usage.replaceChildren(usageBlock(fresh));
    } catch (_) { /* shown on the next change */ }
  };
  // Usage changes with every heartbeat, not with state changes: look again while it runs.
  S.timers.push(setInterval(async () => {
    if (!location.hash.startsWith('#/jobs/' + j.id)) return;
    try {
      const fresh = await api('GET', '/v1/jobs/' + j.id);
      // While it runs, and once more with its totals after it ended.
      if (usage.dataset.final) return;
      usage.replaceChildren(usageBlock(fresh));
      if (FINAL.has(fresh.job.state)) usage.dataset.final = '1';
    } catch (_) { /* the next tick tries again */ }
  }, 3000));
  tailLog(j.id, stream, log);
}

/** A kernel's CPUs: how many, then which (the cpuset's ids): `4 CPUs, ids 0-3`. */
function cpuText(b) {
  if (!b.cpus.length) return (b.cpu_milli / 1000) + ' CPU' + (b.cpu_milli === 1000 ? '' : 's') + ' (no cpuset)';
  const n = b.cpus.length;
  return n + (n === 1 ? ' CPU, id ' : ' CPUs, ids ') + idRanges(b.cpus);
}

/** A job's transitions as timeline entries. */
function historyItems(transitions) {
  return transitions.map((t) => el('li', {}, el('span', { class: 'muted', text: when(t.at) + ' ' }), stateBadge(t.to), ' ' + t.reason));
}

/** Follows the job's log: asks for the bytes after what it has, once a second, until done. */
function tailLog(id, stream, pre) {
  let offset = 0;
  let done = false;
  let busy = false;
  const decoder = new TextDecoder();
  const tick = async () => {
    if (busy || done) return;
    busy = true;
    try {
      const res = await fetch('/v1/jobs/' + id + '/logs?stream=' + stream.value + '&offset=' + offset, { credentials: 'same-origin' });
      if (res.ok) {
        const buf = new Uint8Array(await res.arrayBuffer());
        offset = Number(res.headers.get('berth-next-offset') || offset);
        if (buf.length) {
          pre.append(decoder.decode(buf, { stream: true }));
          if (pre.dataset.follow === 'true') pre.scrollTop = pre.scrollHeight;
        }
        done = res.headers.get('berth-job-done') === 'true' && buf.length === 0;
      }
    } catch (_) { /* try again */ }
    busy = false;
  };
  // The pane follows the newest line until the reader scrolls up, and again once they scroll
  // back to the bottom. Scrolls the script makes land at the bottom, so they keep following.
  pre.dataset.follow = 'true';
  pre.addEventListener('scroll', () => {
    pre.dataset.follow = String(pre.scrollHeight - pre.scrollTop - pre.clientHeight < 8);
  });
  stream.addEventListener('change', () => { offset = 0; done = false; pre.textContent = ''; pre.dataset.follow = 'true'; tick(); });
  tick();
  S.timers.push(setInterval(tick, 1000));
}

// ---- serving endpoints -----------------------------------------------------------------------

/** Your endpoints (admins: all) with their replicas and the last minute's traffic; refreshed
 *  every 5 s while shown. */
async function endpointsView() {
  const eps = await api('GET', '/v1/endpoints');
  const ms = (v) => (v === null || v === undefined) ? '-' : v.toFixed(1) + ' ms';
  const heads = ['Endpoint', 'Owner', 'Ready', 'Revision', 'Rollout', 'Requests/s', 'Errors/s', 'p50', 'p99', 'Restarts', 'URL'];
  const rows = eps.flatMap((e) => [
    el('tr', { id: 'endpoint-' + e.name },
      el('td', { text: e.name }), el('td', { text: e.owner }),
      el('td', { class: 'num', text: e.ready + '/' + e.desired }), el('td', { class: 'num', text: String(e.revision) }),
      el('td', { text: e.rollout }), el('td', { class: 'num', text: e.request_rate.toFixed(1) }),
      el('td', { class: 'num', text: e.error_rate.toFixed(1) }), el('td', { class: 'num', text: ms(e.p50_ms) }),
      el('td', { class: 'num', text: ms(e.p99_ms) }), el('td', { class: 'num', text: String(e.restarts) }),
      el('td', {}, el('code', { text: e.url || e.path }))),
    el('tr', { class: 'replicas' }, el('td', { colspan: heads.length },
      e.message ? el('p', { class: 'muted', text: e.message }) : null,
      e.replicas.length ? e.replicas.map((r) => el('span', { class: 'replica' },
        el('a', { href: '#/jobs/' + r.job, text: 'job ' + r.job }),
        ' ' + r.state + (r.node ? ' on ' + r.node : '') + ', ' + r.inflight + ' in flight' + (r.reason ? ': ' + r.reason : '') + ' ')) :
        el('span', { class: 'muted', text: 'No replicas.' }))),
  ]);
  show(el('h1', { text: 'Serving endpoints' }),
    el('p', { class: 'muted', text: 'Created with berth serve create; called at their URL with a token (berth serve token create).' }),
    el('table', { id: 'endpoints' }, el('thead', {}, el('tr', {}, heads.map((h) => el('th', { text: h })))),
      el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', { colspan: heads.length, class: 'muted', text: 'No endpoints yet.' })))));
  S.timers.push(setTimeout(() => { if (location.hash.startsWith('#/endpoints')) endpointsView().catch(() => {}); }, 5000));
}

// ---- nodes, queues, usage ------------------------------------------------------------------

async function nodesView() {
  const nodes = await api('GET', '/v1/nodes');
  const admin = S.role === 'admin';
  const rows = nodes.map((n) => {
    const gpus = n.gpus.flatMap((g) => [bar(g.used_milli, g.total_milli, 'GPU ' + g.index + ': ' + (g.used_milli / 1000) + ' of 1 allocated'),
      g.utilization !== undefined ? bar(g.utilization, 1, 'busy ' + Math.round(100 * g.utilization) + '%', 'used') : null]);
    const cpuUse = n.cpus_busy !== undefined ? bar(n.cpus_busy, n.cpus_total, n.cpus_busy.toFixed(1) + ' busy', 'used') : null;
    const memUse = n.mem_in_use !== undefined ? bar(n.mem_in_use, n.mem_total, bytes(n.mem_in_use) + ' in use', 'used') : null;
    const action = !admin ? null : n.drain_reason
      ? el('button', { type: 'button', class: 'secondary', text: 'Undrain', onclick: () => nodeAction(n.name, 'undrain') })
      : el('button', { type: 'button', class: 'secondary', text: 'Drain', onclick: () => nodeAction(n.name, 'drain') });
    return el('tr', { id: 'node-' + n.name },
      el('td', { text: n.name }), el('td', { text: n.state }), el('td', { text: n.queue }),
      el('td', {}, bar(n.cpus_used, n.cpus_total, n.cpus_used + ' of ' + n.cpus_total + ' CPUs allocated'), cpuUse),
      el('td', {}, bar(n.mem_used, n.mem_total, bytes(n.mem_used) + ' of ' + bytes(n.mem_total) + ' allocated'), memUse),
      el('td', {}, gpus.length ? gpus : el('span', { class: 'muted', text: 'none' })),
      el('td', { class: 'num', text: String(n.running_jobs) }), el('td', { text: n.drain_reason || '' }),
      el('td', { text: age(n.last_heartbeat) + ' ago' }),
      el('td', { text: Object.entries(n.labels || {}).map(([k, v]) => k + '=' + v).join(' ') }),
      admin ? el('td', {}, action) : null);
  });
  const heads = ['Node', 'State', 'Queue', 'CPUs', 'Memory', 'GPUs', 'Jobs', 'Drain reason', 'Heartbeat', 'Labels'];
  if (admin) heads.push('');
  const q = new URLSearchParams(location.hash.split('?')[1] || '');
  const span = TIMELINE_SPANS[q.get('span')] ? q.get('span') : '24h';
  const segments = await api('GET', '/v1/nodes/timeline?since=' + span);
  show(el('h1', { text: 'Nodes' }), el('table', { id: 'nodes' }, el('thead', {}, el('tr', {}, heads.map((h) => el('th', { text: h })))),
    el('tbody', {}, rows.length ? rows : el('tr', {}, el('td', { colspan: heads.length, class: 'muted', text: 'No nodes yet.' })))),
    el('h2', {}, 'Jobs on each node, last ', el('span', { class: 'spans' }, Object.keys(TIMELINE_SPANS).map((k) => (k === span
      ? el('strong', { text: k }) : el('a', { href: '#/nodes?span=' + k, text: k }))))),
    nodeTimeline(nodes.map((n) => n.name), segments, span));
  S.timers.push(setTimeout(() => { if (location.hash.startsWith('#/nodes')) nodesView().catch(() => {}); }, 10000));
}

/** The nodes timeline's spans: its length, the grid's step and every how many steps a label. */
const TIMELINE_SPANS = { '1h': [3600, 300, 2], '6h': [6 * 3600, 1800, 2], '24h': [86400, 3600, 3] };

/** One row per node, one bar per job that ran there (colour by user; hover for the job), as
 *  wide as the page with a time grid: a job of minutes is still a bar one can point at. */
function nodeTimeline(names, segments, span) {
  const [secs, step, every] = TIMELINE_SPANS[span];
  const m = main(), pad = getComputedStyle(m);
  const inner = m.clientWidth - parseFloat(pad.paddingLeft) - parseFloat(pad.paddingRight);
  const w = Math.max(640, Math.floor(inner)), row = 32, left = 140, top = 24, right = 12;
  const end = Date.now(), begin = end - secs * 1000;
  const x = (t) => left + (w - left - right) * (Math.max(begin, Math.min(end, t)) - begin) / (end - begin);
  const h = top + row * Math.max(1, names.length);
  const svg = svgEl('svg', { class: 'chart timeline', id: 'node-timeline', width: w, height: h + 22,
    role: 'img', 'aria-label': 'jobs per node over the last ' + span });
  // A line every step, labelled (local time) every few, so a bar's time can be read off.
  const p2 = (n) => String(n).padStart(2, '0');
  for (let t = Math.ceil(begin / (step * 1000)) * step * 1000; t <= end; t += step * 1000) {
    const at = new Date(t);
    svg.append(svgEl('line', { x1: x(t).toFixed(1), x2: x(t).toFixed(1), y1: top - 4, y2: h, stroke: '#e3e6eb' }));
    if (Math.round(t / 1000 / step) % every === 0) {
      svg.append(svgEl('text', { x: x(t).toFixed(1), y: top - 8, 'font-size': 11, 'text-anchor': 'middle', fill: '#667085' },
        p2(at.getHours()) + ':' + p2(at.getMinutes())));
    }
  }
  const users = [...new Set(segments.map((g) => g.user || ''))];
  names.forEach((name, i) => {
    const y = top + i * row;
    svg.append(svgEl('text', { x: 4, y: y + row / 2 + 4, 'font-size': 12 }, name));
    svg.append(svgEl('line', { x1: left, x2: w - right, y1: y + row, y2: y + row, stroke: '#e3e6eb' }));
    for (const g of segments.filter((s) => s.node === name)) {
      const x0 = x(Date.parse(g.start)), x1 = x(g.end ? Date.parse(g.end) : end);
      const bar = svgEl('rect', { x: x0.toFixed(1), y: y + 4, width: Math.max(3, x1 - x0).toFixed(1), height: row - 8, rx: 2,
        fill: g.user ? PALETTE[users.indexOf(g.user) % PALETTE.length] : '#c9ced6', class: 'segment' });
      const span = when(g.start) + ' – ' + (g.end ? when(g.end) : 'now');
      const label = g.job ? 'job ' + g.job + (g.name ? ' ' + g.name : '') + ' (' + g.user + ', ' + g.state + '), ' + span
        : "another user's job, " + span;
      bar.append(svgEl('title', {}, label));
      svg.append(bar);
    }
  });
  svg.append(svgEl('text', { x: left, y: h + 16, 'font-size': 11 }, span + ' ago'));
  svg.append(svgEl('text', { x: w - right, y: h + 16, 'font-size': 11, 'text-anchor': 'end' }, 'now'));
  return svg;
}

async function nodeAction(name, what) {
  let body = {};
  if (what === 'drain') {
    const reason = prompt('Why drain ' + name + '? (shown to users)');
    if (reason === null) return;
    body = { reason };
  }
  try { await api('POST', '/v1/nodes/' + encodeURIComponent(name) + '/' + what, body); route(); }
  catch (e) { main().prepend(errorBox(e.message)); }
}

async function queuesView() {
  const queues = await api('GET', '/v1/queues');
  show(el('h1', { text: 'Queues' }), el('table', { id: 'queues' },
    el('thead', {}, el('tr', {}, ['Queue', 'Ordering', 'Head of line', 'Backfill window', 'Scoring', 'Default limit', 'Nodes', 'Pending', 'Running']
      .map((h) => el('th', { text: h })))),
    el('tbody', {}, queues.map((q) => el('tr', {}, el('td', { text: q.name }), el('td', { text: q.policy.ordering }),
      el('td', { text: q.policy.head_of_line }), el('td', { class: 'num', text: String(q.policy.backfill_window) }),
      el('td', { text: q.policy.scoring }), el('td', { text: duration(q.policy.default_time_limit_secs) }),
      el('td', { class: 'num', text: String(q.nodes) }), el('td', { class: 'num', text: String(q.pending) }),
      el('td', { class: 'num', text: String(q.running) }))))));
}

async function usageView() {
  const q = new URLSearchParams(location.hash.split('?')[1] || '');
  const by = q.get('by') || 'user';
  const since = q.get('since') || '30d';
  const lines = await api('GET', '/v1/usage?' + new URLSearchParams({ by, since }));
  const form = el('form', { class: 'filters' },
    el('label', {}, 'By', el('select', { name: 'by' }, ['user', 'project'].map((b) => el('option', { value: b, text: b, selected: b === by })))),
    el('label', {}, 'Since', el('input', { name: 'since', value: since, size: 6 })), el('button', { type: 'submit', text: 'Show' }));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    location.hash = '#/usage?' + new URLSearchParams({ by: form.by.value, since: form.since.value });
  });
  const tl = await api('GET', '/v1/usage/timeline?' + new URLSearchParams({ by, since }));
  show(el('h1', { text: 'Usage' }), form,
    el('h2', { text: 'Cluster utilisation over time' }), utilisationChart(tl),
    el('h2', { text: 'Over time, by ' + by }), timelineChart(tl),
    el('h2', { text: 'Totals' }), chart(lines),
    el('table', { id: 'usage' }, el('thead', {}, el('tr', {}, [by === 'user' ? 'User' : 'Project', 'Jobs', 'Succeeded', 'Failed', 'Cancelled', 'GPU-hours', 'CPU-hours', 'GPU-hours used', 'CPU-hours used']
      .map((h) => el('th', { text: h })))),
    el('tbody', {}, lines.map((l) => el('tr', {}, el('td', { text: l.name }), el('td', { class: 'num', text: String(l.jobs) }),
      el('td', { class: 'num', text: String(l.succeeded) }), el('td', { class: 'num', text: String(l.failed) }),
      el('td', { class: 'num', text: String(l.cancelled) }), el('td', { class: 'num', text: l.gpu_hours.toFixed(2) }),
      el('td', { class: 'num', text: l.cpu_hours.toFixed(2) }),
      el('td', { class: 'num', text: l.gpu_hours_used === undefined ? '–' : l.gpu_hours_used.toFixed(2) }),
      el('td', { class: 'num', text: l.cpu_hours_used === undefined ? '–' : l.cpu_hours_used.toFixed(4) }))))));
}

const SVG_NS = 'http://www.w3.org/2000/svg';
function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}
const PALETTE = ['#2457c5', '#9a6700', '#1a7f37', '#c0362c', '#8250df', '#0e7490', '#b35900', '#57606a'];

/** Lines over the timeline's periods: `series` is [[label, [value per period]], ...]. */
function lineChart(tl, series, unit, max) {
  const w = 720, h = 220, left = 48, bottom = 24, top = 22;
  const n = tl.periods.length;
  const peak = max || Math.max(1e-9, ...series.flatMap(([, ys]) => ys));
  const x = (i) => left + (n <= 1 ? 0 : (w - left - 8) * i / (n - 1));
  const y = (v) => top + (h - top - bottom) * (1 - v / peak);
  const svg = svgEl('svg', { class: 'chart', width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: 'img' });
  svg.append(svgEl('text', { x: 4, y: top + 4, 'font-size': 11 }, peak.toFixed(peak < 10 ? 2 : 0) + ' ' + unit));
  svg.append(svgEl('text', { x: 4, y: h - bottom, 'font-size': 11 }, '0'));
  svg.append(svgEl('text', { x: left, y: h - 6, 'font-size': 11 }, when(tl.periods[0] && tl.periods[0].start)));
  svg.append(svgEl('text', { x: w - 8, y: h - 6, 'font-size': 11, 'text-anchor': 'end' }, 'now'));
  series.forEach(([label, ys], k) => {
    const color = PALETTE[k % PALETTE.length];
    svg.append(svgEl('polyline', { fill: 'none', stroke: color, 'stroke-width': 2,
      points: ys.map((v, i) => x(i).toFixed(1) + ',' + y(v).toFixed(1)).join(' ') }));
    svg.append(svgEl('text', { x: left + 10 + 110 * k, y: 14, fill: color, 'font-size': 12 }, '■ ' + label));
  });
  return svg;
}

/** Allocated GPUs and CPUs as a share of the cluster's, per period. */
function utilisationChart(tl) {
  const hours = tl.step_secs / 3600;
  const share = (used, total) => (total > 0 ? 100 * used / (total * hours) : 0);
  const series = [['CPUs', tl.periods.map((p) => share(p.cpu_hours, tl.cpus_total))]];
  if (tl.gpus_total > 0) series.unshift(['GPUs', tl.periods.map((p) => share(p.gpu_hours, tl.gpus_total))]);
  return lineChart(tl, series, '%', 100);
}

/** GPU-hours (CPU-hours on a cluster without GPUs) per user or project, per period. */
function timelineChart(tl) {
  const key = tl.gpus_total > 0 ? 'gpu_hours' : 'cpu_hours';
  const totals = {};
  for (const p of tl.periods) for (const [name, h] of Object.entries(p.by)) totals[name] = (totals[name] || 0) + h[key];
  const names = Object.keys(totals).sort((a, b) => totals[b] - totals[a]).slice(0, 6);
  const series = names.map((name) => [name, tl.periods.map((p) => (p.by[name] ? p.by[name][key] : 0))]);
  if (!series.length) return el('p', { class: 'muted', text: 'Nothing ran in this period.' });
  return lineChart(tl, series, key === 'gpu_hours' ? 'GPU-h' : 'CPU-h');
}

/** GPU-hours and CPU-hours per name as horizontal bars (SVG built node by node). */
function chart(lines) {
  const top = lines.slice(0, 12);
  const max = Math.max(1e-9, ...top.map((l) => Math.max(l.gpu_hours, l.cpu_hours)));
  const h = 24 + top.length * 30;
  const svg = svgEl('svg', { class: 'chart', width: 720, height: h, viewBox: '0 0 720 ' + h, role: 'img', 'aria-label': 'usage chart' });
  svg.append(svgEl('text', { x: 160, y: 16, fill: '#2457c5', 'font-size': 12 }, '■ GPU-hours'), svgEl('text', { x: 260, y: 16, fill: '#9a6700', 'font-size': 12 }, '■ CPU-hours'));
  top.forEach((l, i) => {
    const y = 24 + i * 30;
    svg.append(svgEl('text', { x: 4, y: y + 17, 'font-size': 12 }, l.name));
    svg.append(svgEl('rect', { x: 160, y: y + 3, height: 11, width: Math.max(1, 540 * l.gpu_hours / max), fill: '#2457c5' }));
    svg.append(svgEl('rect', { x: 160, y: y + 15, height: 11, width: Math.max(1, 540 * l.cpu_hours / max), fill: '#9a6700' }));
  });
  return svg;
}

// The Submit page (`submitView`) is in submit.js.

// ---- admin ----------------------------------------------------------------------------------

async function adminView() {
  if (S.role !== 'admin') return show(el('h1', { text: 'Admins only' }), el('p', { text: 'This page is for admins.' }));
  const [users, projects, tokens, quotas, audit] = await Promise.all([api('GET', '/v1/admin/users'), api('GET', '/v1/projects'),
    api('GET', '/v1/tokens?all=true'), api('GET', '/v1/quotas'), api('GET', '/v1/admin/audit?limit=100')]);
  const table = (id, heads, rows) => el('table', { id }, el('thead', {}, el('tr', {}, heads.map((h) => el('th', { text: h })))),
    el('tbody', {}, rows.map((r) => el('tr', {}, r.map((c) => el('td', { text: c === null || c === undefined ? '' : String(c) }))))));
  show(el('h1', { text: 'Admin' }),
    el('h2', { text: 'Users' }), table('users', ['User', 'Role', 'Disabled', 'Projects', 'Created'],
      users.map((u) => [u.name, u.role, u.disabled ? 'yes' : '', u.projects.join(', '), when(u.created_at)])),
    el('h2', { text: 'Projects' }), table('projects', ['Project', 'Members', 'Created'],
      projects.map((p) => [p.name, p.members.join(', '), when(p.created_at)])),
    el('h2', { text: 'Quotas' }), table('quotas', ['Kind', 'Name', 'Limits', 'GPUs used', 'CPUs used', 'Running', 'Pending'],
      quotas.map((q) => [q.kind, q.name, JSON.stringify(q.limits), q.used_gpu_milli / 1000, q.used_cpu_milli / 1000, q.running_jobs, q.pending_jobs])),
    el('h2', { text: 'Tokens' }), table('tokens', ['ID', 'User', 'Label', 'Created', 'Expires', 'Revoked', 'Last used'],
      tokens.map((t) => [t.id, t.user, t.label, when(t.created_at), when(t.expires_at), when(t.revoked_at), when(t.last_used_at)])),
    el('h2', { text: 'Audit log' }), table('audit', ['When', 'Who', 'Action', 'Target', 'Detail'],
      audit.map((a) => [when(a.at), a.actor, a.action, a.target, a.detail])));
}

document.addEventListener('DOMContentLoaded', boot);
