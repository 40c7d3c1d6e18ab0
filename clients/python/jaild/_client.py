"""The client: HTTP/1.1 over the daemon's Unix socket or its mTLS listener."""

import base64
import http.client
import json
import os
import socket
import ssl
import urllib.parse
from typing import Any, Dict, Iterator, List, Optional, Union

from ._types import Event, ExecuteResult, Session, SessionExecuteResult, StoredFile, _build

DEFAULT_SOCKET = "/run/jaild/jaild.sock"


class Error(Exception):
    """A request the daemon refused, or a failure to reach it: type,
    message and field are the error body's (docs/API.md), status the
    HTTP status (0 when no answer came)."""

    def __init__(self, type: str, message: str, field: str = "", status: int = 0):
        super().__init__(f"{type}: {message}" + (f" (field {field})" if field else ""))
        self.type = type
        self.message = message
        self.field = field
        self.status = status


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]):
        super().__init__("jaild", timeout=timeout)
        self._path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _body(value: Any) -> Any:
    """A request body as JSON takes it: dataclass-free dicts, bytes as
    base64, None fields left out."""
    if isinstance(value, dict):
        return {k: _body(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_body(v) for v in value]
    return value


def _files(files: Optional[List[Dict[str, Any]]]) -> Optional[List[Dict[str, Any]]]:
    """Files for a request: {"path", "content": bytes} becomes content_b64;
    {"path", "content_b64"} and {"path", "file_id"} go as they are."""
    if files is None:
        return None
    out = []
    for f in files:
        f = dict(f)
        content = f.pop("content", None)
        if content is not None:
            if isinstance(content, str):
                content = content.encode()
            f["content_b64"] = base64.b64encode(content).decode("ascii")
        out.append(f)
    return out


class Client:
    """A jaild client. With no arguments it reads $JAILD_SOCKET, or
    $JAILD_HOST with $JAILD_CERT, $JAILD_KEY and $JAILD_CA, as jailctl
    does; else the socket /run/jaild/jaild.sock."""

    def __init__(self, socket: Optional[str] = None, host: Optional[str] = None, cert: Optional[str] = None,
                 key: Optional[str] = None, ca: Optional[str] = None, timeout: Optional[float] = 600.0):
        if socket is None and host is None:
            host = os.environ.get("JAILD_HOST") or None
            socket = None if host else (os.environ.get("JAILD_SOCKET") or DEFAULT_SOCKET)
        if socket is not None and host is not None:
            raise ValueError("give socket or host, not both")
        self.timeout = timeout
        self._socket = socket
        self._tls = None
        if host is not None:
            u = urllib.parse.urlsplit(host)
            if u.scheme != "https" or not u.hostname or u.path not in ("", "/"):
                raise ValueError(f"host {host!r}: want https://HOST[:PORT]")
            cert = cert or os.environ.get("JAILD_CERT")
            key = key or os.environ.get("JAILD_KEY")
            ca = ca or os.environ.get("JAILD_CA")
            if not cert or not key:
                raise ValueError("a TLS host needs a client certificate and key (cert=, key=, or $JAILD_CERT, $JAILD_KEY)")
            ctx = ssl.create_default_context(cafile=ca)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
            ctx.load_cert_chain(cert, key)
            self._tls = (u.hostname, u.port or 443, ctx)

    # -- transport --

    def _connect(self) -> http.client.HTTPConnection:
        if self._tls is not None:
            host, port, ctx = self._tls
            return http.client.HTTPSConnection(host, port, context=ctx, timeout=self.timeout)
        return _UnixConnection(self._socket, self.timeout)

    def _request(self, method: str, path: str, body: Any = None, raw: Optional[bytes] = None,
                 headers: Optional[Dict[str, str]] = None, stream: bool = False):
        """Send a request; returns the open response (stream) or its
        decoded JSON body. A status of 400 or more raises Error."""
        conn = self._connect()
        hdrs = {"Accept": "application/json"}
        hdrs.update(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(_body(body)).encode()
            hdrs["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise Error("unavailable", f"cannot reach jaild: {exc}") from exc
        if resp.status >= 400:
            payload = resp.read()
            conn.close()
            try:
                detail = json.loads(payload)["error"]
                raise Error(detail.get("type", "unknown"), detail.get("message", ""), detail.get("field", ""), resp.status)
            except (ValueError, KeyError, TypeError, AttributeError):
                raise Error("unknown", f"HTTP {resp.status}: {payload[:200]!r}", status=resp.status) from None
        if stream:
            resp._jaild_conn = conn  # closed with the response
            return resp
        try:
            payload = resp.read()
        finally:
            conn.close()
        if not payload:
            return None
        return json.loads(payload)

    def _stream(self, path: str, body: Any) -> Iterator[Event]:
        resp = self._request("POST", path, body, headers={"Accept": "application/x-ndjson"}, stream=True)
        try:
            if resp.getheader("Content-Type", "").split(";")[0] != "application/x-ndjson":
                # A daemon that answered JSON: the response is done's.
                yield Event(id=1, event="done", data=json.loads(resp.read()))
                return
            for line in resp:
                if not line.strip():
                    continue
                ev = json.loads(line)
                event = Event(id=ev.get("id", 0), event=ev.get("event", ""), data=ev.get("data"))
                if event.event == "error":
                    detail = (event.data or {}).get("error", {})
                    raise Error(detail.get("type", "unknown"), detail.get("message", ""), detail.get("field", ""), 200)
                yield event
                if event.event == "done":
                    return
            raise Error("unavailable", "the stream ended without a done event")
        finally:
            resp.close()
            resp._jaild_conn.close()

    # -- the daemon --

    def info(self) -> Dict[str, Any]:
        """GET /v1/info: the daemon, its images, limits and pool."""
        return self._request("GET", "/v1/info")

    def health(self) -> Dict[str, Any]:
        return self._request("GET", "/v1/health")

    def images(self) -> List[Dict[str, Any]]:
        """The images the daemon serves (/v1/info's images)."""
        return self.info().get("images", [])

    def openapi(self) -> Dict[str, Any]:
        return self._request("GET", "/v1/openapi.json")

    # -- runs --

    @staticmethod
    def _run_body(code: str, **fields) -> Dict[str, Any]:
        body = {"code": code}
        body.update(fields)
        if "files" in body:
            body["files"] = _files(body["files"])
        return body

    def execute(self, code: str, *, stdin: Optional[str] = None, files: Optional[List[Dict[str, Any]]] = None,
                return_files: Optional[List[str]] = None, limits: Optional[Dict[str, Any]] = None,
                last_line_interactive: Optional[bool] = None, env: Optional[Dict[str, str]] = None,
                image: Optional[str] = None, **fields) -> ExecuteResult:
        """Run code in a fresh jail (POST /v1/execute). Other request
        fields (network, allow_hosts, return_files_as) go as keywords."""
        body = self._run_body(code, stdin=stdin, files=files, return_files=return_files, limits=limits,
                              last_line_interactive=last_line_interactive, env=env, image=image, **fields)
        return _build(ExecuteResult, self._request("POST", "/v1/execute", body))

    def execute_stream(self, code: str, **fields) -> Iterator[Event]:
        """Run code with its events as they come: an iterator of Event,
        ending with done (its data the usual response, output fields
        empty). The run is killed if the iterator is closed early."""
        return self._stream("/v1/execute", self._run_body(code, **fields))

    # -- sessions --

    def create_session(self, **fields) -> "SessionHandle":
        """POST /v1/sessions (limits, idle_timeout_s, ttl_s, env, network,
        allow_hosts, files, image, from_snapshot, cpu_cores)."""
        if "files" in fields:
            fields["files"] = _files(fields["files"])
        s = _build(Session, self._request("POST", "/v1/sessions", fields))
        return SessionHandle(self, s)

    def session(self, **fields) -> "SessionHandle":
        """A new session as a context manager: deleted when the block ends."""
        return self.create_session(**fields)

    def sessions(self) -> List[Session]:
        return [_build(Session, s) for s in self._request("GET", "/v1/sessions").get("sessions", [])]

    def get_session(self, session_id: str) -> Session:
        return _build(Session, self._request("GET", "/v1/sessions/" + _seg(session_id)))

    # -- the file store --

    def upload(self, content: Union[bytes, str], name: str) -> StoredFile:
        """Store content (bytes, or a path to a file) under name."""
        if isinstance(content, str):
            with open(content, "rb") as f:
                content = f.read()
        path = "/v1/files?" + urllib.parse.urlencode({"name": name})
        return _build(StoredFile, self._request("POST", path, raw=content, headers={"Content-Type": "application/octet-stream"}))

    def download(self, file_id: str) -> bytes:
        resp = self._request("GET", "/v1/files/" + _seg(file_id), headers={"Accept": "*/*"}, stream=True)
        try:
            return resp.read()
        finally:
            resp.close()
            resp._jaild_conn.close()

    def files(self) -> List[StoredFile]:
        return [_build(StoredFile, f) for f in self._request("GET", "/v1/files").get("files", [])]

    def delete_file(self, file_id: str) -> None:
        self._request("DELETE", "/v1/files/" + _seg(file_id))


def _seg(s: str) -> str:
    """A path segment, escaped."""
    return urllib.parse.quote(s, safe="")


class SessionHandle:
    """A session of the daemon: an interpreter kept across calls. Use it
    as a context manager to delete it at the end."""

    def __init__(self, client: Client, info: Session):
        self._c = client
        self.info = info
        self.id = info.session_id

    def __enter__(self) -> "SessionHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.delete()

    def __repr__(self) -> str:
        return f"<jaild session {self.id}>"

    def _path(self, rest: str = "") -> str:
        return "/v1/sessions/" + _seg(self.id) + rest

    def execute(self, code: str, **fields) -> SessionExecuteResult:
        """Run code in the session (stdin, files, return_files, limits,
        last_line_interactive, return_files_as, env)."""
        body = Client._run_body(code, **fields)
        return _build(SessionExecuteResult, self._c._request("POST", self._path("/execute"), body))

    def execute_stream(self, code: str, **fields) -> Iterator[Event]:
        return self._c._stream(self._path("/execute"), Client._run_body(code, **fields))

    def refresh(self) -> Session:
        self.info = _build(Session, self._c._request("GET", self._path()))
        return self.info

    def interrupt(self) -> Dict[str, Any]:
        return self._c._request("POST", self._path("/interrupt"), {})

    def pause(self) -> Dict[str, Any]:
        return self._c._request("POST", self._path("/pause"), {})

    def resume(self) -> Dict[str, Any]:
        return self._c._request("POST", self._path("/resume"), {})

    def run_command(self, cmd: Union[str, List[str]], **fields) -> Dict[str, Any]:
        """A shell command (str) or argv (list) in the session's jail:
        POST .../commands (cwd, env, stdin, timeout_ms, background)."""
        body = dict(fields)
        body["argv" if isinstance(cmd, list) else "cmd"] = cmd
        return self._c._request("POST", self._path("/commands"), body)

    def delete(self) -> Session:
        return _build(Session, self._c._request("DELETE", self._path()))
