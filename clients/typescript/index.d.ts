// Types of @jaild/client. The wire's types are generated from the daemon's
// OpenAPI document into wire.d.ts (gen.mjs).
import type {
  ExecuteRequest, ExecuteResponse, Event, FileIn, Info, Health, ImageInfo, Session as SessionInfo,
  SessionCreateRequest, SessionExecuteRequest, SessionExecuteResponse, StoredFile, CommandRequest,
  CommandResult, CommandInfo, SessionInterruptResponse, SessionPauseResponse,
} from './wire.js';

export * from './wire.js';

export declare const DEFAULT_SOCKET: string;

/** A request the daemon refused (type, field and message of its error body, HTTP status), or a failure to reach it (type "unavailable", status 0). */
export declare class JaildError extends Error {
  type: string;
  field: string;
  status: number;
  detail: string;
}

export interface ClientOptions {
  /** The daemon's Unix socket (default $JAILD_SOCKET, else /run/jaild/jaild.sock). */
  socket?: string;
  /** https://HOST:PORT of its mutual-TLS listener (default $JAILD_HOST). */
  host?: string;
  /** Client certificate, key and the CA of the daemon's certificate: file paths (default $JAILD_CERT, $JAILD_KEY, $JAILD_CA). */
  cert?: string;
  key?: string;
  ca?: string;
  /** How long a request may go without a byte (default 600000). */
  timeoutMs?: number;
}

/** A file of a request: as on the wire, or {path, content} with the bytes (a string is UTF-8). */
export type FileInput = FileIn | { path: string; content: string | Uint8Array };

export type RunRequest<R> = string | (Omit<R, 'files'> & { files?: FileInput[] });

export declare class Client {
  constructor(opts?: ClientOptions);
  info(): Promise<Info>;
  health(): Promise<Health>;
  images(): Promise<ImageInfo[]>;
  openapi(): Promise<Record<string, unknown>>;
  /** Run code in a fresh jail: a run that fails is a result (status, message), not an error. */
  execute(req: RunRequest<ExecuteRequest>): Promise<ExecuteResponse>;
  /** The run's events as they come (start, stdout, stderr, figure, exception, display, result, keepalive), ending with done. */
  executeStream(req: RunRequest<ExecuteRequest>): AsyncGenerator<Event, void, undefined>;
  createSession(opts?: Omit<SessionCreateRequest, 'files'> & { files?: FileInput[] }): Promise<Session>;
  sessions(): Promise<SessionInfo[]>;
  getSession(id: string): Promise<SessionInfo>;
  /** Store data under name in the daemon's file store. */
  upload(data: string | Uint8Array, name: string): Promise<StoredFile>;
  download(id: string): Promise<Buffer>;
  files(): Promise<StoredFile[]>;
  deleteFile(id: string): Promise<void>;
}

/** A session: an interpreter kept across calls. `await using s = await client.createSession()` deletes it at the end of the block. */
export declare class Session {
  readonly client: Client;
  readonly id: string;
  info: SessionInfo;
  execute(req: RunRequest<SessionExecuteRequest>): Promise<SessionExecuteResponse>;
  executeStream(req: RunRequest<SessionExecuteRequest>): AsyncGenerator<Event, void, undefined>;
  refresh(): Promise<SessionInfo>;
  interrupt(): Promise<SessionInterruptResponse>;
  pause(): Promise<SessionPauseResponse>;
  resume(): Promise<SessionInfo>;
  /** A shell command (a string, run by /bin/sh -c) or an argv, in the session's jail. */
  runCommand(cmd: string | string[], opts?: Omit<CommandRequest, 'cmd' | 'argv'>): Promise<CommandResult | CommandInfo>;
  delete(): Promise<SessionInfo>;
  [Symbol.asyncDispose](): Promise<void>;
}
