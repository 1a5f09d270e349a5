"""Start, probe and stop the daemon process; detect and clean stale files.

A running daemon holds an flock on ``daemon.lock`` for its whole life, and the OS drops it
when the process dies, even by ``kill -9``. So "is one running?" is "is the lock held?", and
a socket or pid file found while the lock is free is stale and safe to delete.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from supergrep.daemon import client, paths
from supergrep.daemon.registry import ensure_private_dir
from supergrep.errors import DaemonError


@dataclass
class Probe:
    """What ``probe()`` found.

    Attributes:
        running: A daemon holds the lock.
        answering: Its ping answer (None when it does not answer: starting, or hung).
        pid: Its pid (from the ping, else the pid file).
        cleaned: Stale files that were removed.
    """

    running: bool
    answering: dict | None = None
    pid: int | None = None
    cleaned: list[str] = field(default_factory=list)


def read_pid_file() -> dict:
    try:
        with open(paths.pid_path(), encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def lock_held() -> bool:
    """Whether some process holds the daemon lock (i.e. a daemon runs)."""
    try:
        fd = os.open(paths.lock_path(), os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # releases the lock if we took it
    return False


def clean_stale() -> list[str]:
    """Remove the socket and pid file when no daemon holds the lock. Returns what was removed."""
    if lock_held():
        return []
    removed = []
    for path in (paths.socket_path(), paths.pid_path()):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    return removed


def probe(timeout: float = 2.0) -> Probe:
    """Is a daemon running and answering? Stale files are cleaned on the way."""
    answer = client.ping(timeout)
    if answer is not None:
        return Probe(True, answer, int(answer.get("pid", 0)) or None)
    if lock_held():
        pid = read_pid_file().get("pid")
        return Probe(True, None, int(pid) if isinstance(pid, int) else None)
    return Probe(False, cleaned=clean_stale())


def _abs_pythonpath(env: dict[str, str]) -> None:
    pp = env.get("PYTHONPATH")
    if pp:
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) if p else p for p in pp.split(os.pathsep))


def spawn(wait_s: float = 60.0, verbose: int = 0) -> Probe:
    """Start a daemon in the background (a new session, cwd /, output to the log) and wait
    until it answers.

    Raises:
        DaemonError: It exited or did not answer within ``wait_s`` (see the log).
    """
    ensure_private_dir(paths.daemon_dir())
    env = dict(os.environ)
    _abs_pythonpath(env)
    cmd = [sys.executable, "-m", "supergrep", "daemon", "start", "--foreground", "--log-only"]
    cmd += ["-v"] * verbose
    log_path = paths.log_path()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/", env=env,
                                start_new_session=True, close_fds=True)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        answer = client.ping(1.0)
        if answer is not None:
            return Probe(True, answer, int(answer.get("pid", proc.pid)))
        code = proc.poll()
        if code is not None:
            raise DaemonError(f"the daemon exited at start (status {code}); see {log_path}")
        time.sleep(0.05)
    raise DaemonError(f"the daemon did not answer within {wait_s:.0f} s; see {log_path}")


def stop(timeout: float = 10.0) -> bool:
    """Ask the daemon to stop; after ``timeout`` send SIGTERM, then SIGKILL. Returns whether
    one was running."""
    state = probe()
    if not state.running:
        return False
    pid = state.pid
    with contextlib.suppress(client.DaemonUnavailable, client.DaemonError):
        client.call({"op": "stop"}, timeout=timeout)
    deadline = time.monotonic() + timeout
    sent = None
    while lock_held():
        if time.monotonic() > deadline:
            if pid is None or sent == signal.SIGKILL:
                raise DaemonError(f"the daemon (pid {pid}) does not stop; see {paths.log_path()}")
            sent = signal.SIGTERM if sent is None else signal.SIGKILL
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sent)
            deadline = time.monotonic() + 5
        time.sleep(0.05)
    clean_stale()
    return True
