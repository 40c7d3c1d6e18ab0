// @jaild/client: a client for jaild's API over its Unix socket or its
// mutual-TLS listener. Node's standard library only. Types: index.d.ts.
import http from 'node:http';
import https from 'node:https';
import { readFileSync } from 'node:fs';

export const DEFAULT_SOCKET = '/run/jaild/jaild.sock';

/** A request the daemon refused, or a failure to reach it. */
export class JaildError extends Error {
  constructor(type, message, field = '', status = 0) {
    super(`${type}: ${message}${field ? ` (field ${field})` : ''}`);
    this.name = 'JaildError';
    this.type = type;
    this.field = field;
    this.status = status;
    this.detail = message;
  }
}

// Files of a request: {path, content} (a string or bytes) becomes content_b64.
function encodeFiles(files) {
  if (!files) return files;
  return files.map((f) => {
    if (f.content === undefined) return f;
    const { content, ...rest } = f;
    return { ...rest, content_b64: Buffer.from(content).toString('base64') };
  });
}

function runBody(req) {
  if (typeof req === 'string') return { code: req };
  return req.files ? { ...req, files: encodeFiles(req.files) } : req;
}

export class Client {
  /**
   * With no options: $JAILD_SOCKET, or $JAILD_HOST with $JAILD_CERT,
   * $JAILD_KEY and $JAILD_CA (as jailctl reads them); else the socket
   * /run/jaild/jaild.sock.
   */
  constructor(opts = {}) {
    let { socket, host } = opts;
    if (socket && host) throw new TypeError('give socket or host, not both');
    if (!socket && !host) {
      host = process.env.JAILD_HOST || undefined;
      if (!host) socket = process.env.JAILD_SOCKET || DEFAULT_SOCKET;
    }
    this.timeoutMs = opts.timeoutMs ?? 600_000;
    if (host) {
      const u = new URL(host);
      if (u.protocol !== 'https:' || (u.pathname !== '/' && u.pathname !== '')) throw new TypeError(`host ${host}: want https://HOST[:PORT]`);
      const cert = opts.cert ?? process.env.JAILD_CERT;
      const key = opts.key ?? process.env.JAILD_KEY;
      const ca = opts.ca ?? process.env.JAILD_CA;
      if (!cert || !key) throw new TypeError('a TLS host needs a client certificate and key (cert, key, or $JAILD_CERT, $JAILD_KEY)');
      this.target = {
        mod: https,
        base: { hostname: u.hostname, port: u.port || 443, cert: readFileSync(cert), key: readFileSync(key), ca: ca ? readFileSync(ca) : undefined, minVersion: 'TLSv1.2' },
      };
    } else {
      this.target = { mod: http, base: { socketPath: socket } };
    }
  }

  // send makes a request and resolves with the response once its head is
  // in; a status of 400 or more rejects with a JaildError.
  send(method, path, { json, raw, headers = {} } = {}) {
    const { mod, base } = this.target;
    const hdrs = { Accept: 'application/json', ...headers };
    let body = raw;
    if (json !== undefined) {
      body = Buffer.from(JSON.stringify(json));
      hdrs['Content-Type'] = 'application/json';
    }
    if (body !== undefined) hdrs['Content-Length'] = String(body.length);
    return new Promise((resolve, reject) => {
      const req = mod.request({ ...base, method, path, headers: hdrs, timeout: this.timeoutMs }, async (res) => {
        if (res.statusCode < 400) return resolve(res);
        const text = await readAll(res).catch(() => Buffer.alloc(0));
        try {
          const e = JSON.parse(text.toString()).error;
          reject(new JaildError(e.type ?? 'unknown', e.message ?? '', e.field ?? '', res.statusCode));
        } catch {
          reject(new JaildError('unknown', `HTTP ${res.statusCode}: ${text.subarray(0, 200)}`, '', res.statusCode));
        }
      });
      req.on('timeout', () => req.destroy(new Error(`no answer within ${this.timeoutMs} ms`)));
      req.on('error', (err) => reject(new JaildError('unavailable', `cannot reach jaild: ${err.message}`)));
      req.end(body);
    });
  }

  async request(method, path, opts) {
    const res = await this.send(method, path, opts);
    const text = await readAll(res);
    return text.length ? JSON.parse(text.toString()) : undefined;
  }

  // stream yields the events of a streamed run, up to done.
  async *stream(path, body) {
    const res = await this.send('POST', path, { json: body, headers: { Accept: 'application/x-ndjson' } });
    try {
      if ((res.headers['content-type'] ?? '').split(';')[0] !== 'application/x-ndjson') {
        // A daemon that answered JSON: the response is done's.
        yield { id: 1, event: 'done', data: JSON.parse((await readAll(res)).toString()) };
        return;
      }
      let buf = '';
      for await (const chunk of res) {
        buf += chunk.toString();
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (!line.trim()) continue;
          const ev = JSON.parse(line);
          if (ev.event === 'error') {
            const e = ev.data?.error ?? {};
            throw new JaildError(e.type ?? 'unknown', e.message ?? '', e.field ?? '', 200);
          }
          yield ev;
          if (ev.event === 'done') return;
        }
      }
      throw new JaildError('unavailable', 'the stream ended without a done event');
    } finally {
      res.destroy();
    }
  }

  info() { return this.request('GET', '/v1/info'); }
  health() { return this.request('GET', '/v1/health'); }
  async images() { return (await this.info()).images ?? []; }
  openapi() { return this.request('GET', '/v1/openapi.json'); }

  /** Run code in a fresh jail: a string, or an ExecuteRequest. */
  execute(req) { return this.request('POST', '/v1/execute', { json: runBody(req) }); }

  /** The run's events as they come, ending with done. */
  executeStream(req) { return this.stream('/v1/execute', runBody(req)); }

  async createSession(opts = {}) {
    const body = opts.files ? { ...opts, files: encodeFiles(opts.files) } : opts;
    return new Session(this, await this.request('POST', '/v1/sessions', { json: body }));
  }

  async sessions() { return (await this.request('GET', '/v1/sessions')).sessions; }
  getSession(id) { return this.request('GET', `/v1/sessions/${encodeURIComponent(id)}`); }

  /** Store data (a string or bytes) under name in the file store. */
  upload(data, name) {
    return this.request('POST', `/v1/files?name=${encodeURIComponent(name)}`, { raw: Buffer.from(data), headers: { 'Content-Type': 'application/octet-stream' } });
  }

  async download(id) {
    return readAll(await this.send('GET', `/v1/files/${encodeURIComponent(id)}`, { headers: { Accept: '*/*' } }));
  }

  async files() { return (await this.request('GET', '/v1/files')).files; }
  async deleteFile(id) { await this.request('DELETE', `/v1/files/${encodeURIComponent(id)}`); }
}

/** A session: an interpreter kept across calls. `await using` deletes it. */
export class Session {
  constructor(client, info) {
    this.client = client;
    this.info = info;
    this.id = info.session_id;
  }

  path(rest = '') { return `/v1/sessions/${encodeURIComponent(this.id)}${rest}`; }
  execute(req) { return this.client.request('POST', this.path('/execute'), { json: runBody(req) }); }
  executeStream(req) { return this.client.stream(this.path('/execute'), runBody(req)); }
  async refresh() { this.info = await this.client.request('GET', this.path()); return this.info; }
  interrupt() { return this.client.request('POST', this.path('/interrupt'), { json: {} }); }
  pause() { return this.client.request('POST', this.path('/pause'), { json: {} }); }
  resume() { return this.client.request('POST', this.path('/resume'), { json: {} }); }

  /** A shell command (string) or argv (array) in the session's jail. */
  runCommand(cmd, opts = {}) {
    return this.client.request('POST', this.path('/commands'), { json: { ...opts, [Array.isArray(cmd) ? 'argv' : 'cmd']: cmd } });
  }

  delete() { return this.client.request('DELETE', this.path()); }
  async [Symbol.asyncDispose]() { await this.delete(); }
}

async function readAll(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return Buffer.concat(chunks);
}
