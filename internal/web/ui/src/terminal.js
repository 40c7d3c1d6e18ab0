// The terminal tab: a shell in a session of its own (jailctl web's
// /api/terminal WebSocket, relaying the daemon's GET
// /v1/sessions/{id}/pty), shown with xterm.js. The session is made when
// the terminal opens and ended when it closes. Binary messages are the
// terminal's bytes both ways; the last text message says how the shell
// ended.
import { Terminal } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';

import { h } from './dom.js';

const cols = 100;
const rows = 30;

// openTerminal opens a terminal in el; status shows its state. It
// returns a function that closes it.
export function openTerminal(el, status, token) {
  const term = new Terminal({ cols, rows, fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, monospace', fontSize: 13, convertEol: false });
  el.replaceChildren();
  term.open(el);
  const url = new URL(`/api/terminal?cols=${cols}&rows=${rows}`, location.href);
  url.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  url.search = `?cols=${cols}&rows=${rows}`;
  const ws = new WebSocket(url, ['jaild-terminal', 'jaild-token.' + token]);
  ws.binaryType = 'arraybuffer';
  status.replaceChildren('Starting a session…');
  status.className = 'status muted';
  const enc = new TextEncoder();
  let ended = false;
  ws.onopen = () => {
    status.replaceChildren('A shell in a session of its own; it ends when you exit or leave this tab.');
    term.focus();
  };
  ws.onmessage = (ev) => {
    if (typeof ev.data !== 'string') {
      term.write(new Uint8Array(ev.data));
      return;
    }
    const m = JSON.parse(ev.data);
    if (m.type === 'exit') {
      ended = true;
      const how = m.signal != null ? `was killed by signal ${m.signal}` : `exited with status ${m.exit_code}`;
      status.replaceChildren(`The shell ${how} (${m.status}); its session has ended.`);
      status.className = 'status ' + (m.status === 'ok' ? 'good' : 'bad');
    } else if (m.type === 'error') {
      status.replaceChildren(h('span', { class: 'bad' }, m.message));
    }
  };
  ws.onclose = (ev) => {
    if (!ended) {
      status.replaceChildren(`The terminal closed${ev.reason ? ': ' + ev.reason : ''}.`);
      status.className = 'status bad';
    }
  };
  term.onData((d) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d));
  });
  term.onBinary((d) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(Uint8Array.from(d, (c) => c.charCodeAt(0)));
  });
  term.onResize(({ cols, rows }) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'resize', cols, rows }));
  });
  return () => {
    ws.close();
    term.dispose();
  };
}
