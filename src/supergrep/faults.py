"""Fault injection for the crash tests (kill -9 at named points). A no-op unless
SUPERGREP_TEST_KILL_AT is set."""

from __future__ import annotations

import os

_KILL_AT = os.environ.get("SUPERGREP_TEST_KILL_AT", "")  # "point:N" (tests only)
_kill_counts: dict[str, int] = {}


def crashpoint(name: str) -> None:
    """Fault injection for the crash tests: with SUPERGREP_TEST_KILL_AT="name:N" the process
    SIGKILLs itself the N-th time it passes point ``name``. A no-op otherwise."""
    if not _KILL_AT:
        return
    point, _, nth = _KILL_AT.partition(":")
    if point != name:
        return
    _kill_counts[name] = _kill_counts.get(name, 0) + 1
    if _kill_counts[name] >= int(nth or 1):
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
