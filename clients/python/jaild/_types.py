"""The wire's types (docs/API.md, /v1/openapi.json) as dataclasses.

Each class names its schema in the OpenAPI document (SCHEMA); the tests
check that every property of that schema is a field here, so the two
cannot drift apart. Fields a newer daemon adds are kept in `extra`."""

import base64
import dataclasses
import typing
from typing import Any, Dict, List, Optional


def _build(cls, data):
    """cls from a JSON object: known fields (nested types built too),
    the rest in extra."""
    if data is None:
        return None
    hints = typing.get_type_hints(cls)
    known = {}
    extra = {}
    names = {f.name for f in dataclasses.fields(cls)}
    for key, value in data.items():
        if key in names and key != "extra":
            known[key] = _convert(hints[key], value)
        else:
            extra[key] = value
    for f in dataclasses.fields(cls):
        if f.name not in known and f.name != "extra":
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                known[f.name] = None
    return cls(**known, extra=extra)


def _convert(hint, value):
    if value is None:
        return None
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union:  # Optional[X]
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value) if len(inner) == 1 else value
    if origin in (list, List) and args and dataclasses.is_dataclass(args[0]):
        return [_build(args[0], v) for v in value]
    if dataclasses.is_dataclass(hint):
        return _build(hint, value)
    return value


@dataclasses.dataclass
class Usage:
    SCHEMA = "Usage"
    duration_ms: int = 0
    cpu_ms: int = 0
    peak_memory_bytes: int = 0
    warm: bool = False
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ExecError:
    SCHEMA = "ExecError"
    type: str = ""
    message: str = ""
    line: Optional[int] = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class FileOut:
    SCHEMA = "FileOut"
    path: str = ""
    size_bytes: int = 0
    content_b64: Optional[str] = None
    file_id: Optional[str] = None
    sha256: Optional[str] = None
    error: Optional[str] = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def content(self) -> Optional[bytes]:
        """The file's bytes when it came inline."""
        if self.error or self.file_id:
            return None
        return base64.b64decode(self.content_b64 or "")


@dataclasses.dataclass
class Figure:
    SCHEMA = "Figure"
    name: str = ""
    content_b64: str = ""
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def png(self) -> bytes:
        return base64.b64decode(self.content_b64)


@dataclasses.dataclass
class Output:
    """A rich output: a Jupyter MIME bundle (docs/API.md, Rich outputs)."""

    SCHEMA = "Output"
    output_type: str = ""
    data: Dict[str, Any] = dataclasses.field(default_factory=dict)
    metadata: Dict[str, Any] = dataclasses.field(default_factory=dict)
    execution_count: Optional[int] = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def bytes(self, mime: str) -> Optional[bytes]:
        """The decoded value of a base64 type (image/png, image/jpeg,
        application/pdf), or None."""
        value = self.data.get(mime)
        return base64.b64decode(value) if isinstance(value, str) else None


@dataclasses.dataclass
class NetworkUsage:
    SCHEMA = "NetworkUsage"
    bytes_sent: int = 0
    bytes_received: int = 0
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ExecuteResult:
    """POST /v1/execute's answer: every run that started, whatever its
    outcome (status)."""

    SCHEMA = "ExecuteResponse"
    run_id: str = ""
    image: str = ""
    status: str = ""
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    oom_killed: bool = False
    message: str = ""
    error: Optional[ExecError] = None
    result: Optional[str] = None
    files: List[FileOut] = dataclasses.field(default_factory=list)
    figures: List[Figure] = dataclasses.field(default_factory=list)
    outputs: List[Output] = dataclasses.field(default_factory=list)
    usage: Optional[Usage] = None
    network: Optional[NetworkUsage] = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclasses.dataclass
class SessionStatus:
    SCHEMA = "SessionStatus"
    session_id: str = ""
    state: str = ""
    end_reason: Optional[str] = None
    state_lost: bool = False
    lost_reason: Optional[str] = None
    resumed: bool = False
    restore_ms: Optional[float] = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class SessionExecuteResult(ExecuteResult):
    """A session call's answer: a run's, and what became of the session."""

    SCHEMA = "SessionExecuteResponse"
    execution_count: int = 0
    session: Optional[SessionStatus] = None


@dataclasses.dataclass
class Session:
    SCHEMA = "Session"
    session_id: str = ""
    created_at: str = ""
    expires_at: str = ""
    idle_timeout_s: int = 0
    limits: Dict[str, Any] = dataclasses.field(default_factory=dict)
    state: str = ""
    end_reason: Optional[str] = None
    execution_count: int = 0
    last_used_at: str = ""
    network: Optional[str] = None
    warm: bool = False
    uid: int = 0
    image: str = ""
    paused_at: Optional[str] = None
    paused_bytes: Optional[int] = None
    cpu_cores: Optional[float] = None
    cpu_ms: Optional[int] = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class StoredFile:
    SCHEMA = "StoredFile"
    file_id: str = ""
    name: str = ""
    size_bytes: int = 0
    sha256: str = ""
    created_at: str = ""
    expires_at: str = ""
    uid: int = 0
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Event:
    """One event of a streamed run (start, stdout, stderr, figure,
    exception, display, result, keepalive, done, error): data is its JSON
    value, decoded."""

    SCHEMA = "Event"
    id: int = 0
    event: str = ""
    data: Any = None
    extra: Dict[str, Any] = dataclasses.field(default_factory=dict)


# The types whose fields the tests check against the OpenAPI document.
WIRE_TYPES = (Usage, ExecError, FileOut, Figure, Output, NetworkUsage, ExecuteResult, SessionStatus,
              SessionExecuteResult, Session, StoredFile, Event)
