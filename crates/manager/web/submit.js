// berth dashboard: the Submit page. The form builds a job spec as `berth submit` would (name,
// command, working directory, Python environment, data folders, variables, resources) and,
// while it is being filled in, shows what the job will see: the manager's dry run
// (POST /v1/jobs/preview) checks the spec exactly as a submit would and answers with the
// spec as completed, the Unix user the job runs as and its environment, or the submit's own
// 4xx message. Uses app.js's helpers (el, api, show, ...); everything is written as text.
'use strict';

/** The Submit page. */
async function submitView() {
  const [queues, folders] = await Promise.all([api('GET', '/v1/queues'),
    api('GET', '/v1/folders').catch(() => [])]);
  const runAs = S.runAs || {};
  const f = (label, input, hint) => el('label', {}, label, input, hint ? el('span', { class: 'hint', text: hint }) : null);
  const command = el('textarea', { name: 'command', required: true, rows: 3, placeholder: 'echo "hello from $(hostname)"' });
  const home = runAs.home_exists ? runAs.home : '';
  const workdir = el('input', { name: 'workdir', value: home, placeholder: "a new directory of the job's own", size: 40 });
  const python = el('input', { name: 'python', placeholder: 'none (e.g. 3.11)', size: 10 });
  const folderBoxes = folders.map((x) => {
    const name = x.project ? x.project + '/' + x.name : x.name;
    const ro = x.access === 'read-only';
    return el('label', { class: 'check' }, el('input', { type: 'checkbox', name: 'folder', value: name, 'data-ro': ro ? 'true' : null }),
      name + ' at /data/' + x.name + (ro ? ' (read-only)' : ''));
  });
  const form = el('form', { id: 'submit-form' },
    el('fieldset', {}, el('legend', { text: 'What to run' }),
      el('div', { class: 'form-grid' }, f('Name', el('input', { name: 'name', placeholder: 'job-ID' }))),
      f('Command (run by /bin/sh -c in the working directory)', command),
      f('Working directory', workdir, home ? 'your home on the nodes; empty: a new directory of the job\'s own'
        : 'absolute; empty: a new directory of the job\'s own (also its HOME)')),
    el('fieldset', {}, el('legend', { text: 'Environment' }),
      el('div', { class: 'form-grid' }, f('Python version', python, 'built with uv on each node, its bin first on PATH')),
      f('Requirements (requirements.txt)', el('textarea', { name: 'requirements', rows: 3, placeholder: 'numpy\ntorch==2.4.1' })),
      folderBoxes.length ? el('div', { class: 'folders' }, el('span', { class: 'hint', text: 'Data folders to mount' }), folderBoxes)
        : el('p', { class: 'hint', text: 'No data folders (berth folder create) to mount.' }),
      f('Variables (NAME=value, one a line)', el('textarea', { name: 'env', rows: 2, placeholder: 'EPOCHS=10' }),
        'the dashboard has no shell to pass variables on from: set here what the job needs')),
    el('fieldset', {}, el('legend', { text: 'Resources' }),
      el('div', { class: 'form-grid' },
        f('Queue', el('select', { name: 'queue' }, queues.map((q) => el('option', { value: q.name, text: q.name })))),
        f('Project', el('input', { name: 'project', placeholder: 'your own account' })),
        f('CPUs', el('input', { name: 'cpus', type: 'number', min: '0', step: 'any', value: '1' })),
        f('Memory (GiB)', el('input', { name: 'mem', type: 'number', min: '0', step: 'any', value: '1' })),
        f('GPUs', el('input', { name: 'gpus', type: 'number', min: '0', step: 'any', value: '0' })),
        f('Time limit', el('input', { name: 'limit', placeholder: 'e.g. 30m, 2h, 1h30m' }), 'a number is minutes'))),
    el('p', {}, el('button', { type: 'submit', text: 'Submit' })));
  const out = el('div', { id: 'submit-result' });
  const preview = el('section', { id: 'submit-preview' });

  // `form.name` would be the form's own name: read the controls through `elements`.
  const v = (n) => form.elements.namedItem(n).value;
  const spec = () => buildSpec(v, [...form.querySelectorAll('input[name=folder]:checked')]);
  let seq = 0;
  let timer = null;
  const refresh = async () => {
    const mine = ++seq;
    if (!v('command').trim()) {
      preview.replaceChildren(el('h2', { text: 'What the job will see' }),
        el('p', { class: 'muted', text: 'Write a command to see what the job will run, where, as whom and with what.' }));
      return;
    }
    let body;
    try { body = await api('POST', '/v1/jobs/preview', { spec: spec() }); }
    catch (e) {
      if (mine === seq && !(e instanceof ApiError && e.status === 401)) {
        preview.replaceChildren(el('h2', { text: 'What the job will see' }), errorBox(e.message));
      }
      return;
    }
    if (mine === seq) preview.replaceChildren(...previewNodes(body, queues));
  };
  const later = () => { clearTimeout(timer); timer = setTimeout(refresh, 300); };
  form.addEventListener('input', later);
  form.addEventListener('change', later);
  python.addEventListener('input', () => {
    // Examples that work as written: `python` is there only with an environment.
    command.placeholder = python.value.trim() ? 'python -c "import sys; print(sys.version)"' : 'echo "hello from $(hostname)"';
  });
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      const j = await api('POST', '/v1/jobs', { spec: spec() });
      location.hash = '#/jobs/' + j.id;
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) out.replaceChildren(errorBox(e.message));
    }
  });
  show(el('h1', { text: 'Submit a job' }), out, el('div', { class: 'submit-layout' }, form, preview));
  refresh();
}

/** The spec the form describes; throws with what to fix for input the API would not get. */
function buildSpec(v, checkedFolders) {
  const num = (n) => Number(v(n) || 0);
  const env = {};
  v('env').split('\n').forEach((line, i) => {
    if (!line.trim() || line.trim().startsWith('#')) return;
    const at = line.indexOf('=');
    if (at <= 0) throw new Error('variables, line ' + (i + 1) + ': use NAME=value, e.g. EPOCHS=10');
    env[line.slice(0, at).trim()] = line.slice(at + 1);
  });
  const python = v('python').trim();
  const requirements = v('requirements');
  if (!python && requirements.trim()) throw new Error('requirements need a Python version: e.g. 3.11');
  return {
    name: v('name').trim() || null,
    command: ['/bin/sh', '-c', v('command')],
    workdir: v('workdir').trim() || null,
    env,
    environment: python ? { python, kind: 'requirements', contents: requirements } : null,
    folders: checkedFolders.map((c) => ({ folder: c.value, read_only: c.dataset.ro === 'true' })),
    queue: v('queue') || null,
    project: v('project').trim() || null,
    resources: {
      cpu_milli: Math.round(num('cpus') * 1000),
      mem_bytes: Math.round(num('mem') * 1024 * 1024 * 1024),
      gpu_milli: Math.round(num('gpus') * 1000),
    },
    time_limit_secs: parseLimit(v('limit')),
  };
}

/** `30m`, `2h`, `1h30m`, `1d`, or a number of minutes, as seconds; empty: none. */
function parseLimit(text) {
  const t = text.trim();
  if (!t) return null;
  if (/^\d+$/.test(t)) return Number(t) * 60;
  const m = /^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/.exec(t);
  if (!m || !m.slice(1).some(Boolean)) throw new Error('time limit `' + t + '`: use e.g. 30m, 2h or 1h30m (a number is minutes)');
  const [d, h, mi, s] = m.slice(1).map((x) => Number(x || 0));
  return ((d * 24 + h) * 60 + mi) * 60 + s;
}

/** The dry run's answer as the facts of the job-to-be. */
function previewNodes(p, queues) {
  const s = p.spec;
  const q = queues.find((x) => x.name === p.queue);
  const limit = s.time_limit_secs ? duration(s.time_limit_secs)
    : 'none' + (q ? " (the queue plans with " + duration(q.policy.default_time_limit_secs) + ')' : '');
  const who = p.run_as.user + (p.run_as.uid !== undefined ? ' (uid ' + p.run_as.uid + ')' : '');
  const vars = el('table', { class: 'vars', id: 'preview-env' }, el('tbody', {}, p.env.map((x) => el('tr', {},
    el('td', {}, el('code', { text: x.name })),
    x.value !== undefined ? el('td', {}, el('code', { text: x.value })) : el('td', { class: 'muted', text: x.about })))));
  const rows = [
    ['Command', el('pre', { class: 'command', id: 'preview-command', text: shellWords(s.command) })],
    ['Working directory', s.workdir || "a new directory of the job's own on its node"],
    ['Runs as', el('span', {}, el('span', { id: 'preview-user', text: who }), el('br'), el('span', { class: 'hint', text: p.run_as.how }))],
    ['Environment', vars],
    ['Python', s.environment ? 'Python ' + s.environment.python + ', '
      + s.environment.contents.split('\n').filter((l) => l.trim() && !l.trim().startsWith('#')).length + ' requirements' : 'none (the node\'s own)'],
    ['Folders', p.mounts.length ? p.mounts.map((m) => m.folder + ' at ' + m.path + (m.read_only ? ' (read-only)' : '')).join(', ') : 'none'],
    ['Queue', p.queue + (s.project ? ', project ' + s.project : '')],
    ['Resources', resources({ cpu_milli: s.resources.cpu_milli, mem_bytes: s.resources.mem_bytes, gpu_milli: s.resources.gpu_milli })
      + (s.nodes > 1 ? ' × ' + s.nodes + ' nodes' : '')],
    ['Time limit', limit],
  ];
  return [el('h2', { text: 'What the job will see' }), el('dl', { class: 'facts', id: 'preview-facts' },
    rows.flatMap(([k, x]) => [el('dt', { text: k }), el('dd', {}, x)]))];
}
