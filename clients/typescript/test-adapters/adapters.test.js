// The adapters with the real SDKs, driven by their own test models: the
// model's tool call runs in a real jaild session ($JAILD_SOCKET), and the
// tool's output reaches the model's next request.
// (tests/clients_test.go installs the packed client, ai and @openai/agents.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@jaild/client';

const client = () => new Client({ socket: process.env.JAILD_SOCKET });
const code1 = 'import sys\nsecret = sum(range(10))\nprint("py", sys.version_info[0])\nsecret';
const code2 = 'secret * 2';

test('Vercel AI SDK: generateText calls the tool twice in one session', async () => {
  const { generateText, stepCountIs } = await import('ai');
  const { MockLanguageModelV4 } = await import('ai/test');
  const { jaildTool } = await import('@jaild/client/ai');
  const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
  const call = (id, code) => ({ content: [{ type: 'tool-call', toolCallId: id, toolName: 'python', input: JSON.stringify({ code }) }], finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage, warnings: [] });
  const model = new MockLanguageModelV4({ doGenerate: [call('c1', code1), call('c2', code2), { content: [{ type: 'text', text: 'done' }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] }] });
  const c = client();
  const s = await c.createSession();
  try {
    const r = await generateText({ model, tools: { python: jaildTool({ client: c, session: s }) }, prompt: 'compute', stopWhen: stepCountIs(5) });
    assert.equal(r.text, 'done');
    const outputs = r.steps.flatMap((st) => st.toolResults.map((t) => t.output));
    assert.deepEqual(outputs.map((o) => [o.status, o.result]), [['ok', '45'], ['ok', '90']]);
    assert.equal(outputs[0].stdout, 'py 3\n45\n');
    // What the model was sent next holds the tool's output.
    assert.match(JSON.stringify(model.doGenerateCalls[1].prompt), /"stdout":"py 3\\n45\\n"/);
    assert.match(JSON.stringify(model.doGenerateCalls[2].prompt), /"result":"90"/);
  } finally {
    await s.delete();
  }
});

test('OpenAI Agents SDK: an agent run calls the tool in a fresh jail', async () => {
  const { Agent, run } = await import('@openai/agents');
  const { ScriptedModel, functionCall, assistantMessage } = await import('@openai/agents-core/testing');
  const { jaildTool } = await import('@jaild/client/openai-agents');
  const model = new ScriptedModel([
    [functionCall('run_python', { code: code1 }, { callId: 'call_1' })],
    [functionCall('run_python', { code: '1 / 0' }, { callId: 'call_2' })],
    [assistantMessage('done')],
  ]);
  const agent = new Agent({ name: 'coder', instructions: 'run code', model, tools: [jaildTool({ client: client() })] });
  const result = await run(agent, 'compute');
  assert.equal(result.finalOutput, 'done');
  const outputs = result.newItems.filter((i) => i.type === 'tool_call_output_item').map((i) => JSON.parse(i.output));
  assert.deepEqual(outputs.map((o) => o.status), ['ok', 'error']);
  assert.equal(outputs[0].result, '45');
  assert.match(outputs[1].error, /^ZeroDivisionError: division by zero \(line 1\)/);
  // The model's next request carried each output.
  assert.match(JSON.stringify(model.calls[1].request.input), /py 3\\\\n45/);
  assert.match(JSON.stringify(model.calls[2].request.input), /ZeroDivisionError/);
});
