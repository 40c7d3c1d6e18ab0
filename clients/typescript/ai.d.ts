import type { Tool } from 'ai';
import type { Client, Session, ExecuteResponse, Limits } from './index.js';

export interface JaildToolOptions {
  /** The client (default: a new Client from the environment). */
  client?: Client;
  /** Run every call in this session: variables persist across calls. */
  session?: Session;
  /** The runs' limits. */
  limits?: Limits;
  /** The tool's description for the model. */
  description?: string;
}

/** What the model is given of a run. */
export interface JaildToolOutput {
  status: string;
  stdout: string;
  stderr: string;
  result?: string;
  error?: string;
  message?: string;
}

/** A Vercel AI SDK tool that runs the model's Python code in jaild. */
export declare function jaildTool(opts?: JaildToolOptions): Tool<{ code: string }, JaildToolOutput>;
export declare function toolOutput(r: ExecuteResponse): JaildToolOutput;
