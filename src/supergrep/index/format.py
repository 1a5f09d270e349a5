"""On-disk layout of an index, its manifest and its SQLite schema (with numbered migrations).

One index per project root::

    <index dir>/                         $SUPERGREP_HOME/indexes/<root name>-<hash of root path>
      manifest.json                      format_version, root, model (name, fingerprint, dim)
      meta.sqlite  (+ -wal, -shm)        files, chunks, segments, tombstones, FTS5 lexical index
      vectors/seg-00000001.npy           float16 (n_tokens, dim) token vectors, back to back
                                         (int8 + seg-00000001.scale.npy, float32 (n_tokens,),
                                         when the manifest's store says vector_dtype int8)
      vectors/seg-00000001.layout.npy    int64 (n_chunks, 3): chunk id, first token, n_tokens
                                         (sorted by chunk id)
      vectors/cseg-00000001.sgc          a compressed segment instead (centroid ids + residual
      vectors/codec-00000001.sgc         codes; its codec): one-file versioned containers
                                         (container.py, compressed.py), when the meta row
                                         vector_store is "compressed"
      write.lock                         held (flock) by the one process updating the index

A segment file becomes part of the index only when the SQLite transaction that inserts its
``segments`` row commits; files are fsynced and renamed into place before that, so a crash at
any moment leaves either the old state or the new one (orphan files are removed later).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from supergrep.config import supergrep_home
from supergrep.errors import IndexCorruptError
from supergrep.faults import crashpoint  # noqa: F401 - re-exported for the index modules

# 1: float16 vectors. 2: the manifest may name another vector kind ("store": {"vector_dtype":
# "int8"}); indexes that use it are written as version 2 so that an older supergrep, which
# would misread int8 segments, refuses them. float16 indexes are still written as version 1.
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
DB_FILE = "meta.sqlite"
VECTOR_DIR = "vectors"
LOCK_FILE = "write.lock"


def default_index_dir(root: Path) -> Path:
    """``$SUPERGREP_HOME/indexes/<name>-<12 hex of sha1(abs root)>``."""
    root = Path(root).resolve()
    digest = hashlib.sha1(str(root).encode()).hexdigest()[:12]
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in root.name) or "root"
    return supergrep_home() / "indexes" / f"{name}-{digest}"


@dataclass
class Manifest:
    root: str
    model: dict = field(default_factory=dict)  # name, fingerprint, dim, layout, path
    format_version: int = 1  # the oldest version that can read it (see FORMAT_VERSION)
    created: float = field(default_factory=time.time)
    supergrep_version: str = ""
    store: dict = field(default_factory=dict)  # {"vector_dtype": "int8"}; empty: float16

    @property
    def vector_dtype(self) -> str:
        return str(self.store.get("vector_dtype", "float16"))

    @classmethod
    def read(cls, index_dir: Path) -> Manifest | None:
        path = index_dir / MANIFEST
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError, OSError):
            raise IndexCorruptError(
                f"{path} is unreadable; run `supergrep index --force` to rebuild the index"
            ) from None
        if not isinstance(data, dict) or "root" not in data:
            raise IndexCorruptError(f"{path} is not a supergrep manifest; run `supergrep index --force`")
        if data.get("format_version", 0) > FORMAT_VERSION:
            raise IndexCorruptError(
                f"{index_dir} was written by a newer supergrep (format {data['format_version']}); upgrade supergrep"
            )
        known = {k: data[k] for k in ("root", "model", "format_version", "created", "supergrep_version", "store")
                 if k in data}
        return cls(**known)

    def write(self, index_dir: Path) -> None:
        atomic_write(index_dir / MANIFEST, json.dumps(asdict(self), indent=2).encode())


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write-then-rename, fsynced: readers see the old file or the new one, never a mix."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


# Each migration takes the schema from version i to i+1. Never edit one that has shipped:
# add the next.
MIGRATIONS: list[str] = [
    # 0 -> 1: the initial schema.
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE files (
        id INTEGER PRIMARY KEY,
        path TEXT NOT NULL UNIQUE,
        language TEXT,
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        sha256 TEXT NOT NULL,
        n_lines INTEGER NOT NULL,
        indexed_at REAL NOT NULL
    );
    CREATE TABLE chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,   -- never reused: a tombstoned id stays dead
        file_id INTEGER NOT NULL REFERENCES files(id),
        symbol TEXT NOT NULL,
        kind TEXT NOT NULL,
        language TEXT NOT NULL,
        start_line INTEGER NOT NULL,
        end_line INTEGER NOT NULL,
        part INTEGER NOT NULL,
        text TEXT NOT NULL,
        text_hash TEXT NOT NULL,               -- of the embedded text: lets edits reuse vectors
        n_tokens INTEGER NOT NULL
    );
    CREATE INDEX chunks_file ON chunks(file_id);
    CREATE INDEX chunks_hash ON chunks(text_hash);
    -- The vector store's own tables (store.py): where each chunk's vectors live.
    CREATE TABLE vec_chunks (
        chunk_id INTEGER PRIMARY KEY,
        seg INTEGER NOT NULL,
        offset INTEGER NOT NULL,
        n INTEGER NOT NULL
    );
    CREATE INDEX vec_chunks_seg ON vec_chunks(seg);
    CREATE TABLE segments (
        id INTEGER PRIMARY KEY,
        n_chunks INTEGER NOT NULL,
        n_vectors INTEGER NOT NULL,
        dead_chunks INTEGER NOT NULL DEFAULT 0,
        dead_vectors INTEGER NOT NULL DEFAULT 0,
        bytes INTEGER NOT NULL,
        created REAL NOT NULL
    );
    CREATE TABLE tombstones (chunk_id INTEGER PRIMARY KEY, seg INTEGER NOT NULL);
    CREATE VIRTUAL TABLE chunks_fts USING fts5(
        path, symbol, body,
        tokenize = "unicode61 remove_diacritics 0 tokenchars '_'"
    );
    """,
]


def connect(index_dir: Path, readonly: bool = False) -> sqlite3.Connection:
    """Open the index database (WAL; readers never block the writer or see half a commit)."""
    path = index_dir / DB_FILE
    if readonly:
        if not path.exists():
            raise IndexCorruptError(f"{path} is missing; run `supergrep index --force` to rebuild")
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30, isolation_level=None,
                               check_same_thread=False)
    else:
        conn = sqlite3.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout = 30000")
        if not readonly:
            conn.execute("PRAGMA journal_mode = WAL")
            # NORMAL in WAL mode: a kill -9 loses nothing committed; a power cut may roll back
            # the last commits but never corrupts (segment files are fsynced before commit).
            conn.execute("PRAGMA synchronous = NORMAL")
            # Only a schema that is behind needs the write lock: taking it unconditionally made
            # every new connection wait for whatever write was in progress (a long compaction
            # held a search up for its whole length). migrate() re-checks under the lock.
            if conn.execute("PRAGMA user_version").fetchone()[0] != len(MIGRATIONS):
                migrate(conn)
        else:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > len(MIGRATIONS):
                raise IndexCorruptError(f"{path} has schema {version}, newer than this supergrep; upgrade")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise IndexCorruptError(f"{path} is damaged ({exc}); run `supergrep index --force` to rebuild") from None
    return conn


def select_in(conn: sqlite3.Connection, sql: str, values: list):
    """Rows of ``sql`` whose ``{}`` is filled with placeholders for ``values``, queried 500 at a
    time (SQLite caps the variables of one statement)."""
    for start in range(0, len(values), 500):
        part = values[start : start + 500]
        yield from conn.execute(sql.format(",".join("?" * len(part))), part)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the schema up to date, one numbered migration per transaction."""
    while True:
        conn.execute("BEGIN IMMEDIATE")  # re-read under the write lock: another process may have migrated
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            conn.execute("ROLLBACK")
            raise IndexCorruptError("the index schema is newer than this supergrep; upgrade supergrep")
        if version == len(MIGRATIONS):
            conn.execute("COMMIT")
            return
        try:
            for stmt in _statements(MIGRATIONS[version]):
                conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def _statements(script: str) -> list[str]:
    """Split a migration script into statements (``sqlite3.complete_statement`` decides)."""
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        stripped = line.split("--", 1)[0] if "--" in line and "'" not in line else line
        buf += stripped
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out
