"""Where the daemon keeps its files (standard library only: the search client reads this).

Everything lives in ``$SUPERGREP_HOME/daemon/`` (mode 0700): ``daemon.sock``, ``daemon.pid``,
``daemon.lock`` (flock held while a daemon runs), ``daemon.log`` and ``projects.json`` (the
registry). A unix socket path must fit in ~107 bytes; when ``$SUPERGREP_HOME`` is too deep for
that, the socket goes to ``$XDG_RUNTIME_DIR`` (else ``/tmp/supergrep-$UID``, mode 0700) under a
name derived from the home directory, so each home still has its own daemon.
"""

from __future__ import annotations

import os

from supergrep.home import home_dir

SOCKET_NAME = "daemon.sock"
_MAX_SOCKET_BYTES = 100  # sun_path is 108 bytes on Linux, 104 on macOS, NUL included


def daemon_dir() -> str:
    return os.path.join(home_dir(), "daemon")


def socket_path() -> str:
    path = os.path.join(daemon_dir(), SOCKET_NAME)
    if len(os.fsencode(path)) <= _MAX_SOCKET_BYTES:
        return path
    import hashlib

    key = hashlib.sha1(os.fsencode(os.path.abspath(home_dir()))).hexdigest()[:16]
    return os.path.join(runtime_dir(), f"supergrep-{key}.sock")


def runtime_dir() -> str:
    """``$XDG_RUNTIME_DIR``, else ``/tmp/supergrep-$UID`` (for sockets under a too-deep home)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return xdg
    return os.path.join("/tmp", f"supergrep-{os.getuid()}")


def pid_path() -> str:
    return os.path.join(daemon_dir(), "daemon.pid")


def lock_path() -> str:
    return os.path.join(daemon_dir(), "daemon.lock")


def log_path() -> str:
    return os.path.join(daemon_dir(), "daemon.log")


def registry_path() -> str:
    return os.path.join(daemon_dir(), "projects.json")


def native_client() -> str | None:
    """The daemon's native search client (``daemon/sgr.c``, built by ``pip install`` where a C
    compiler is available), or None."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sgr")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
