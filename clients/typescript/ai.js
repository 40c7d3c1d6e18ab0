// A Python tool for the Vercel AI SDK (`ai`, a peer dependency): the
// model's code runs in a jaild jail, fresh per call or in one session.
import { jsonSchema, tool } from 'ai';
import { Client } from './index.js';
import { toolOutput } from './output.js';

export { toolOutput };

const DESCRIPTION = 'Run Python 3 code in an isolated jail (no network) and get its stdout, stderr, ' +
  'the value of the last expression and any exception. Variables persist between calls when a session is used.';

/**
 * A tool that runs the model's Python code in jaild.
 * opts.client: the Client (default: a new one from the environment);
 * opts.session: a Session to run every call in (state kept across calls);
 * opts.limits: the runs' limits.
 */
export function jaildTool(opts = {}) {
  const client = opts.client ?? new Client();
  return tool({
    description: opts.description ?? DESCRIPTION,
    inputSchema: jsonSchema({
      type: 'object',
      properties: { code: { type: 'string', description: 'The Python code to run; the value of its last line is returned as result.' } },
      required: ['code'],
      additionalProperties: false,
    }),
    execute: async ({ code }) => {
      const req = { code, last_line_interactive: true, ...(opts.limits ? { limits: opts.limits } : {}) };
      const r = opts.session ? await opts.session.execute(req) : await client.execute(req);
      return toolOutput(r);
    },
  });
}
