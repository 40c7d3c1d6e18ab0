// A Python tool for the OpenAI Agents SDK (`@openai/agents`, a peer
// dependency): the agent's code runs in a jaild jail, fresh per call or
// in one session.
import { tool } from '@openai/agents';
import { Client } from './index.js';
import { toolOutput } from './output.js';

const DESCRIPTION = 'Run Python 3 code in an isolated jail (no network) and get its stdout, stderr, ' +
  'the value of the last expression and any exception. Variables persist between calls when a session is used.';

/**
 * A function tool that runs the agent's Python code in jaild.
 * opts.client: the Client (default: a new one from the environment);
 * opts.session: a Session to run every call in; opts.limits: the runs' limits;
 * opts.name: the tool's name (default run_python).
 */
export function jaildTool(opts = {}) {
  const client = opts.client ?? new Client();
  return tool({
    name: opts.name ?? 'run_python',
    description: opts.description ?? DESCRIPTION,
    parameters: {
      type: 'object',
      properties: { code: { type: 'string', description: 'The Python code to run; the value of its last line is returned as result.' } },
      required: ['code'],
      additionalProperties: false,
    },
    strict: true,
    execute: async ({ code }) => {
      const req = { code, last_line_interactive: true, ...(opts.limits ? { limits: opts.limits } : {}) };
      const r = opts.session ? await opts.session.execute(req) : await client.execute(req);
      return JSON.stringify(toolOutput(r));
    },
  });
}
