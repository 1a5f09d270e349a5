"""Talk to a running daemon (standard library only: the `supergrep` launcher imports this).

    >>> from supergrep.daemon import client
    >>> client.call({"op": "ping"})                  # doctest: +SKIP
    {'v': 1, 'ok': True, 'pid': 4242, 'version': '0.1.0', ...}
"""

from __future__ import annotations

import _socket  # not `socket`: its enum/selectors imports cost the fast path milliseconds
import os

from supergrep.daemon import paths
from supergrep.daemon.protocol import PROTOCOL_VERSION, LineReader, ProtocolError, encode_request

TYPE_CHECKING = False  # not `from typing import ...` (import cost)
if TYPE_CHECKING:
    from collections.abc import Callable


class DaemonUnavailable(Exception):
    """No daemon answered: none runs, the socket is stale, or it went away mid-request."""


class DaemonError(Exception):
    """The daemon answered with an error.

    Attributes:
        kind: The error's type name (``UsageError``, ``IndexMissingError``, ...).
        exit_code: The exit status the CLI uses for it (2).
        fallback: True when the caller should do the work itself instead (e.g. the daemon
            speaks another protocol version, or leaves a bad argument for the CLI to reject).
    """

    def __init__(self, kind: str, message: str, exit_code: int = 2, fallback: bool = False):
        super().__init__(message)
        self.kind, self.message, self.exit_code, self.fallback = kind, message, exit_code, fallback


def connect(path: str | None = None, timeout: float = 1.0) -> _socket.socket:
    """A connected socket, or DaemonUnavailable (no socket file, or nobody listening on it)."""
    path = path or paths.socket_path()
    deadline = None
    while True:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            return sock
        except BlockingIOError:  # the listen backlog is full (a burst of clients): retry
            sock.close()
            import time

            deadline = deadline or time.monotonic() + timeout
            if time.monotonic() > deadline:
                raise DaemonUnavailable(f"the daemon at {path} is not accepting connections") from None
            time.sleep(0.005)
        except OSError as exc:  # FileNotFoundError, ConnectionRefusedError (stale), timeouts
            sock.close()
            raise DaemonUnavailable(f"no daemon at {path} ({exc.__class__.__name__})") from None


def call(request: dict, timeout: float | None = 600.0, on_notice: Callable[[str], None] | None = None,
         path: str | None = None, connect_timeout: float = 1.0) -> dict:
    """Send one request and return its (successful) response.

    Args:
        request: The op and its fields (``v`` is added).
        timeout: Seconds to wait for the answer (None: forever).
        on_notice: Receives each notice line (stderr text) that precedes the response.

    Raises:
        DaemonUnavailable: Nobody answered, or the connection broke before the response.
        DaemonError: The daemon answered with an error.
    """
    sock = connect(path, connect_timeout)
    try:
        sock.settimeout(timeout)
        sock.sendall(encode_request({"v": PROTOCOL_VERSION, **request}))
        reader = LineReader(sock)
        while True:
            try:
                message = reader.read()
            except (OSError, ProtocolError) as exc:
                raise DaemonUnavailable(f"the daemon went away mid-request ({exc})") from None
            if message is None:
                raise DaemonUnavailable("the daemon closed the connection without answering")
            if "notice" in message and "ok" not in message:
                if on_notice is not None:
                    on_notice(str(message["notice"]))
                continue
            if message.get("ok"):
                return message
            err = message.get("error") or {}
            raise DaemonError(str(err.get("type", "Error")), str(err.get("message", "the daemon failed")),
                              int(err.get("exit_code", 2)), bool(message.get("fallback")))
    finally:
        sock.close()


def ping(timeout: float = 2.0) -> dict | None:
    """The daemon's ping answer (pid, version, socket), or None when none runs."""
    try:
        return call({"op": "ping"}, timeout=timeout)
    except (DaemonUnavailable, DaemonError):
        return None


def disabled() -> bool:
    """``SUPERGREP_NO_DAEMON=1`` makes every command work in-process."""
    return os.environ.get("SUPERGREP_NO_DAEMON", "") not in ("", "0")
