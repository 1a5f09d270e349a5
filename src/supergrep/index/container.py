"""One-file container of named arrays, memory-mapped on read (compressed segments and codecs).

Layout (little-endian)::

    bytes 0-7     magic  b"SGCONT\\x00\\x01" (the last byte is the container version, 1)
    bytes 8-15    uint64 header length H
    bytes 16-     H bytes of UTF-8 JSON: {"kind": ..., "version": ..., "meta": {...},
                  "arrays": {name: {"dtype": "<u2", "shape": [...], "offset": N}}}
    then          each array's raw C-order bytes at its offset (64-byte aligned, from file start)

A file is written to a temporary name, fsynced and renamed into place, so it is either whole or
absent. ``kind`` and ``version`` say what is inside (``compressed-segment`` v2, ``residual-codec``
v1); a reader refuses a newer version with a one-line error.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np

from supergrep.errors import IndexCorruptError

MAGIC = b"SGCONT\x00\x01"
_ALIGN = 64


def write_container(path: Path, kind: str, version: int, arrays: dict[str, np.ndarray],
                    meta: dict | None = None) -> int:
    """Write durably (temp file, fsync, rename); returns the file size. The caller fsyncs the dir."""
    def header_for(start: int) -> tuple[bytes, dict]:
        entries, offset = {}, start
        for name, arr in arrays.items():
            offset = -(-offset // _ALIGN) * _ALIGN
            entries[name] = {"dtype": np.asarray(arr).dtype.str, "shape": list(np.shape(arr)), "offset": offset}
            offset += np.asarray(arr).nbytes
        return json.dumps({"kind": kind, "version": version, "meta": meta or {}, "arrays": entries}).encode(), entries

    # Reserve room for the header first (offsets only grow it by a few digits), then fill it in.
    reserved = -(-(16 + len(header_for(1 << 40)[0]) + 64) // _ALIGN) * _ALIGN
    header, entries = header_for(reserved)
    header += b" " * (reserved - 16 - len(header))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(MAGIC + struct.pack("<Q", len(header)) + header)
        for name, a in arrays.items():
            fh.seek(entries[name]["offset"])
            fh.write(np.ascontiguousarray(a).tobytes())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path.stat().st_size


def read_container(path: Path, kind: str, max_version: int) -> tuple[dict, dict[str, np.ndarray]]:
    """(meta, arrays); arrays are read-only memory maps. FileNotFoundError passes through."""
    with open(path, "rb") as fh:
        head = fh.read(16)
        if len(head) < 16 or head[:8] != MAGIC:
            raise IndexCorruptError(f"{path.name} is not a supergrep container; run `supergrep index --force`")
        (hlen,) = struct.unpack("<Q", head[8:])
        try:
            header = json.loads(fh.read(hlen).decode())
        except (ValueError, UnicodeDecodeError):
            raise IndexCorruptError(f"{path.name} has a damaged header; run `supergrep index --force`") from None
    if header.get("kind") != kind:
        raise IndexCorruptError(f"{path.name} holds {header.get('kind')!r}, expected {kind!r}; run `supergrep index --force`")
    if int(header.get("version", 0)) > max_version:
        raise IndexCorruptError(
            f"{path.name} is {kind} version {header.get('version')}, newer than this supergrep reads; upgrade supergrep")
    size = path.stat().st_size
    arrays: dict[str, np.ndarray] = {}
    for name, e in header["arrays"].items():
        dtype, shape, offset = np.dtype(e["dtype"]), tuple(e["shape"]), int(e["offset"])
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if offset + nbytes > size:
            raise IndexCorruptError(f"{path.name} is truncated; run `supergrep index --force`")
        if nbytes == 0:
            arrays[name] = np.zeros(shape, dtype)
        else:
            arrays[name] = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)
    return header.get("meta", {}), arrays
