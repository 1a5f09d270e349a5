"""The registered projects, persisted in ``$SUPERGREP_HOME/daemon/projects.json``.

``{"version": 1, "projects": [{"root", "index_dir", "model_path", "config", "added"}, ...]}``.
A project is keyed by (root, index_dir); ``None`` values mean the defaults. Writes are atomic
(temp file + rename) under an flock, so the daemon and a CLI that finds no daemon running can
both edit the file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from supergrep.daemon import paths

log = logging.getLogger(__name__)

REGISTRY_VERSION = 1


@dataclass
class Entry:
    root: str
    index_dir: str | None = None
    model_path: str | None = None
    config: str | None = None
    added: float = field(default_factory=time.time)

    @property
    def key(self) -> tuple[str, str]:
        return (self.root, self.index_dir or "")


def ensure_private_dir(path: str) -> None:
    """Create ``path`` (mode 0700) or check that an existing one is ours and private."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to another user; remove it or set SUPERGREP_HOME")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


def load(path: str | None = None) -> list[Entry]:
    """The registered projects (an unreadable file counts as empty, and is logged)."""
    path = path or paths.registry_path()
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("ignoring the unreadable project registry %s (%s)", path, exc)
        return []
    out = []
    for item in data.get("projects", []) if isinstance(data, dict) else []:
        if isinstance(item, dict) and isinstance(item.get("root"), str):
            out.append(Entry(**{k: item[k] for k in ("root", "index_dir", "model_path", "config", "added") if k in item}))
    return out


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    ensure_private_dir(os.path.dirname(path))
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _save(entries: list[Entry], path: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"version": REGISTRY_VERSION, "projects": [asdict(e) for e in entries]}, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def add(entry: Entry, path: str | None = None) -> bool:
    """Register (or update) a project. Returns True when it was not registered before."""
    path = path or paths.registry_path()
    with _locked(path):
        entries = load(path)
        new = all(e.key != entry.key for e in entries)
        kept = [e for e in entries if e.key != entry.key]
        old = next((e for e in entries if e.key == entry.key), None)
        if old is not None:
            entry.added = old.added
            if old == entry:
                return False
        _save([*kept, entry], path)
        return new


def remove(root: str, index_dir: str | None = None, path: str | None = None) -> bool:
    """Unregister a project (every index dir of ``root`` when ``index_dir`` is None)."""
    path = path or paths.registry_path()
    with _locked(path):
        entries = load(path)
        kept = [e for e in entries if not (e.root == root and (index_dir is None or (e.index_dir or "") == index_dir))]
        if len(kept) == len(entries):
            return False
        _save(kept, path)
        return True
