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
import mmap
import os
import struct
import sys
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


_MADV_POPULATE_READ = 22  # Linux >= 5.14 (Python's mmap module names it from 3.13 on)


def populate(arrays: list[np.ndarray | None]) -> int:
    """Map every page of memory-mapped arrays into this process now; returns the bytes covered.

    A search touches a few thousand scattered rows of a segment; the first touch of each page
    costs a page fault even when the file is in the page cache. On a 100K-chunk index (2.6 GB)
    gathering 128 fresh candidates took 9.7-12.2 ms this way and 1.4 ms once every page was
    mapped; MADV_POPULATE_READ maps all 2.6 GB in 0.17 s. Long-lived processes (the daemon,
    ``bench search``) call this once per segment; a one-shot CLI search does not (it touches
    ~1% of the pages). Elsewhere (macOS, older kernels) one byte per page is read instead."""
    done = 0
    for a in arrays:
        if a is None or a.size == 0:
            continue
        base = a
        while base is not None and not isinstance(base, mmap.mmap):
            base = getattr(base, "base", None)
        if base is None:
            continue  # in memory already
        try:
            if not sys.platform.startswith("linux"):
                raise OSError("no MADV_POPULATE_READ")
            base.madvise(_MADV_POPULATE_READ)
        except (OSError, ValueError, AttributeError):
            flat = np.asarray(a).reshape(-1).view(np.uint8)
            int(flat[:: mmap.PAGESIZE].max())  # one read per page
        done += a.nbytes
    return done
