"""Reading JSON Lines input (query sets, pairs, training data) with errors that name the line."""

from __future__ import annotations

import gzip
import json
import lzma
from collections.abc import Iterator
from pathlib import Path

from supergrep.errors import InputError


def read_jsonl(path: str | Path, what: str = "file") -> Iterator[tuple[str, dict]]:
    """Yield ``("<path>:<line>", object)`` for every non-blank line of a JSON Lines file
    (``.gz`` and ``.xz`` files are decompressed).

    Raises:
        InputError: the file is missing, unreadable or not UTF-8, or a line is not a JSON
            object; the message names the file and the line number.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        elif path.suffix == ".xz":
            raw = lzma.decompress(raw)
    except FileNotFoundError:
        raise InputError(f"{what} {path} does not exist") from None
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise InputError(f"cannot read {what} {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 (byte {exc.start}); save the file as UTF-8") from None
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise InputError(f"{where}: each line must be a JSON object")
        yield where, obj
