"""Where supergrep keeps its files: ``$SUPERGREP_HOME``.

Nothing but ``os`` and ``sys`` at import time: the daemon's client path (``launcher.py``) needs
this before anything heavy loads (even ``pathlib`` costs it a few milliseconds).
``supergrep.config`` re-exports ``supergrep_home``.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not `from typing import ...`: typing alone costs ~5 ms to import
if TYPE_CHECKING:
    from pathlib import Path


def home_dir() -> str:
    """``$SUPERGREP_HOME``, else the platform's per-user data directory (XDG on Linux)."""
    env = os.environ.get("SUPERGREP_HOME")
    if env:
        return os.path.expanduser(env)
    user = os.path.expanduser("~")
    if sys.platform == "darwin":
        return os.path.join(user, "Library", "Application Support", "supergrep")
    if os.name == "nt":  # pragma: no cover
        return os.path.join(os.environ.get("LOCALAPPDATA", user), "supergrep")
    xdg = os.environ.get("XDG_DATA_HOME")
    return os.path.join(xdg if xdg else os.path.join(user, ".local", "share"), "supergrep")


def supergrep_home() -> Path:
    """``home_dir()`` as a Path."""
    from pathlib import Path

    return Path(home_dir())
