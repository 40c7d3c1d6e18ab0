import type { FunctionTool } from '@openai/agents';
import type { Client, Session, Limits } from './index.js';

export interface JaildToolOptions {
  /** The client (default: a new Client from the environment). */
  client?: Client;
  /** Run every call in this session: variables persist across calls. */
  session?: Session;
  /** The runs' limits. */
  limits?: Limits;
  /** The tool's name (default run_python) and description for the model. */
  name?: string;
  description?: string;
}

/** An OpenAI Agents SDK function tool that runs the agent's Python code in jaild; its output is JSON of status, stdout, stderr, result, error and message. */
export declare function jaildTool(opts?: JaildToolOptions): FunctionTool<unknown, any, string>;
