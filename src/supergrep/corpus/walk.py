"""Walk a project the way its developers see it: ignore rules honoured, junk left out.

- Ignore files use gitignore syntax through ``pathspec`` (the library pip and black use):
  ``.gitignore`` and ``.ignore`` in every directory (a deeper file wins, ``.ignore`` over
  ``.gitignore`` in the same directory), ``.git/info/exclude`` and git's global excludes
  file (``core.excludesFile``, else ``$XDG_CONFIG_HOME/git/ignore``).
- Hidden files and directories, vendored/generated directories (``node_modules``, ``target``,
  ``.venv``, ...) and files over the size cap are skipped; binary files are detected when read.
- Symbolic links are followed only while they stay inside the root, each real directory is
  visited once (so link loops end), and a file or directory that vanishes, or cannot be read,
  mid-walk is reported and skipped, never fatal.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

from supergrep.config import WalkConfig
from supergrep.corpus.languages import detect_language
from supergrep.corpus.types import Source

log = logging.getLogger(__name__)

BINARY_SNIFF_BYTES = 8192


@dataclass
class WalkStats:
    """What the walk left out, by reason (reported by ``supergrep index``)."""

    skipped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)

    def skip(self, reason: str, path: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
        self.examples.setdefault(reason, path)


class SkipFile(Exception):
    """A file that cannot be indexed; ``reason`` is one of the WalkStats keys."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class FileContent:
    text: str
    sha256: str
    size: int


def read_source(source: Source, max_bytes: int) -> FileContent:
    """Read and decode a walked file.

    Raises:
        SkipFile: "vanished", "unreadable", "too large" or "binary" (a NUL byte in the
            first 8 KiB, as git and ripgrep decide).
    """
    try:
        with open(source.abspath, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise SkipFile("vanished") from None
    except (PermissionError, IsADirectoryError, OSError):
        raise SkipFile("unreadable") from None
    if len(data) > max_bytes:
        raise SkipFile("too large")
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise SkipFile("binary")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    # Invalid UTF-8 is decoded with U+FFFD replacements: the rest of the file stays searchable.
    text = data.decode("utf-8", errors="replace")
    return FileContent(text=text, sha256=hashlib.sha256(data).hexdigest(), size=len(data))


def _global_excludes_file() -> Path | None:
    """git's global excludes file: core.excludesFile from ~/.gitconfig, else the XDG default."""
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    for cfg in (Path.home() / ".gitconfig", xdg / "git" / "config"):
        try:
            text = cfg.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        section = ""
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("["):
                section = line.strip("[]").strip().lower()
            elif section == "core":
                m = re.match(r"excludesfile\s*=\s*(.+)", line, re.IGNORECASE)
                if m:
                    return Path(os.path.expanduser(m.group(1).strip().strip('"')))
    default = xdg / "git" / "ignore"
    return default if default.is_file() else None


def _read_patterns(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


class _Rules:
    """Ignore rules in force in one directory: a stack of (base dir, spec), deepest last."""

    def __init__(self, stack: list[tuple[str, pathspec.PathSpec]]):
        self.stack = stack

    def push(self, rel_dir: str, spec: pathspec.PathSpec | None) -> _Rules:
        return _Rules([*self.stack, (rel_dir, spec)]) if spec is not None else self

    def ignored(self, rel: str, is_dir: bool) -> bool:
        for base, spec in reversed(self.stack):
            sub = rel[len(base) + 1 :] if base else rel
            result = spec.check_file(sub + "/" if is_dir else sub)
            if result.include is not None:
                return bool(result.include)
        return False


def _root_rules(root_path: Path, cfg: WalkConfig) -> _Rules:
    """The rules in force above the root: git's global excludes and .git/info/exclude."""
    if not cfg.respect_ignore_files:
        return _Rules([])
    extra: list[str] = []
    gfile = _global_excludes_file()
    if gfile is not None:
        extra += _read_patterns(gfile)
    extra += _read_patterns(root_path / ".git" / "info" / "exclude")
    return _Rules([("", pathspec.GitIgnoreSpec.from_lines(extra))] if extra else [])


def _user_excludes(cfg: WalkConfig) -> pathspec.PathSpec | None:
    """``exclude_globs``: applied last, so no ignore file can re-include what they exclude."""
    return pathspec.GitIgnoreSpec.from_lines(cfg.exclude_globs) if cfg.exclude_globs else None


def _dir_spec(directory: Path, names: set[str]) -> pathspec.PathSpec | None:
    lines: list[str] = []
    # Later lines win in gitignore semantics, so .ignore (higher precedence) comes last.
    for fname in (".gitignore", ".ignore"):
        if fname in names:
            lines += _read_patterns(directory / fname)
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


def walk(root: str | os.PathLike, cfg: WalkConfig | None = None, stats: WalkStats | None = None,
         languages: set[str] | None = None) -> Iterator[Source]:
    """Yield the indexable files under ``root``, sorted within each directory.

    Args:
        root: Project root; every yielded path is relative to it.
        cfg: Walk settings (defaults when None).
        stats: Collects what was skipped and why.
        languages: Restrict to these language names; None means every known language.
    """
    cfg = cfg or WalkConfig()
    stats = stats if stats is not None else WalkStats()
    root_path = Path(root).resolve()
    real_root = str(root_path)
    base_rules = _root_rules(root_path, cfg)
    user = _user_excludes(cfg)
    excluded = set(cfg.excluded_dirs)
    visited: set[tuple[int, int]] = set()

    def inside_root(path: str) -> bool:
        real = os.path.realpath(path)
        return real == real_root or real.startswith(real_root + os.sep)

    def visit(dir_abs: str, rel_dir: str, rules: _Rules) -> Iterator[Source]:
        try:
            st = os.stat(dir_abs)
        except OSError:
            stats.skip("vanished", rel_dir or ".")
            return
        key = (st.st_dev, st.st_ino)
        if key in visited:  # a link loop, or a second link to a directory already walked
            stats.skip("symlink loop", rel_dir)
            return
        visited.add(key)
        try:
            with os.scandir(dir_abs) as it:
                entries = sorted(it, key=lambda e: e.name)
        except FileNotFoundError:
            stats.skip("vanished", rel_dir or ".")
            return
        except OSError:
            stats.skip("unreadable", rel_dir or ".")
            return
        if cfg.respect_ignore_files:
            rules = rules.push(rel_dir, _dir_spec(Path(dir_abs), {e.name for e in entries}))
        for entry in entries:
            name = entry.name
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if name.startswith(".") and not cfg.include_hidden:
                continue
            try:
                is_link = entry.is_symlink()
                if is_link and not inside_root(entry.path):
                    stats.skip("symlink outside root", rel)
                    continue
                is_dir = entry.is_dir()  # follows links (already known to stay inside root)
                is_file = not is_dir and entry.is_file()
            except OSError:
                stats.skip("vanished", rel)
                continue
            if is_dir:
                if name in excluded or name == ".git":
                    continue
                if rules.ignored(rel, True) or (user is not None and user.match_file(rel + "/")):
                    continue
                yield from visit(entry.path, rel, rules)
                continue
            if not is_file:
                continue  # sockets, fifos, devices, dangling links
            if rules.ignored(rel, False) or (user is not None and user.match_file(rel)):
                continue
            spec = detect_language(rel)
            if spec is None:
                continue
            if languages is not None and spec.name not in languages:
                continue
            try:
                fst = entry.stat()
            except FileNotFoundError:
                stats.skip("vanished", rel)
                continue
            except OSError:
                stats.skip("unreadable", rel)
                continue
            if not stat.S_ISREG(fst.st_mode):
                continue
            if fst.st_size > cfg.max_file_bytes:
                stats.skip("too large", rel)
                continue
            yield Source(rel, entry.path, spec.name, fst.st_size, fst.st_mtime_ns)

    if not root_path.is_dir():
        return
    yield from visit(str(root_path), "", base_rules)


class WalkRequired(Exception):
    """A path whose fate only a full walk can decide (a symbolic link on the way to it)."""


def source_at(root: str | os.PathLike, rel: str, cfg: WalkConfig | None = None,
              stats: WalkStats | None = None, languages: set[str] | None = None) -> Source | None:
    """What ``walk(root, ...)`` would yield for the one file ``rel``, without walking.

    The file watcher's cheap path: the same rules as ``walk`` (hidden names, excluded
    directories, every ``.gitignore``/``.ignore`` from the root down, git's excludes, the
    user's globs, language, size), applied along the path only.

    Args:
        rel: A root-relative path with ``/`` separators.

    Returns:
        The Source, or None when the walk would not yield the file (missing, ignored, not a
        known language, too large, not a regular file).

    Raises:
        WalkRequired: A directory on the way is a symbolic link (the walk visits each real
            directory once, under the first name it meets, which only a walk can tell).
    """
    cfg = cfg or WalkConfig()
    stats = stats if stats is not None else WalkStats()
    root_path = Path(root).resolve()
    parts = [p for p in rel.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        return None
    rules = _root_rules(root_path, cfg)
    user = _user_excludes(cfg)
    excluded = set(cfg.excluded_dirs)

    def push_dir(rules: _Rules, directory: Path, rel_dir: str) -> _Rules:
        if not cfg.respect_ignore_files:
            return rules
        names = {n for n in (".gitignore", ".ignore") if (directory / n).is_file()}
        return rules.push(rel_dir, _dir_spec(directory, names))

    if not root_path.is_dir():
        return None
    rules = push_dir(rules, root_path, "")
    directory, rel_dir = root_path, ""
    for name in parts[:-1]:
        sub = f"{rel_dir}/{name}" if rel_dir else name
        if name.startswith(".") and not cfg.include_hidden:
            return None
        if name in excluded or name == ".git":
            return None
        path = directory / name
        if path.is_symlink():
            raise WalkRequired(sub)
        if not path.is_dir():
            return None
        if rules.ignored(sub, True) or (user is not None and user.match_file(sub + "/")):
            return None
        directory, rel_dir = path, sub
        rules = push_dir(rules, directory, rel_dir)
    name = parts[-1]
    rel = f"{rel_dir}/{name}" if rel_dir else name
    if name.startswith(".") and not cfg.include_hidden:
        return None
    path = directory / name
    try:
        if path.is_symlink():
            real = os.path.realpath(path)
            if not (real == str(root_path) or real.startswith(str(root_path) + os.sep)):
                stats.skip("symlink outside root", rel)
                return None
        if path.is_dir() or not path.is_file():
            return None
    except OSError:
        return None
    if rules.ignored(rel, False) or (user is not None and user.match_file(rel)):
        return None
    spec = detect_language(rel)
    if spec is None or (languages is not None and spec.name not in languages):
        return None
    try:
        fst = path.stat()
    except FileNotFoundError:
        return None
    except OSError:
        stats.skip("unreadable", rel)
        return None
    if not stat.S_ISREG(fst.st_mode):
        return None
    if fst.st_size > cfg.max_file_bytes:
        stats.skip("too large", rel)
        return None
    return Source(rel, str(path), spec.name, fst.st_size, fst.st_mtime_ns)
