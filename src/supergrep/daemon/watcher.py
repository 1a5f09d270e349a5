"""File watching for registered projects: watchdog events -> debounced batches of paths.

One watchdog Observer (inotify on Linux, FSEvents on macOS) with one recursive watch per
project. Events are sorted into what the indexer needs:

- a file created, modified, deleted or renamed: its root-relative path (both names of a rename);
- a directory created, deleted or renamed, an ignore file (``.gitignore``, ``.ignore``) or the
  project's ``.supergrep.toml`` changing, or the root itself going away: "walk the project";
- anything under a hidden or excluded directory (``.git``, ``node_modules``, ...), a hidden
  file (editors' swap and temp files) or the index directory: nothing.

A project's batch is handed on once its events have been quiet for ``debounce_s``, or
``max_delay_s`` after the burst began, whichever comes first (an editor's save is 2-4 events
within a millisecond; a ``git checkout`` can be thousands over a second).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path

from supergrep.config import WalkConfig

log = logging.getLogger(__name__)

WALK = object()  # classify(): the change needs a walk of the whole project
CONFIG_FILES = (".gitignore", ".ignore")


def classify(root: str, path: str, is_dir: bool, cfg: WalkConfig, skip_dir: str | None = None):
    """What an event at ``path`` means for the project at ``root``: a root-relative file path,
    ``WALK``, or None (nothing to do)."""
    if path == root:
        return WALK  # the root itself was deleted or moved
    rel = os.path.relpath(path, root)
    if rel.startswith(".."):
        return None
    if skip_dir is not None and (rel == skip_dir or rel.startswith(skip_dir + os.sep)):
        return None
    parts = rel.split(os.sep)
    excluded = cfg.excluded_dirs
    for name in parts[:-1]:
        if name == ".git" or name in excluded or (name.startswith(".") and not cfg.include_hidden):
            return None
    name = parts[-1]
    if not is_dir and (name in CONFIG_FILES or rel == ".supergrep.toml"):
        return WALK
    if name.startswith(".") and not cfg.include_hidden:
        return None
    if is_dir:
        return None if name == ".git" or name in excluded else WALK
    return "/".join(parts)


@dataclass
class _Burst:
    first: float
    last: float
    paths: set[str] = field(default_factory=set)
    walk: bool = False


class Watcher:
    """Watches project roots and calls ``on_batch(key, paths, walk)`` from its own thread.

    Args:
        on_batch: Receives a project key, the changed root-relative paths and whether the
            project needs a full walk.
        debounce_s: Quiet time that ends a burst.
        max_delay_s: Longest a burst is held back.
        max_paths: A burst with more paths than this becomes a walk.
    """

    def __init__(self, on_batch: Callable[[Hashable, set[str], bool], None], debounce_s: float = 0.2,
                 max_delay_s: float = 1.0, max_paths: int = 256):
        from watchdog.observers import Observer

        self._observer_cls = Observer
        self.on_batch = on_batch
        self.debounce_s, self.max_delay_s, self.max_paths = debounce_s, max_delay_s, max_paths
        self._cv = threading.Condition()
        self._bursts: dict[Hashable, _Burst] = {}
        self._watches: dict[Hashable, tuple[str, object, object]] = {}  # key -> (root, watch, handler)
        self._observer = Observer()
        self._observer.daemon = True
        self._stop = False
        self._thread = threading.Thread(target=self._flush_loop, name="sg-debounce", daemon=True)

    def start(self) -> None:
        self._observer.start()
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        try:
            self._observer.stop()
            self._observer.join(timeout=2)
        except (RuntimeError, OSError):  # pragma: no cover - stopping a dead observer
            pass

    def alive(self) -> bool:
        return self._observer.is_alive()

    def restart(self) -> None:
        """A fresh observer with every watch re-added (the old one died)."""
        watched = {k: (root, h) for k, (root, _, h) in self._watches.items()}
        try:
            self._observer.stop()
        except (RuntimeError, OSError):  # pragma: no cover
            pass
        self._observer = self._observer_cls()
        self._observer.daemon = True
        self._watches.clear()
        self._observer.start()
        for key, (root, handler) in watched.items():
            try:
                self._schedule(key, root, handler)
            except OSError as exc:
                log.warning("cannot watch %s again: %s", root, exc)

    def watching(self, key: Hashable) -> bool:
        return key in self._watches

    def watch(self, key: Hashable, root: Path, cfg: WalkConfig, index_dir: Path | None = None) -> None:
        """Start watching ``root`` recursively.

        Raises:
            OSError: The root is missing, or the system's watch limit is reached
                (``fs.inotify.max_user_watches`` / ``max_user_instances`` on Linux).
        """
        if key in self._watches:
            return
        root_s = str(root)
        skip = None
        if index_dir is not None:
            rel = os.path.relpath(index_dir, root_s)
            skip = None if rel.startswith("..") else rel
        handler = _Handler(self, key, root_s, cfg, skip)
        self._schedule(key, root_s, handler)

    def _schedule(self, key: Hashable, root: str, handler: _Handler) -> None:
        if not os.path.isdir(root):
            raise FileNotFoundError(f"{root} is not a directory")
        watch = self._observer.schedule(handler, root, recursive=True)
        self._watches[key] = (root, watch, handler)

    def unwatch(self, key: Hashable) -> None:
        entry = self._watches.pop(key, None)
        with self._cv:
            self._bursts.pop(key, None)
        if entry is None:
            return
        try:
            self._observer.unschedule(entry[1])
        except (KeyError, OSError, RuntimeError):
            pass  # its emitter already stopped (the root went away)

    def note(self, key: Hashable, path: str | None = None, walk: bool = False) -> None:
        """Record one change (called by the event handler)."""
        now = time.monotonic()
        with self._cv:
            burst = self._bursts.get(key)
            if burst is None:
                burst = self._bursts[key] = _Burst(now, now)
                self._cv.notify_all()
            burst.last = now
            if walk:
                burst.walk = True
                burst.paths.clear()
            elif not burst.walk:
                burst.paths.add(path)
                if len(burst.paths) > self.max_paths:
                    burst.walk = True
                    burst.paths.clear()

    def _flush_loop(self) -> None:
        while True:
            due: list[tuple[Hashable, _Burst]] = []
            with self._cv:
                if self._stop:
                    return
                now = time.monotonic()
                wait = None
                for key, b in list(self._bursts.items()):
                    deadline = min(b.last + self.debounce_s, b.first + self.max_delay_s)
                    if deadline <= now:
                        due.append((key, self._bursts.pop(key)))
                    else:
                        wait = deadline - now if wait is None else min(wait, deadline - now)
                if not due:
                    self._cv.wait(wait)
                    continue
            for key, b in due:
                try:
                    self.on_batch(key, b.paths, b.walk)
                except Exception:  # the watcher must outlive any one project
                    log.exception("handling changes of %s failed", key)


class _Handler:
    """watchdog's handler interface (``dispatch``), without subclassing at import time."""

    def __init__(self, watcher: Watcher, key: Hashable, root: str, cfg: WalkConfig, skip: str | None):
        self.watcher, self.key, self.root, self.cfg, self.skip = watcher, key, root, cfg, skip

    def dispatch(self, event) -> None:
        kind = event.event_type
        if kind in ("opened", "closed_no_write") or (event.is_directory and kind == "modified"):
            return
        names = [event.src_path]
        if kind == "moved":
            names.append(event.dest_path)
        for name in names:
            if isinstance(name, bytes):
                name = os.fsdecode(name)
            what = classify(self.root, name, event.is_directory, self.cfg, self.skip)
            if what is WALK:
                self.watcher.note(self.key, walk=True)
            elif what is not None:
                self.watcher.note(self.key, what)
