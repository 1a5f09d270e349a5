"""An index of one project root: manifest, SQLite catalog (files, chunks, FTS5) and vectors."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from supergrep import __version__
from supergrep.corpus.types import Chunk
from supergrep.errors import (
    IndexBusyError,
    IndexCorruptError,
    IndexMissingError,
    ModelMismatchError,
    UsageError,
)
from supergrep.index.compressed import CompressedStore, CompressSettings, store_kind
from supergrep.index.format import (
    DB_FILE,
    LOCK_FILE,
    MANIFEST,
    VECTOR_DIR,
    Manifest,
    connect,
    default_index_dir,
    select_in,
)
from supergrep.index.mirror import Mirror
from supergrep.index.store import VECTOR_DTYPES, SegmentStore, VectorStore
from supergrep.scoring.bm25 import code_terms, query_terms

log = logging.getLogger(__name__)

# FTS5 bm25() column weights: path, symbol, body. A query word in the symbol name or the path
# says more than one somewhere in a body.
BM25_WEIGHTS = (2.0, 4.0, 1.0)


@dataclass(frozen=True)
class ChunkRow:
    id: int
    path: str
    language: str
    symbol: str
    kind: str
    start_line: int
    end_line: int
    part: int
    text: str
    n_tokens: int


def fts_rows(path: str, chunks: list[Chunk]) -> list[tuple[str, str, str]]:
    """Each chunk's FTS5 columns (path, symbol, body): its lexical terms, space-separated."""
    path_terms = " ".join(code_terms(path))
    return [(path_terms, " ".join(code_terms(c.symbol)), " ".join(code_terms(c.text))) for c in chunks]


def find_project_root(start: Path) -> Path:
    """The directory a search from ``start`` is about: the nearest ancestor that already has an
    index, else the enclosing git work tree, else ``start`` itself."""
    start = start.resolve()
    for d in [start, *start.parents]:
        if (default_index_dir(d) / MANIFEST).is_file():
            return d
    try:
        out = subprocess.run(["git", "-C", str(start), "rev-parse", "--show-toplevel"],
                             capture_output=True, text=True, timeout=5)
        if out.returncode == 0 and out.stdout.strip():
            return Path(out.stdout.strip()).resolve()
    except (OSError, subprocess.SubprocessError):
        pass
    return start


def search_root(path: str | None, cwd: Path | None = None) -> tuple[Path, str | None]:
    """(project root, sub-path filter) for a search from PATH (default: the working directory).

    PATH inside an indexed project searches that project restricted to PATH; otherwise PATH
    (or the enclosing git work tree, for the working directory) is the project. ``cwd``
    resolves a relative PATH (the daemon answers clients that run in other directories).

    Raises:
        UsageError: PATH does not exist (the message shows PATH as given).
    """
    base = Path(cwd) if cwd is not None else Path.cwd()
    given = Path(path).expanduser() if path else None
    start = base / given if given is not None else base
    if not start.exists():
        raise UsageError(f"{given if given is not None else start} does not exist; "
                         "pass a directory inside the project to search")
    start = start.resolve()
    directory = start if start.is_dir() else start.parent
    root = find_project_root(directory) if not path else None
    if root is None:
        root = directory
        for d in [directory, *directory.parents]:
            if (default_index_dir(d) / MANIFEST).is_file():
                root = d
                break
    sub = os.path.relpath(start, root) if start != root else None
    if sub is not None and (sub == "." or sub.startswith("..")):
        sub = None
    return root, sub


class Index:
    """One project's index.

    Args:
        root: The project root directory.
        index_dir: Where the index lives; default ``$SUPERGREP_HOME/indexes/<name>-<hash>``.
    """

    def __init__(self, root: Path, index_dir: Path | None = None, cache_bytes: int = 0):
        self.root = Path(root).resolve()
        self.cache_bytes = cache_bytes
        self.dir = Path(index_dir).resolve() if index_dir else default_index_dir(self.root)
        self._conn: sqlite3.Connection | None = None
        self._store: VectorStore | None = None
        self.compress = CompressSettings()  # index/search knobs of the compressed store
        self._manifest: Manifest | None = None
        self._side: Index | None = None  # side_handle()
        self._mirror: Mirror | None = None

    # --------------------------------------------------------------------------- opening
    def exists(self) -> bool:
        return (self.dir / MANIFEST).is_file() and (self.dir / DB_FILE).is_file()

    @property
    def manifest(self) -> Manifest:
        if self._manifest is None:
            m = Manifest.read(self.dir)
            if m is None:
                raise IndexMissingError(
                    f"{self.root} has no index yet; run `supergrep index {self.root}` first"
                )
            self._manifest = m
        return self._manifest

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            if not self.exists():
                raise IndexMissingError(f"{self.root} has no index yet; run `supergrep index {self.root}` first")
            self._conn = connect(self.dir)
        return self._conn

    @property
    def store(self) -> VectorStore:
        if self._store is None:
            dim = int(self.manifest.model.get("dim", 0))
            if dim <= 0:
                raise IndexCorruptError(f"{self.dir / MANIFEST} has no model dim; run `supergrep index --force`")
            if store_kind(self.conn) == "compressed":
                self._store = CompressedStore(self.dir, dim, self.compress)
            else:
                dtype = self.manifest.vector_dtype
                if dtype not in VECTOR_DTYPES:
                    raise IndexCorruptError(f"{self.dir / MANIFEST} names vector type {dtype!r}, which this "
                                            f"supergrep cannot read; upgrade it or run `supergrep index --force`")
                self._store = SegmentStore(self.dir, dim, cache_bytes=self.cache_bytes, vector_dtype=dtype)
        return self._store

    def handle(self) -> Index:
        """Another handle on this index, for another thread: its own SQLite connection, this
        handle's vector store (one float32 cache serves every thread of a long-lived process).
        A store of the wrong kind (another handle converted the index to the compressed store)
        is reopened first."""
        if self._store is not None and isinstance(self._store, CompressedStore) != (store_kind(self.conn) == "compressed"):
            self._store = None
        other = Index(self.root, self.dir, self.cache_bytes)
        other._manifest = self.manifest
        other.compress = self.compress
        other._store = self.store  # type: ignore[assignment]
        other._mirror = self.mirror
        return other

    @property
    def mirror(self) -> Mirror:
        """The in-memory catalog (BM25, chunk metadata) shared by this handle's family: off until
        a long-lived process sets its ``max_chunks`` (``index/mirror.py``)."""
        if self._mirror is None:
            self._mirror = Mirror(self.dir, BM25_WEIGHTS)
        return self._mirror

    def side_handle(self) -> Index:
        """A second handle kept with this one, for work this handle's thread hands to another
        (hybrid search's BM25): opened once, closed with this handle."""
        if self._side is None:
            self._side = self.handle()
        return self._side

    def drop_store(self) -> None:
        """Forget the store object (after a conversion the next access opens the new kind)."""
        self._store = None

    @property
    def store_kind(self) -> str:
        """"exact" (float16 segments) or "compressed" (codes + residuals)."""
        return store_kind(self.conn)

    def configure(self, index_cfg=None, search_cfg=None) -> None:
        """Take the compressed store's knobs from an ``IndexConfig`` and/or ``SearchConfig``."""
        c = self.compress
        if index_cfg is not None:
            c.nbits, c.pool_factor = index_cfg.nbits, index_cfg.pool_factor
            c.components = index_cfg.components
            c.n_centroids, c.drift_ratio = index_cfg.centroids, index_cfg.drift_ratio
        if search_cfg is not None:
            c.nprobe, c.candidates, c.rerank = search_cfg.nprobe, search_cfg.ncandidates, search_cfg.rerank
            c.integer_scores = search_cfg.integer_scores

    def close(self) -> None:
        if self._side is not None:
            self._side.close()
            self._side = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._store = None

    def create(self, model: dict, vector_dtype: str = "float16") -> None:
        """Create an empty index for ``model`` (name, fingerprint, dim, ...) storing its vectors
        as ``vector_dtype`` (float16 or int8)."""
        if vector_dtype not in VECTOR_DTYPES:
            raise UsageError(f"vector_dtype must be one of {', '.join(VECTOR_DTYPES)}, not {vector_dtype!r}")
        self.close()
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / VECTOR_DIR).mkdir(exist_ok=True)
        connect(self.dir).close()
        int8 = vector_dtype != "float16"
        m = Manifest(root=str(self.root), model=dict(model), supergrep_version=__version__,
                     store={"vector_dtype": vector_dtype} if int8 else {}, format_version=2 if int8 else 1)
        m.write(self.dir)  # last: an index "exists" once its manifest does
        self._manifest = m

    def wipe(self) -> None:
        """Delete the index's files (the caller holds the write lock)."""
        self.close()
        self._manifest = None
        for name in (MANIFEST, DB_FILE, DB_FILE + "-wal", DB_FILE + "-shm"):
            with contextlib.suppress(FileNotFoundError):
                (self.dir / name).unlink()
        shutil.rmtree(self.dir / VECTOR_DIR, ignore_errors=True)

    def check_model(self, fingerprint: str, name: str, compatible: list[str] | tuple[str, ...] = ()) -> None:
        """Refuse a model whose vectors differ from the index's.

        ``compatible`` (and the manifest's own list) name other fingerprints whose vectors match
        within tolerance: the float model an export or quantization came from
        (``ModelSpec.compatible_fingerprints``), so an index built with torch can be searched
        with its ONNX export and the other way round.
        """
        built = self.manifest.model
        theirs = {built.get("fingerprint"), *(built.get("compatible") or [])}
        if not ({fingerprint, *compatible} & theirs):
            raise ModelMismatchError(
                f"the index of {self.root} was built with model '{built.get('name')}' "
                f"({str(built.get('fingerprint', ''))[:12]}), not '{name}' ({fingerprint[:12]}); "
                f"re-index with `supergrep index --force` or pass the index's --model-path "
                f"{built.get('path', '')}".rstrip()
            )

    @contextlib.contextmanager
    def write_lock(self, wait_s: float = 600.0) -> Iterator[None]:
        """Exclusive writer lock (flock: released by the OS if the process dies)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise IndexBusyError(
                            f"another supergrep process is updating {self.dir}; wait for it to finish"
                        ) from None
                    time.sleep(0.1)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    # ----------------------------------------------------------------------- catalog reads
    def meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def file_states(self, paths: list[str] | None = None) -> dict[str, tuple[int, int, int, str]]:
        """path -> (file id, size, mtime_ns, sha256), for every file or just ``paths``."""
        sql = "SELECT id, path, size, mtime_ns, sha256 FROM files"
        if paths is None:
            return {path: (fid, size, mtime, sha) for fid, path, size, mtime, sha in self.conn.execute(sql)}
        return {path: (fid, size, mtime, sha)
                for fid, path, size, mtime, sha in self._select_in(f"{sql} WHERE path IN ({{}})", paths)}

    def _select_in(self, sql: str, values: list):
        return select_in(self.conn, sql, values)

    def chunks(self, ids: list[int]) -> dict[int, ChunkRow]:
        rows = self._select_in(
            "SELECT c.id, f.path, c.language, c.symbol, c.kind, c.start_line, c.end_line, c.part,"
            " c.text, c.n_tokens FROM chunks c JOIN files f ON f.id = c.file_id WHERE c.id IN ({})",
            [int(i) for i in ids])
        return {row[0]: ChunkRow(*row) for row in rows}

    def chunk_meta(self, ids) -> dict[int, tuple[str, str, str, int]]:
        """chunk id -> (its file's path, kind, symbol, part): what the ranking priors and the
        grouping of a split definition's parts need, without the texts."""
        if self._mirror is not None:
            got = self._mirror.chunk_meta(self.conn, ids)
            if got is not None:
                return got
        return {d: (path, kind, symbol, part) for d, path, kind, symbol, part in self._select_in(
            "SELECT c.id, f.path, c.kind, c.symbol, c.part FROM chunks c JOIN files f ON f.id = c.file_id"
            " WHERE c.id IN ({})", [int(i) for i in ids])}

    def chunks_by_hash(self, hashes: list[str]) -> dict[str, int]:
        """text hash -> one chunk id carrying it (so unchanged text reuses stored vectors)."""
        return dict(self._select_in(
            "SELECT text_hash, MIN(id) FROM chunks WHERE text_hash IN ({}) GROUP BY text_hash", hashes))

    def filter_ids(self, languages: list[str] | None = None, path_prefix: str | None = None,
                   exclude_globs: list[str] | None = None) -> np.ndarray | None:
        """Sorted chunk ids passing the filters, or None when there is no filter."""
        if not languages and not path_prefix and not exclude_globs:
            return None
        sql = "SELECT c.id, f.path FROM chunks c JOIN files f ON f.id = c.file_id WHERE 1=1"
        args: list = []
        if languages:
            sql += f" AND c.language IN ({','.join('?' * len(languages))})"
            args += languages
        if path_prefix:
            prefix = path_prefix.strip("/")
            if prefix and prefix != ".":
                sql += " AND (f.path = ? OR substr(f.path, 1, ?) = ?)"
                args += [prefix, len(prefix) + 1, prefix + "/"]
        rows = self.conn.execute(sql, args).fetchall()
        if exclude_globs:
            import pathspec

            spec = pathspec.GitIgnoreSpec.from_lines(exclude_globs)
            bad = {p for p in {r[1] for r in rows} if spec.match_file(p)}
            rows = [r for r in rows if r[1] not in bad]
        return np.array(sorted(r[0] for r in rows), dtype=np.int64)

    def lexical(self, query: str, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """BM25 (SQLite FTS5) over path, symbol and body terms; scores are positive, higher better.
        ``allowed``: sorted chunk ids the results must be among (the top ``k`` of those)."""
        terms = query_terms(query)
        if not terms:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        if self._mirror is not None:  # the same answer from memory, where a long-lived process keeps it
            got = self._mirror.search(self.conn, terms, k, allowed)
            if got is not None:
                return got
        match = " OR ".join(f'"{t}"' for t in terms)
        w = ", ".join(str(x) for x in BM25_WEIGHTS)
        sql = (f"SELECT rowid, bm25(chunks_fts, {w}) AS s FROM chunks_fts WHERE chunks_fts MATCH ?"
               " ORDER BY s LIMIT ?")
        limit = k if allowed is None else max(10 * k, 2000)
        rows = self.conn.execute(sql, (match, limit)).fetchall()
        if allowed is not None:
            ok = set(allowed.tolist())
            kept = [r for r in rows if r[0] in ok]
            if len(kept) < k and len(rows) == limit:  # the filter left too few of the first
                kept = [r for r in self.conn.execute(sql, (match, -1)) if r[0] in ok]  # rows: all
            rows = kept[:k]
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        return ids, -np.array([r[1] for r in rows], dtype=np.float32)

    def stats(self) -> dict:
        """The `status` figures: model, files, chunks, vectors, bytes, updated."""
        files, lines = self.conn.execute("SELECT COUNT(*), COALESCE(SUM(n_lines), 0) FROM files").fetchone()
        chunks = self.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        vec = self.store.stats(self.conn)
        on_disk = sum(p.stat().st_size for p in self.dir.rglob("*") if p.is_file())
        updated = self.meta("updated")
        return {
            "root": str(self.root),
            "index_dir": str(self.dir),
            "model": self.manifest.model,
            "files": files,
            "lines": lines,
            "chunks": chunks,
            "vectors": vec["vectors"],
            "bytes": on_disk,
            "updated": float(updated) if updated else None,
            "format_version": self.manifest.format_version,
            "store": self.store_kind,
            "vector_dtype": self._vector_encoding(),
        }

    def _vector_encoding(self) -> str:
        """How the store keeps vectors: the exact store's dtype, or the compressed store's codec
        (what ``status`` prints; the manifest's dtype only describes the exact store)."""
        if self.store_kind != "compressed" or not isinstance(self.store, CompressedStore):
            return self.manifest.vector_dtype
        try:
            codec = self.store.codec(self.conn)
        except IndexCorruptError:
            return "no codec"
        axes = f" on {codec.rdim} principal axes" if codec.rotation is not None else ""
        return f"{codec.nbits}-bit residuals{axes}, {codec.n_centroids} centroids"

    # ---------------------------------------------------------------------- catalog writes
    def remove_files(self, file_ids: list[int]) -> None:
        """Drop files and their chunks (inside the caller's write transaction)."""
        conn = self.conn
        for fid in file_ids:
            cids = [r[0] for r in conn.execute("SELECT id FROM chunks WHERE file_id = ?", (fid,))]
            self.store.remove(conn, cids)
            conn.executemany("DELETE FROM chunks_fts WHERE rowid = ?", [(c,) for c in cids])
            conn.execute("DELETE FROM chunks WHERE file_id = ?", (fid,))
            conn.execute("DELETE FROM files WHERE id = ?", (fid,))

    def add_file(self, path: str, language: str | None, size: int, mtime_ns: int, sha256: str,
                 n_lines: int, chunks: list[Chunk], hashes: list[str], n_tokens: list[int],
                 fts: list[tuple[str, str, str]] | None = None) -> list[int]:
        """Insert a file and its chunk rows (inside the caller's write transaction).

        Args:
            fts: Each chunk's FTS5 row (``fts_rows``), when the caller made them already (the
                indexer makes them in its background thread).

        Returns:
            The new chunk ids, in the order of ``chunks``.
        """
        conn = self.conn
        cur = conn.execute(
            "INSERT INTO files (path, language, size, mtime_ns, sha256, n_lines, indexed_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (path, language, size, mtime_ns, sha256, n_lines, time.time()),
        )
        fid = cur.lastrowid
        if not chunks:
            return []
        # The ids AUTOINCREMENT would give one row at a time (one more than the largest id the
        # table ever had), given up front so that the rows go in with one executemany each; the
        # caller's transaction holds the write lock, so no other writer can take them meanwhile.
        seq, top = conn.execute(
            "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'chunks'), 0),"
            " COALESCE((SELECT MAX(id) FROM chunks), 0)").fetchone()
        first = max(seq, top) + 1
        ids = list(range(first, first + len(chunks)))
        conn.executemany(
            "INSERT INTO chunks (id, file_id, symbol, kind, language, start_line, end_line, part, text,"
            " text_hash, n_tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(cid, fid, c.symbol, c.kind, c.language, c.start_line, c.end_line, c.part, c.text, h, n)
             for cid, c, h, n in zip(ids, chunks, hashes, n_tokens, strict=True)],
        )
        rows = fts if fts is not None else fts_rows(path, chunks)
        conn.executemany("INSERT INTO chunks_fts (rowid, path, symbol, body) VALUES (?, ?, ?, ?)",
                         [(cid, *row) for cid, row in zip(ids, rows, strict=True)])
        return ids

    def touch_file(self, file_id: int, size: int, mtime_ns: int) -> None:
        self.conn.execute("UPDATE files SET size = ?, mtime_ns = ? WHERE id = ?", (size, mtime_ns, file_id))

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))
