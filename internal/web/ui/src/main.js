// The playground: a CodeMirror editor whose code runs, lints and formats
// in jaild through jailctl web's /api/, and the API reference.
import { basicSetup } from 'codemirror';
import { python } from '@codemirror/lang-python';
import { lintGutter, setDiagnostics } from '@codemirror/lint';
import { EditorSelection, StateEffect, StateField } from '@codemirror/state';
import { Decoration, EditorView, keymap } from '@codemirror/view';

import { renderReference } from './apiref.js';
import { openTerminal } from './terminal.js';
import { h } from './dom.js';
import './style.css';

const token = document.querySelector('meta[name="jaild-token"]').content;
const $ = (id) => document.getElementById(id);

const sample = `import matplotlib.pyplot as plt
import numpy as np

x = np.linspace(0, 2 * np.pi, 200)
plt.plot(x, np.sin(x), label="sin")
plt.plot(x, np.cos(x), label="cos")
plt.legend()
plt.title("Hello from a jail")
plt.show()

print("sum of squares:", sum(i * i for i in range(10)))
`;

// api calls jailctl web's API; an error response becomes an Error with
// the daemon's type and message.
async function api(method, path, body) {
  const init = { method, headers: { 'X-Jaild-Token': token } };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const resp = await fetch('/api/' + path, init);
  let data = null;
  try {
    data = await resp.json();
  } catch {
    // not JSON: reported below by status
  }
  if (!resp.ok) {
    const e = data && data.error;
    throw new Error(e ? `${e.type}: ${e.message}` : `HTTP ${resp.status}`);
  }
  return data;
}

// The line of the last run's exception, marked until the next run.
const markException = StateEffect.define();
const exceptionLine = StateField.define({
  create: () => Decoration.none,
  update(deco, tr) {
    deco = deco.map(tr.changes);
    for (const e of tr.effects) {
      if (!e.is(markException)) continue;
      deco = Decoration.none;
      const { line, title } = e.value ?? {};
      if (line >= 1 && line <= tr.state.doc.lines) {
        const from = tr.state.doc.line(line).from;
        deco = Decoration.set([Decoration.line({ class: 'cm-exception-line', attributes: { title } }).range(from)]);
      }
    }
    return deco;
  },
  provide: (f) => EditorView.decorations.from(f),
});

const view = new EditorView({
  parent: $('editor'),
  doc: sample,
  extensions: [
    keymap.of([{ key: 'Mod-Enter', run: () => (run(), true) }]),
    basicSetup,
    python(),
    lintGutter(),
    exceptionLine,
    EditorView.theme({ '&': { height: '100%' }, '.cm-scroller': { fontFamily: 'var(--mono)' } }),
  ],
});

function goToLine(n) {
  if (n < 1 || n > view.state.doc.lines) return;
  const line = view.state.doc.line(n);
  view.dispatch({ selection: EditorSelection.cursor(line.from), scrollIntoView: true });
  view.focus();
}

function show(id, text) {
  const el = $(id);
  el.textContent = text;
  el.hidden = !text;
  const head = document.querySelector(`h2[data-for="${id}"]`);
  if (head) head.hidden = !text;
}

function setStatus(text, cls = '') {
  const el = $('status');
  el.textContent = text;
  el.className = 'status ' + cls;
}

function clearOutput() {
  show('stdout', '');
  show('stderr', '');
  $('exception').hidden = true;
  $('diagnostics').hidden = true;
  $('figures').replaceChildren();
  $('outputs').replaceChildren();
  $('files').replaceChildren();
  view.dispatch({ effects: markException.of(null) });
}

let busy = false;
async function busyWith(label, fn) {
  if (busy) return;
  busy = true;
  for (const b of document.querySelectorAll('.toolbar button')) b.disabled = true;
  setStatus(label, 'muted');
  try {
    await fn();
  } catch (err) {
    setStatus(err.message, 'bad');
  } finally {
    busy = false;
    for (const b of document.querySelectorAll('.toolbar button')) b.disabled = false;
  }
}

function limits() {
  const l = {};
  const t = $('timeout').value;
  const m = $('memory').value;
  if (t) l.timeout_ms = Number(t);
  if (m) l.memory_mb = Number(m);
  return l;
}

function run() {
  return busyWith('Running…', async () => {
    clearOutput();
    view.dispatch(setDiagnostics(view.state, []));
    const req = { code: view.state.doc.toString(), limits: limits() };
    const patterns = $('return').value.split(',').map((s) => s.trim()).filter(Boolean);
    if (patterns.length) req.return_files = patterns;
    const r = await api('POST', 'execute', req);
    const parts = [r.status, `${r.usage.duration_ms} ms`];
    if (r.exit_code !== null) parts.push(`exit ${r.exit_code}`);
    if (r.signal !== null) parts.push(`signal ${r.signal}`);
    if (r.usage.warm) parts.push('warm');
    setStatus(parts.join(' · ') + (r.message ? ` — ${r.message}` : ''), r.status === 'ok' ? 'good' : 'bad');
    show('stdout', r.stdout + (r.stdout_truncated ? '\n[truncated]' : ''));
    show('stderr', r.stderr + (r.stderr_truncated ? '\n[truncated]' : ''));
    if (r.error) {
      const where = r.error.line ? ` (line ${r.error.line})` : '';
      const box = $('exception');
      box.replaceChildren(h('strong', {}, r.error.type), `: ${r.error.message}${where}`);
      box.hidden = false;
      box.onclick = () => r.error.line && goToLine(r.error.line);
      view.dispatch({ effects: markException.of({ line: r.error.line, title: `${r.error.type}: ${r.error.message}` }) });
    }
    const figures = new Set((r.figures ?? []).map((f) => f.content_b64));
    for (const o of r.outputs ?? []) {
      if (!figures.has(o.data['image/png'])) $('outputs').append(outputItem(o));
    }
    for (const f of r.figures ?? []) {
      $('figures').append(h('figure', {}, h('img', { src: 'data:image/png;base64,' + f.content_b64, alt: f.name }), h('figcaption', {}, f.name)));
    }
    for (const f of r.files ?? []) $('files').append(fileItem(f));
  });
}

// outputItem shows one rich output: HTML in an iframe sandboxed without
// scripts or the page's origin, images inline, text as text.
function outputItem(o) {
  const d = o.data;
  const box = h('div', { class: 'output', 'data-type': o.output_type });
  if (typeof d['text/html'] === 'string') {
    box.append(h('iframe', { sandbox: '', srcdoc: d['text/html'], title: 'HTML output', referrerpolicy: 'no-referrer' }));
  } else if (typeof d['image/png'] === 'string' || typeof d['image/jpeg'] === 'string') {
    const type = typeof d['image/png'] === 'string' ? 'image/png' : 'image/jpeg';
    box.append(h('img', { src: `data:${type};base64,${d[type]}`, alt: d['text/plain'] ?? type }));
  } else if (typeof d['image/svg+xml'] === 'string') {
    const url = URL.createObjectURL(new Blob([d['image/svg+xml']], { type: 'image/svg+xml' }));
    box.append(h('img', { src: url, alt: d['text/plain'] ?? 'SVG' }));
  } else {
    const text = d['text/markdown'] ?? d['text/latex'] ?? (d['application/json'] !== undefined ? JSON.stringify(d['application/json'], null, 2) : d['text/plain']);
    box.append(h('pre', {}, String(text ?? '')));
  }
  return box;
}

function fileItem(f) {
  const size = `${f.size_bytes} bytes`;
  if (f.error) return h('li', { class: 'bad' }, `${f.path}: ${f.error}`);
  if (f.file_id) return h('li', {}, `${f.path} (${size}) stored as ${f.file_id}`);
  const bytes = Uint8Array.from(atob(f.content_b64 ?? ''), (c) => c.charCodeAt(0));
  const url = URL.createObjectURL(new Blob([bytes], { type: 'application/octet-stream' }));
  return h('li', {}, h('a', { href: url, download: f.path.split('/').pop() }, f.path), ` (${size})`);
}

// pos is the document offset of a ruff location (1-based line and column).
function pos(loc) {
  const n = Math.min(Math.max(loc.line, 1), view.state.doc.lines);
  const line = view.state.doc.line(n);
  return Math.min(line.from + Math.max(loc.column - 1, 0), line.to);
}

function lint() {
  return busyWith('Linting…', async () => {
    const r = await api('POST', 'lint', { code: view.state.doc.toString() });
    const diags = r.diagnostics.map((d) => {
      const from = pos(d.location);
      let to = pos(d.end_location);
      if (to <= from) to = Math.min(from + 1, view.state.doc.length);
      return { from, to, severity: d.code === 'invalid-syntax' ? 'error' : 'warning', source: d.code, message: d.message };
    });
    view.dispatch(setDiagnostics(view.state, diags));
    const list = $('diagnostics');
    list.replaceChildren(
      ...r.diagnostics.map((d) =>
        h('div', { class: 'diag', onclick: () => goToLine(d.location.line) }, h('code', {}, `${d.location.line}:${d.location.column}`), ' ', h('strong', {}, d.code), ' ', d.message),
      ),
    );
    list.hidden = r.diagnostics.length === 0;
    const n = r.diagnostics.length;
    setStatus(n ? `${n} finding${n > 1 ? 's' : ''}` : 'No findings', n ? 'bad' : 'good');
  });
}

function format() {
  return busyWith('Formatting…', async () => {
    const r = await api('POST', 'format', { code: view.state.doc.toString() });
    if (r.changed) {
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: r.code } });
      $('diagnostics').hidden = true; // their lines are gone
    }
    setStatus(r.changed ? 'Formatted' : 'Already formatted', 'good');
  });
}

$('run').onclick = run;
$('lint').onclick = lint;
$('format').onclick = format;

// Tabs: the reference is fetched when first shown; the terminal opens
// when its tab is shown (again after its shell ended) and closes when
// another tab is.
let reference = null;
let closeTerminal = null;
$('term-new').onclick = () => {
  if (closeTerminal) closeTerminal();
  closeTerminal = openTerminal($('terminal'), $('term-status'), token);
};
for (const tab of document.querySelectorAll('.tab')) {
  tab.onclick = () => {
    for (const t of document.querySelectorAll('.tab')) t.setAttribute('aria-selected', String(t === tab));
    $('play').hidden = tab.dataset.tab !== 'play';
    $('ref').hidden = tab.dataset.tab !== 'ref';
    $('term').hidden = tab.dataset.tab !== 'term';
    if (tab.dataset.tab === 'term' && !closeTerminal) {
      closeTerminal = openTerminal($('terminal'), $('term-status'), token);
    } else if (tab.dataset.tab !== 'term' && closeTerminal) {
      closeTerminal();
      closeTerminal = null;
    }
    if (tab.dataset.tab === 'ref' && !reference) {
      reference = api('GET', 'openapi.json')
        .then((doc) => renderReference($('ref'), doc))
        .catch((err) => {
          reference = null;
          $('ref').replaceChildren(h('p', { class: 'bad' }, `The API reference: ${err.message}`));
        });
    }
  };
}

// The daemon's version and limits: defaults as placeholders, maxima as
// bounds.
api('GET', 'info')
  .then((info) => {
    $('daemon').textContent = `jaild ${info.version} · Python ${info.rootfs.python_version} · uid ${info.caller.uid}`;
    for (const [id, key] of [['timeout', 'timeout_ms'], ['memory', 'memory_mb']]) {
      $(id).placeholder = String(info.default_limits[key]);
      $(id).max = String(info.max_limits[key]);
    }
  })
  .catch((err) => setStatus(err.message, 'bad'));
