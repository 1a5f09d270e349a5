"""The daemon process: an Engine behind a unix socket.

``Daemon.run()`` takes the single-instance lock, removes stale files, binds the socket (mode
0600 in a 0700 directory; peers of another uid are refused), writes the pid file, starts the
engine and serves one thread per connection until a ``stop`` request or SIGTERM/SIGINT. The
wire format is in ``protocol.py`` and docs/daemon.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import socketserver
import struct
import sys
import threading
import time

from supergrep import __version__
from supergrep.daemon import paths
from supergrep.daemon.engine import Engine
from supergrep.daemon.protocol import PROTOCOL_VERSION, LineReader, ProtocolError, encode, error
from supergrep.daemon.registry import ensure_private_dir
from supergrep.errors import DaemonError

log = logging.getLogger(__name__)


def _peer_uid(sock: socket.socket) -> int | None:
    """The connecting process's uid (Linux SO_PEERCRED; None where unsupported)."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return None
    try:
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i")))
    except OSError:
        return None
    return uid


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256  # listen backlog (socketserver's default of 5 overflows under bursts)
    daemon: Daemon


class _Connection(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        owner = self.server.daemon  # type: ignore[attr-defined]
        uid = _peer_uid(sock)
        if uid is not None and uid != os.getuid():
            log.warning("refused a connection from uid %d", uid)
            return
        reader = LineReader(sock)
        while True:
            try:
                message = reader.read()
            except ProtocolError as exc:
                self._send(sock, {"v": PROTOCOL_VERSION, **error("ProtocolError", str(exc), fallback=True)})
                return
            except OSError:
                return
            if message is None:
                return
            rid = message.get("id")
            head = {"v": PROTOCOL_VERSION, "id": rid} if rid is not None else {"v": PROTOCOL_VERSION}

            def notice(text: str, head=head) -> None:
                self._send(sock, {**head, "notice": text})

            if message.get("v") != PROTOCOL_VERSION:
                answer = error("ProtocolError", f"this daemon speaks protocol {PROTOCOL_VERSION}, "
                               f"not {message.get('v')!r}", fallback=True)
            elif message.get("op") == "stop":
                answer = {"ok": True, "pid": os.getpid()}
                owner.request_stop()
            elif message.get("op") == "argv":
                if not self._argv(sock, owner, message, head):
                    return
                continue
            elif message.get("op") in ("ping", "status"):
                answer = owner.engine.handle(message, notice)
                answer.update(socket=owner.socket_path, log=paths.log_path())
            else:
                answer = owner.engine.handle(message, notice)
            if not self._send(sock, {**head, **answer}):
                return

    def _argv(self, sock: socket.socket, owner: Daemon, message: dict, head: dict) -> bool:
        """The native client's request (``daemon/sgr.c``): its raw command line, parsed here by
        the launcher's own ``parse_search``; the answer's text follows its header line as raw
        bytes (no JSON string for a C client to unescape). Anything but output to show is sent as
        a plain protocol answer, which the client takes as "run the Python CLI"."""
        from supergrep.daemon.cmdline import parse_search

        argv, cwd, env = message.get("argv"), message.get("cwd"), message.get("env") or {}
        ok = (isinstance(argv, list) and all(isinstance(a, str) for a in argv) and isinstance(cwd, str)
              and isinstance(env, dict) and all(isinstance(v, str) for v in env.values()))
        request = parse_search(argv, cwd, env=env, tty=bool(message.get("tty"))) if ok else None
        if request is None:
            return self._send(sock, {**head, **error("Fallback", "not a plain search", fallback=True)})

        def notice(text: str) -> None:
            data = (text + "\n").encode("utf-8", "replace")
            self._send(sock, {**head, "notice_bytes": len(data)}, data)

        answer = owner.engine.handle(request, notice)
        out, code = answer.get("stdout"), answer.get("exit_code")
        if not answer.get("ok") or not isinstance(out, str) or code not in (0, 1):
            return self._send(sock, {**head, **answer, "ok": False})
        data = out.encode("utf-8", "replace")
        return self._send(sock, {**head, "ok": True, "exit_code": code, "bytes": len(data)}, data)

    @staticmethod
    def _send(sock: socket.socket, message: dict, raw: bytes = b"") -> bool:
        """One message line, then ``raw`` bytes (the ``argv`` op's text). False: the client left."""
        try:
            sock.sendall(encode(message) + raw)
            return True
        except OSError:  # the client went away (e.g. `| head` closed, or Ctrl-C)
            return False


class Daemon:
    """One daemon process.

    Args:
        engine: What answers requests (its ``start``/``stop`` are called by ``run``).
        socket_path: Where to listen (default ``paths.socket_path()``).
    """

    def __init__(self, engine: Engine, socket_path: str | None = None):
        self.engine = engine
        self.socket_path = socket_path or paths.socket_path()
        self._server: _Server | None = None
        self._lock_fd: int | None = None
        self._stopping = threading.Event()

    def _take_lock(self) -> None:
        ensure_private_dir(paths.daemon_dir())
        fd = os.open(paths.lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
        for _ in range(20):  # a concurrent `daemon status` may hold it for a moment
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._lock_fd = fd
                return
            except BlockingIOError:
                time.sleep(0.05)
        os.close(fd)
        pid = _read_pid()
        raise DaemonError(f"a daemon is already running (pid {pid}); `supergrep daemon stop` first")

    def _bind(self) -> _Server:
        sock_dir = os.path.dirname(self.socket_path)
        ensure_private_dir(sock_dir)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)  # stale: we hold the lock, so nobody else serves it
        old = os.umask(0o177)  # the socket is created 0600: only its owner can connect
        try:
            server = _Server(self.socket_path, _Connection)
        finally:
            os.umask(old)
        os.chmod(self.socket_path, 0o600)
        server.daemon = self  # type: ignore[attr-defined]
        return server

    def request_stop(self) -> None:
        """Stop serving (from any thread, or a signal handler)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._server is not None:
            threading.Thread(target=self._server.shutdown, name="sg-shutdown", daemon=True).start()

    def run(self) -> None:
        """Serve until stopped. Raises DaemonError when another daemon holds the lock."""
        self._take_lock()
        try:
            self._server = self._bind()
            pid_file = paths.pid_path()
            tmp = f"{pid_file}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"pid": os.getpid(), "socket": self.socket_path, "started": time.time(),
                           "version": __version__, "python": sys.executable}, fh)
            os.replace(tmp, pid_file)
            if threading.current_thread() is threading.main_thread():
                for sig in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(sig, lambda *_: self.request_stop())
            self.engine.start()
            log.info("supergrep %s daemon serving on %s (pid %d)", __version__, self.socket_path, os.getpid())
            if not self._stopping.is_set():
                self._server.serve_forever(poll_interval=0.5)
        finally:
            log.info("daemon stopping")
            if self._server is not None:
                self._server.server_close()
            self.engine.stop()
            for path in (self.socket_path, paths.pid_path()):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            if self._lock_fd is not None:
                os.close(self._lock_fd)
            log.info("daemon stopped")


def _read_pid() -> int | None:
    try:
        with open(paths.pid_path(), encoding="utf-8") as fh:
            return int(json.load(fh).get("pid"))
    except (OSError, ValueError, TypeError, AttributeError):
        return None
