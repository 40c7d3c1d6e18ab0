// Drives jailctl web's playground in Debian's Chromium: types code, runs
// it and sees the output and an inline figure, an exception's line
// marked, a timeout from the limits, a returned file downloaded, Lint's
// marked line and a syntax error marked as an error, Format's new text,
// the API reference and a shell in the terminal tab; that the browser holds no cookie for the playground
// and that a reload (the token still in the address bar) works; then that
// requests without the token, with a foreign Host or from another origin
// are refused.
//
// Environment: JAILD_WEB_URL (the URL jailctl web printed), CHROMIUM
// (default /usr/bin/chromium), JAILD_WEB_SCREENSHOT (a PNG to write of
// the run with a figure), JAILD_WEB_PROFILE (a fresh user data dir).
// Prints one JSON object of what it saw; exits 1 at the first failed check.
import { readFile } from 'node:fs/promises';
import http from 'node:http';
import { chromium } from 'playwright-core';

const url = process.env.JAILD_WEB_URL;
const origin = new URL(url).origin;
const token = new URL(url).searchParams.get('token');
const seen = {};

function check(ok, what) {
  if (!ok) throw new Error(`check failed: ${what}; seen so far: ${JSON.stringify(seen)}`);
}

const context = await chromium.launchPersistentContext(process.env.JAILD_WEB_PROFILE, {
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1360, height: 820 },
  deviceScaleFactor: 1,
});
context.setDefaultTimeout(60_000);
const page = context.pages()[0] ?? (await context.newPage());
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(String(e)));

// editorText is the editor's document.
const editorText = () => page.evaluate(() => [...document.querySelectorAll('.cm-content .cm-line')].map((l) => l.textContent).join('\n'));

// setCode replaces the editor's text, as typed (insertText: no
// auto-indent of the typed newlines).
async function setCode(code) {
  await page.click('.cm-content');
  await page.keyboard.press('Control+A');
  await page.keyboard.press('Delete');
  await page.keyboard.insertText(code);
  check((await editorText()) === code, 'the editor holds the typed code');
}

// act clicks a toolbar button and waits for the status line to settle.
async function act(button) {
  const before = await page.textContent('#status');
  await page.click(button);
  await page.waitForFunction(
    (prev) => {
      const s = document.getElementById('status');
      return !document.getElementById('run').disabled && s.textContent !== prev;
    },
    before,
  );
  return page.textContent('#status');
}

try {
  const first = await page.goto(url);
  seen.landed = page.url();
  check(first.status() === 200 && first.request().redirectedFrom() === null, `the page is served at once (${first.status()})`);
  check(seen.landed === url, `the token stays in the address bar (landed on ${seen.landed})`);
  await page.waitForFunction(() => document.getElementById('daemon').textContent.startsWith('jaild '));
  seen.daemon = await page.textContent('#daemon');

  // Output and a figure.
  await setCode(`import matplotlib.pyplot as plt
import numpy as np

x = np.linspace(0, 4 * np.pi, 400)
fig, ax = plt.subplots(figsize=(6, 3.4))
y = np.exp(-x / 6) * np.cos(x)
ax.plot(x, np.sin(x), label="sin(x)")
ax.plot(x, y, label="damped cos(x)")
ax.set_title("Drawn in a jail")
ax.legend()
plt.show()

print("samples:", len(x))
print("lowest of the damped cosine:", round(float(y.min()), 3))
`);
  seen.run = await act('#run');
  check(seen.run.startsWith('ok'), `the run is ok (status line "${seen.run}")`);
  seen.stdout = await page.textContent('#stdout');
  check(seen.stdout.includes('lowest of the damped cosine: -0.'), 'stdout is shown');
  await page.waitForFunction(() => {
    const img = document.querySelector('#figures img');
    return img && img.complete;
  });
  seen.figure = await page.evaluate(() => {
    const img = document.querySelector('#figures img');
    return { width: img.naturalWidth, height: img.naturalHeight, png: img.src.startsWith('data:image/png;base64,') };
  });
  check(seen.figure.png && seen.figure.width > 0 && seen.figure.height > 0, 'the figure is a PNG that loaded');
  if (process.env.JAILD_WEB_SCREENSHOT) await page.screenshot({ path: process.env.JAILD_WEB_SCREENSHOT });

  // Rich outputs: a DataFrame's HTML in an iframe sandboxed without
  // scripts, whose script neither runs nor reaches the page; an SVG inline.
  await setCode(`import pandas as pd
display(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}))
display({"text/html": "<p id=x>static</p><script>document.getElementById('x').textContent = 'ran'; parent.document.title = 'pwned'</script>"}, raw=True)
class Dot:
    def _repr_svg_(self):
        return '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><circle cx="5" cy="5" r="4"/></svg>'
display(Dot())
`);
  seen.richRun = await act('#run');
  check(seen.richRun.startsWith('ok'), `the rich run is ok ("${seen.richRun}")`);
  await page.waitForFunction(() => document.querySelectorAll('#outputs iframe').length === 2 && document.querySelector('#outputs img')?.complete);
  const srcdocFrames = await Promise.all((await page.$$('#outputs iframe')).map((el) => el.contentFrame()));
  await Promise.all(srcdocFrames.map((f) => f.waitForLoadState()));
  seen.rich = {
    sandboxes: await page.evaluate(() => [...document.querySelectorAll('#outputs iframe')].map((f) => f.getAttribute('sandbox'))),
    rows: await srcdocFrames[0].locator('tr').count(),
    scriptText: await srcdocFrames[1].textContent('#x'),
    title: await page.title(),
    svg: await page.evaluate(() => document.querySelector('#outputs img').naturalWidth),
  };
  check(seen.rich.sandboxes.length === 2 && seen.rich.sandboxes.every((v) => v === ''), 'HTML outputs are in iframes sandboxed without permissions');
  check(seen.rich.rows === 3, 'the DataFrame renders as a table of a header and two rows');
  check(seen.rich.scriptText === 'static' && seen.rich.title !== 'pwned', 'a script in an HTML output does not run');
  check(seen.rich.svg === 10, 'the SVG renders inline');

  // An exception: its line is marked.
  await setCode('total = 0\nfor n in range(3):\n    total += 10 / (2 - n)\nprint(total)\n');
  seen.exceptionRun = await act('#run');
  check(seen.exceptionRun.startsWith('error'), `the run ends in error ("${seen.exceptionRun}")`);
  seen.exception = await page.textContent('#exception');
  check(seen.exception.includes('ZeroDivisionError') && seen.exception.includes('line 3'), 'the exception is shown with its line');
  seen.markedLines = await page.evaluate(() =>
    [...document.querySelectorAll('.cm-content .cm-line')].flatMap((l, i) => (l.classList.contains('cm-exception-line') ? [i + 1] : [])));
  check(JSON.stringify(seen.markedLines) === '[3]', 'line 3, and only it, is marked in the editor');

  // The limits: a timeout of 1000 ms ends a loop.
  await setCode('while True:\n    pass\n');
  await page.fill('#timeout', '1000');
  seen.timeoutRun = await act('#run');
  check(seen.timeoutRun.startsWith('timeout'), `the loop times out ("${seen.timeoutRun}")`);
  await page.fill('#timeout', '');

  // Returned files: a link that downloads the file's bytes.
  await setCode('with open("table.csv", "w") as f:\n    f.write("n,square\\n3,9\\n")\n');
  await page.fill('#return', '*.csv');
  seen.filesRun = await act('#run');
  const [download] = await Promise.all([page.waitForEvent('download'), page.click('#files a[download]')]);
  seen.file = { name: download.suggestedFilename(), text: await readFile(await download.path(), 'utf8') };
  check(seen.file && seen.file.name === 'table.csv' && seen.file.text === 'n,square\n3,9\n', 'table.csv is offered for download');
  await page.fill('#return', '');

  // Lint: the unused import's line is marked, in the gutter and the text.
  await setCode('import os\nimport sys\n\nARGS = sys.argv\n');
  seen.lint = await act('#lint');
  await page.waitForSelector('.cm-lint-marker');
  seen.lintMarks = await page.evaluate(() => {
    const lines = [...document.querySelectorAll('.cm-content .cm-line')];
    return {
      ranges: [...document.querySelectorAll('.cm-lintRange')].map((r) => ({ line: lines.indexOf(r.closest('.cm-line')) + 1, text: r.textContent })),
      gutter: document.querySelectorAll('.cm-gutter-lint .cm-lint-marker').length,
      list: document.getElementById('diagnostics').textContent,
    };
  });
  check(seen.lint === '1 finding', `one finding ("${seen.lint}")`);
  check(seen.lintMarks.ranges.length === 1 && seen.lintMarks.ranges[0].line === 1 && seen.lintMarks.ranges[0].text === 'os', 'line 1\'s "os" is marked');
  check(seen.lintMarks.gutter === 1 && seen.lintMarks.list.includes('F401'), 'one gutter marker, F401 listed');

  // A syntax error is marked as an error, not a warning.
  await setCode('def f(:\n    pass\n');
  seen.syntaxLint = await act('#lint');
  await page.waitForSelector('.cm-lint-marker');
  seen.syntaxMarks = await page.evaluate(() => ({
    errors: document.querySelectorAll('.cm-lintRange-error').length,
    warnings: document.querySelectorAll('.cm-lintRange-warning').length,
    list: document.getElementById('diagnostics').textContent,
  }));
  check(seen.syntaxMarks.list.includes('invalid-syntax') && seen.syntaxMarks.errors > 0, 'the syntax error is marked as an error');

  // Format: the editor's text is replaced.
  await setCode('x=[1,2,\n  3]\nprint( x )\n');
  seen.format = await act('#format');
  seen.formatted = await editorText();
  check(seen.format === 'Formatted' && seen.formatted === 'x = [1, 2, 3]\nprint(x)\n', 'Format rewrites the code');

  // The API reference from the daemon's OpenAPI document.
  await page.click('.tab[data-tab="ref"]');
  await page.waitForSelector('#ref .op, #ref .bad');
  seen.reference = await page.evaluate(() => ({
    error: document.querySelector('#ref .bad')?.textContent ?? null,
    ops: [...document.querySelectorAll('#ref .op summary')].map((s) => s.textContent.replace(/\s+/g, ' ').trim()),
    schemas: document.querySelectorAll('#ref .schema').length,
    editorShown: getComputedStyle(document.getElementById('play')).display !== 'none',
  }));
  check(!seen.reference.editorShown, 'the reference replaces the editor');
  check(seen.reference.error === null, 'the reference renders');
  check(seen.reference.ops.some((o) => o.startsWith('POST /v1/execute')) && seen.reference.schemas > 0, 'it lists POST /v1/execute and schemas');
  await page.click('.tab[data-tab="play"]');

  // The terminal tab: a shell in a session of its own, typed into as a
  // person types (xterm.js's keyboard input), its output read from the
  // rendered rows; exit ends it with its status shown.
  await page.click('.tab[data-tab="term"]');
  await page.waitForFunction(() => document.getElementById('term-status').textContent.startsWith('A shell'));
  const rowsText = () => page.evaluate(() => document.querySelector('#terminal .xterm-rows')?.textContent ?? '');
  await page.waitForFunction(() => /[$#] *$/.test((document.querySelector('#terminal .xterm-rows')?.innerText ?? '').trimEnd()));
  await page.click('#terminal');
  await page.keyboard.type('echo m$((6*7)) $TERM');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => (document.querySelector('#terminal .xterm-rows')?.textContent ?? '').includes('m42 xterm-256color'));
  await page.keyboard.type('sleep 300; echo n$((2+2))');
  await page.keyboard.press('Enter');
  await page.waitForTimeout(500);
  await page.keyboard.press('Control+C');
  await page.keyboard.type('echo m$((3+3))');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => (document.querySelector('#terminal .xterm-rows')?.textContent ?? '').includes('m6'));
  seen.terminal = { text: await rowsText() };
  check(!seen.terminal.text.includes('n4'), 'Ctrl-C interrupted the foreground job');
  await page.keyboard.type('exit 3');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.getElementById('term-status').textContent.includes('exited with status 3'));
  seen.terminal.status = await page.textContent('#term-status');
  seen.terminal.text = await rowsText();
  await page.click('.tab[data-tab="play"]');

  // No cookie: browsers send a host's cookies to its every port, so one
  // would give the token to every other server on 127.0.0.1.
  seen.cookies = await context.cookies();
  check(seen.cookies.length === 0, `the browser holds no cookie (${JSON.stringify(seen.cookies)})`);

  // A reload: the token is still in the URL, and the page works again.
  const again = await page.reload();
  seen.reload = { status: again.status(), url: page.url() };
  check(seen.reload.status === 200 && seen.reload.url === url, `the reload serves the page (${JSON.stringify(seen.reload)})`);
  await page.waitForFunction(() => document.getElementById('daemon').textContent.startsWith('jaild '));
  await setCode('print(6 * 7)\n');
  seen.reloadRun = await act('#run');
  seen.reloadStdout = await page.textContent('#stdout');
  check(seen.reloadRun.startsWith('ok') && seen.reloadStdout === '42\n', `a run after the reload ("${seen.reloadRun}", ${JSON.stringify(seen.reloadStdout)})`);
  check((await context.cookies()).length === 0, 'still no cookie after the reload');
  check(pageErrors.length === 0, `no errors in the page: ${pageErrors}`);
} finally {
  await context.close();
}

// request sends one request with raw headers (fetch will not set Host).
function request(method, path, headers, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(origin + path, { method, headers }, (res) => {
      let data = '';
      res.on('data', (c) => (data += c));
      res.on('end', () => resolve({ status: res.statusCode, type: JSON.parse(data).error?.type }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

const json = { 'Content-Type': 'application/json' };
const upgrade = { Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': 'dGhlIHNhbXBsZSBub25jZQ==' };
const code = JSON.stringify({ code: 'print(1)' });
seen.refusals = {
  withToken: await request('POST', '/api/lint', { ...json, 'X-Jaild-Token': token }, code),
  noToken: await request('POST', '/api/lint', json, code),
  wrongToken: await request('POST', '/api/lint', { ...json, 'X-Jaild-Token': '0'.repeat(64) }, code),
  pageNoToken: await request('GET', '/', {}),
  pageWrongToken: await request('GET', `/?token=${'0'.repeat(64)}`, {}),
  foreignHost: await request('POST', '/api/lint', { ...json, 'X-Jaild-Token': token, Host: 'evil.example.com' }, code),
  crossOrigin: await request('POST', '/api/lint', { ...json, 'X-Jaild-Token': token, Origin: 'http://evil.example.com' }, code),
  terminalNoToken: await request('GET', '/api/terminal', { ...upgrade, 'Sec-WebSocket-Protocol': 'jaild-terminal' }),
  terminalWrongToken: await request('GET', '/api/terminal', { ...upgrade, 'Sec-WebSocket-Protocol': `jaild-terminal, jaild-token.${'0'.repeat(64)}` }),
  terminalCrossOrigin: await request('GET', '/api/terminal', { ...upgrade, 'Sec-WebSocket-Protocol': `jaild-terminal, jaild-token.${token}`, Origin: 'http://evil.example.com' }),
};
check(seen.refusals.withToken.status === 200, 'the token is accepted');
for (const k of ['noToken', 'wrongToken', 'pageNoToken', 'pageWrongToken', 'foreignHost', 'crossOrigin', 'terminalNoToken', 'terminalWrongToken', 'terminalCrossOrigin']) {
  check(seen.refusals[k].status === 403 && seen.refusals[k].type === 'forbidden', `${k} is refused with 403 forbidden`);
}
console.log(JSON.stringify(seen));
