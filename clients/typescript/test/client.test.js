// @jaild/client against a real daemon: $JAILD_SOCKET names it
// (tests/clients_test.go starts one and runs `node --test` on the package
// npm packed and installed). Without a daemon every test fails.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, JaildError } from '@jaild/client';

const client = () => new Client({ socket: process.env.JAILD_SOCKET });

test('execute print(1)', async () => {
  const r = await client().execute('print(1)');
  assert.equal(r.status, 'ok');
  assert.equal(r.exit_code, 0);
  assert.equal(r.stdout, '1\n');
  assert.ok(r.usage.duration_ms > 0);
});

test('a failing run is a result', async () => {
  const r = await client().execute({ code: 'x = 1\n1 / 0\n', limits: { timeout_ms: 10000 } });
  assert.equal(r.status, 'error');
  assert.deepEqual([r.error.type, r.error.line], ['ZeroDivisionError', 2]);
});

test('a refusal is a JaildError naming the field', async () => {
  await assert.rejects(client().execute({ code: 'print(1)', limits: { timeout_ms: -5 } }), (e) => {
    assert.ok(e instanceof JaildError);
    assert.deepEqual([e.status, e.type, e.field], [400, 'invalid_argument', 'limits.timeout_ms']);
    return true;
  });
});

test('files in and out, rich outputs', async () => {
  const r = await client().execute({
    code: "open('out.txt', 'w').write(open('in.txt').read().upper())\nclass H:\n    def _repr_html_(self): return '<b>h</b>'\ndisplay(H())\n6 * 7\n",
    files: [{ path: 'in.txt', content: 'hello' }],
    return_files: ['out.txt'],
    last_line_interactive: true,
  });
  assert.equal(Buffer.from(r.files[0].content_b64, 'base64').toString(), 'HELLO');
  assert.deepEqual(r.outputs.map((o) => o.output_type), ['display_data', 'execute_result']);
  assert.equal(r.outputs[0].data['text/html'], '<b>h</b>');
  assert.equal(r.result, '42');
});

test('a stream as an async iterator', async () => {
  const events = [];
  for await (const ev of client().executeStream('import time\nprint(1)\ntime.sleep(0.3)\nprint(2)\n')) events.push(ev);
  assert.equal(events[0].event, 'start');
  assert.equal(events.at(-1).event, 'done');
  assert.deepEqual(events.map((e) => e.id), events.map((_, i) => i + 1));
  assert.equal(events.filter((e) => e.event === 'stdout').map((e) => e.data.text).join(''), '1\n2\n');
  assert.equal(events.at(-1).data.status, 'ok');
});

test('a session keeps state, runs commands, and is deleted', async () => {
  const c = client();
  const s = await c.createSession();
  try {
    await s.execute('x = 41');
    const r = await s.execute({ code: 'x + 1', last_line_interactive: true });
    assert.deepEqual([r.result, r.execution_count, r.session.state], ['42', 2, 'idle']);
    const cmd = await s.runCommand('echo hi');
    assert.deepEqual([cmd.exit_code, cmd.stdout], [0, 'hi\n']);
    const events = [];
    for await (const ev of s.executeStream("print('streamed')")) events.push(ev);
    assert.equal(events.at(-1).data.execution_count, 3);
  } finally {
    await s[Symbol.asyncDispose]();
  }
  assert.equal((await c.getSession(s.id)).state, 'ended');
});

test('the file store', async () => {
  const c = client();
  const f = await c.upload('a,b\n1,2\n', 'data.csv');
  assert.deepEqual([f.name, f.size_bytes], ['data.csv', 8]);
  assert.ok((await c.files()).some((x) => x.file_id === f.file_id));
  const r = await c.execute({ code: "print(open('data.csv').read(), end='')", files: [{ path: 'data.csv', file_id: f.file_id }] });
  assert.equal(r.stdout, 'a,b\n1,2\n');
  assert.equal((await c.download(f.file_id)).toString(), 'a,b\n1,2\n');
  await c.deleteFile(f.file_id);
  await assert.rejects(c.download(f.file_id), (e) => e.status === 404);
});

test('the daemon, and one that is not there', async () => {
  assert.equal((await client().health()).status, 'ok');
  assert.ok((await client().images()).length > 0);
  await assert.rejects(new Client({ socket: '/nonexistent/jaild.sock' }).health(), (e) => e.type === 'unavailable' && e.status === 0);
});
