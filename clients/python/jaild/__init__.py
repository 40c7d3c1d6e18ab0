"""jaild: a client for the daemon that runs untrusted Python in
kernel-enforced jails. The standard library only.

    import jaild
    client = jaild.Client()
    print(client.execute("print(1)").stdout)
"""

from ._client import DEFAULT_SOCKET, Client, Error, SessionHandle
from ._types import (
    Event,
    ExecError,
    ExecuteResult,
    FileOut,
    Figure,
    NetworkUsage,
    Output,
    Session,
    SessionExecuteResult,
    SessionStatus,
    StoredFile,
    Usage,
)

__all__ = [
    "DEFAULT_SOCKET", "Client", "Error", "SessionHandle", "Event", "ExecError", "ExecuteResult", "FileOut", "Figure",
    "NetworkUsage", "Output", "Session", "SessionExecuteResult", "SessionStatus", "StoredFile", "Usage",
]
__version__ = "0.1.0"
