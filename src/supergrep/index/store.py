"""Token-vector storage behind one interface, and its exact, memory-mapped implementation.

``VectorStore`` is what the indexer and the searcher talk to. Writes happen inside the caller's
SQLite write transaction: ``add`` makes its files durable first and then records them in that
transaction, so vectors become visible exactly when the chunk rows that own them do. The
compressed, candidate-generating store (``compressed.py``) implements the same methods.

``SegmentStore`` keeps float16 vectors in immutable, memory-mapped segment files (LSM-style):
updates add segments and tombstone removed chunks; ``maintain`` merges small segments and
rewrites those that are mostly dead. Search is exact MaxSim over every live chunk, in blocks,
so memory stays bounded whatever the index size. With ``vector_dtype="int8"`` each vector is
stored as int8 with one float32 scale (``v ~= scale * q``, ``scale = max|v| / 127``): 388 bytes
per 384-d vector instead of 768, scored after dequantizing block by block.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from supergrep.arrays import pack
from supergrep.errors import IndexCorruptError
from supergrep.index.format import VECTOR_DIR, crashpoint, fsync_dir
from supergrep.scoring.maxsim import maxsim_packed, top_k

log = logging.getLogger(__name__)


class VectorStore(ABC):
    """Token vectors keyed by integer chunk id."""

    dim: int

    @abstractmethod
    def add(self, conn: sqlite3.Connection, chunk_ids: list[int], vectors: list[np.ndarray],
            pooled: list[bool] | None = None) -> None:
        """Store vectors for new chunk ids, inside the caller's open write transaction.

        ``pooled[i]`` says chunk i's vectors came from ``get`` (already in stored form: a
        pooling store must not pool them again)."""

    @abstractmethod
    def remove(self, conn: sqlite3.Connection, chunk_ids: list[int]) -> None:
        """Forget chunk ids, inside the caller's open write transaction."""

    @abstractmethod
    def search(self, conn: sqlite3.Connection, query: np.ndarray, k: int,
               allowed: np.ndarray | None = None, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` chunks by MaxSim.

        Args:
            query: (q_tokens, dim) float32 unit rows.
            k: Number of results.
            allowed: Sorted int64 chunk ids that may be returned; None allows all.
            exact: Score every live chunk (no candidate generation) even where the store
                could prune.

        Returns:
            (chunk ids, scores), best first.
        """

    @abstractmethod
    def score(self, conn: sqlite3.Connection, query: np.ndarray, chunk_ids: list[int]) -> np.ndarray:
        """Exact MaxSim of the query against the given chunks (missing ids score -inf)."""

    def search_deep(self, conn: sqlite3.Connection, query: np.ndarray, k: int, allowed: np.ndarray | None = None,
                    also: list[int] | Callable[[], list[int]] | None = None,
                    exact: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """The top-``k`` chunks by MaxSim and the scores of the chunks in ``also`` (hybrid
        fusion's candidates: a deep ranking plus BM25's hits), where a store that prunes may
        estimate the scores it did not compute exactly. ``also`` may be a callable, called once
        the ranking is done (hybrid search runs BM25 meanwhile on another thread).

        Returns:
            (chunk ids, scores, exact: bool per id, margin), the top ``k`` first, best first,
            then the ``also`` chunks not among them (missing ones left out); ``margin`` bounds how
            far an estimate may be off (as observed on the exact ones). This store: all exact.
        """
        ids, scores = self.search(conn, query, k, allowed, exact=exact)
        known = set(ids.tolist())
        also = also() if callable(also) else also
        extra = [d for d in dict.fromkeys(also or []) if d not in known]
        if extra:
            sc = self.score(conn, query, extra)
            ok = np.isfinite(sc)
            ids = np.concatenate([ids, np.asarray(extra, np.int64)[ok]])
            scores = np.concatenate([scores, sc[ok].astype(np.float32)])
        return ids, scores, np.ones(len(ids), bool), 0.0

    @abstractmethod
    def get(self, conn: sqlite3.Connection, chunk_ids: list[int]) -> list[np.ndarray]:
        """The stored (n_tokens, dim) float32 vectors of each chunk id."""

    @abstractmethod
    def maintain(self, conn: sqlite3.Connection) -> None:
        """Housekeeping by the (locked) writer: compaction, removal of orphaned files."""

    @abstractmethod
    def stats(self, conn: sqlite3.Connection) -> dict:
        """{"vectors": live token vectors, "bytes": bytes on disk}."""

    def warm(self, conn: sqlite3.Connection) -> None:  # noqa: B027 - optional hook, no-op by default
        """Long-lived processes (the daemon), after an update: load what the next query needs and
        forget what is gone."""

    def check(self, conn: sqlite3.Connection) -> None:  # noqa: B027 - optional hook, no-op by default
        """Raise IndexCorruptError when stored vectors are missing or unreadable (a cheap probe,
        not a full read): tells a damaged index from a search that raced an update."""


@dataclass
class _Segment:
    id: int
    vectors: np.ndarray  # (n_tokens, dim) float16 or int8, memory-mapped
    layout: np.ndarray  # (n_chunks, 3) int64: chunk id, first token, n_tokens; sorted by id
    scales: np.ndarray | None = None  # (n_tokens,) float32 per-vector scales of an int8 segment

    def rows(self, start: int, end: int) -> np.ndarray:
        """Token vectors ``start:end`` as float32 (dequantized for int8)."""
        block = np.asarray(self.vectors[start:end], dtype=np.float32)  # (n, dim)
        if self.scales is not None:
            block *= np.asarray(self.scales[start:end], dtype=np.float32)[:, None]
        return block


# np.load parses each .npy header with ast.literal_eval, and CPython 3.11's AST constructor is not
# safe to run in two threads at once: a reader thread loading a segment while the indexer loads
# another raised "SystemError: AST constructor recursion depth mismatch" (seen in
# tests/index/test_indexer.py under load; python/cpython#106905). Headers are read once per
# segment, so one lock costs nothing measurable.
_NPY_LOCK = threading.Lock()


def _load_npy(path: Path, mmap: bool) -> np.ndarray:
    with _NPY_LOCK:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)


_SEG_RE = re.compile(r"^seg-(\d{8})(\.layout|\.scale)?\.npy$")
_CSEG_RE = re.compile(r"^cseg-(\d{8})\.sgc$")  # compressed segments (compressed.py)
_CODEC_RE = re.compile(r"^codec-(\d{8})\.sgc$")
VECTOR_DTYPES = ("float16", "int8")


def quantize_rows(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per row: (q int8 (n, dim), scale float32 (n,)), ``v ~= scale * q``.

    >>> q, s = quantize_rows(np.array([[0.6, -0.8], [0.0, 0.0]], np.float32))
    >>> q.tolist(), [round(float(x) * 127, 4) for x in s]
    ([[95, -127], [0, 0]], [0.8, 0.0])
    """
    v = np.asarray(vectors, dtype=np.float32)
    scale = np.abs(v).max(axis=1) / 127.0 if v.size else np.zeros(len(v), np.float32)  # (n,)
    safe = np.where(scale > 0, scale, 1.0)[:, None]
    q = np.clip(np.rint(v / safe), -127, 127).astype(np.int8)
    return q, scale.astype(np.float32)


class SegmentStore(VectorStore):
    """Exact store: float16 token vectors in immutable memory-mapped segments.

    Args:
        index_dir: The index directory (segments live in ``vectors/`` under it).
        dim: Vector dimension.
        block_tokens: Token vectors converted to float32 and scored at a time (bounds memory:
            block_tokens * dim * 4 bytes plus q_tokens * block_tokens * 4 bytes).
        vector_dtype: "float16", or "int8" with a per-vector scale (``seg-N.scale.npy``). The
            index records it in its manifest; one index holds one kind.
    """

    MERGE_MAX_SEGMENTS = 12  # more live segments than this: merge the smallest
    REWRITE_DEAD_FRACTION = 0.35  # a segment with more dead vectors than this gets rewritten

    def __init__(self, index_dir: Path, dim: int, block_tokens: int = 32768, cache_bytes: int = 0,
                 vector_dtype: str = "float16"):
        if vector_dtype not in VECTOR_DTYPES:
            raise ValueError(f"vector_dtype must be one of {VECTOR_DTYPES}, not {vector_dtype!r}")
        self.dir = Path(index_dir) / VECTOR_DIR
        self.dim = dim
        self.vector_dtype = vector_dtype
        self.block_tokens = block_tokens
        self._cache: dict[int, _Segment] = {}
        # float32 copies of whole segments for long-lived processes (eval, a daemon): the
        # float16 -> float32 cast costs more than the matmul itself on CPU. 0 disables it.
        self.cache_bytes = cache_bytes
        self._f32: dict[int, np.ndarray] = {}
        self._created: dict[int, float] = {}  # segment id -> its `created` when we cached it

    # ----------------------------------------------------------------------------- files
    def _paths(self, seg: int) -> tuple[Path, Path]:
        return self.dir / f"seg-{seg:08d}.npy", self.dir / f"seg-{seg:08d}.layout.npy"

    def _scale_path(self, seg: int) -> Path:
        return self.dir / f"seg-{seg:08d}.scale.npy"

    def _write_npy(self, path: Path, array: np.ndarray) -> int:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            np.save(fh, array, allow_pickle=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path.stat().st_size

    def _load(self, seg: int) -> _Segment:
        cached = self._cache.get(seg)
        if cached is not None:
            return cached
        vec_path, layout_path = self._paths(seg)
        scales = None
        try:
            vectors = _load_npy(vec_path, mmap=True)
            layout = _load_npy(layout_path, mmap=False)
            if self.vector_dtype == "int8":
                scales = _load_npy(self._scale_path(seg), mmap=True)
        except FileNotFoundError:
            raise
        except (ValueError, OSError) as exc:
            raise IndexCorruptError(
                f"segment {vec_path.name} is unreadable ({exc}); run `supergrep index --force`"
            ) from None
        if vectors.ndim != 2 or vectors.shape[1] != self.dim or layout.ndim != 2 or layout.shape[1] != 3:
            raise IndexCorruptError(f"segment {vec_path.name} has the wrong shape; run `supergrep index --force`")
        want = np.int8 if self.vector_dtype == "int8" else np.float16
        if vectors.dtype != want or (scales is not None and scales.shape != (vectors.shape[0],)):
            raise IndexCorruptError(f"segment {vec_path.name} is not {self.vector_dtype} as the manifest says; "
                                    f"run `supergrep index --force`")
        s = _Segment(seg, vectors, layout, scales)
        self._cache[seg] = s
        return s

    def _new_segment_id(self, conn: sqlite3.Connection) -> int:
        """A segment id never used before in this index (called inside the writer's transaction).

        Not just MAX(id) + 1: once compaction deletes the newest segment its id would come
        back with other contents, and a long-lived reader (the daemon's threads share one
        store and its caches) could mix the two up."""
        top = conn.execute("SELECT COALESCE(MAX(id), 0) FROM segments").fetchone()[0]
        row = conn.execute("SELECT value FROM meta WHERE key = 'next_segment'").fetchone()
        on_disk = [int(m.group(1)) for p in self._listdir() if (m := _SEG_RE.match(p) or _CSEG_RE.match(p))]
        seg = max([top, int(row[0]) - 1 if row else 0, *on_disk]) + 1
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('next_segment', ?)", (str(seg + 1),))
        return seg

    def _listdir(self) -> list[str]:
        try:
            return os.listdir(self.dir)
        except FileNotFoundError:
            return []

    def _write_segment(self, conn: sqlite3.Connection, chunk_ids: list[int], vectors: list[np.ndarray]) -> int:
        """Write one durable segment and record it (and where each chunk lives) in ``conn``."""
        order = np.argsort(np.asarray(chunk_ids, dtype=np.int64), kind="stable")
        ids = np.asarray(chunk_ids, dtype=np.int64)[order]
        lengths = np.array([len(vectors[i]) for i in order], dtype=np.int64)
        if len(lengths) and lengths.min() <= 0:
            raise ValueError("every chunk needs at least one token vector")
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        parts = [vectors[i] for i in order]
        scales = None
        if self.vector_dtype == "int8":
            packed = pack(parts, np.float32, self.dim)  # (n_tokens, dim)
            packed, scales = quantize_rows(packed)  # (n_tokens, dim) int8, (n_tokens,) float32
        else:
            # stacked and cast to float16 in one pass, spread over threads (arrays.pack)
            packed = pack(parts, np.float16, self.dim)  # (n_tokens, dim)
        layout = np.stack([ids, offsets, lengths], axis=1) if len(ids) else np.zeros((0, 3), np.int64)
        self.dir.mkdir(parents=True, exist_ok=True)
        seg = self._new_segment_id(conn)
        vec_path, layout_path = self._paths(seg)
        size = self._write_npy(vec_path, packed)
        crashpoint("between_segment_files")
        if scales is not None:
            size += self._write_npy(self._scale_path(seg), scales)
        size += self._write_npy(layout_path, layout)
        fsync_dir(self.dir)
        crashpoint("segment_written")
        conn.execute(
            "INSERT INTO segments (id, n_chunks, n_vectors, bytes, created) VALUES (?, ?, ?, ?, ?)",
            (seg, len(ids), int(lengths.sum()), size, time.time()),
        )
        conn.executemany(
            "INSERT OR REPLACE INTO vec_chunks (chunk_id, seg, offset, n) VALUES (?, ?, ?, ?)",
            [(int(i), seg, int(o), int(n)) for i, o, n in layout],
        )
        return seg

    # ---------------------------------------------------------------------------- writes
    def add(self, conn: sqlite3.Connection, chunk_ids: list[int], vectors: list[np.ndarray],
            pooled: list[bool] | None = None) -> None:
        if len(chunk_ids) != len(vectors):
            raise ValueError("one vector matrix per chunk id")
        if chunk_ids:
            self._write_segment(conn, chunk_ids, vectors)

    def remove(self, conn: sqlite3.Connection, chunk_ids: list[int]) -> None:
        if not chunk_ids:
            return
        rows: list[tuple[int, int, int]] = []
        for start in range(0, len(chunk_ids), 500):
            part = chunk_ids[start : start + 500]
            marks = ",".join("?" * len(part))
            rows += conn.execute(
                f"SELECT chunk_id, seg, n FROM vec_chunks WHERE chunk_id IN ({marks})", part
            ).fetchall()
        conn.executemany("INSERT OR IGNORE INTO tombstones (chunk_id, seg) VALUES (?, ?)",
                         [(cid, seg) for cid, seg, _ in rows])
        conn.executemany("DELETE FROM vec_chunks WHERE chunk_id = ?", [(cid,) for cid, _, _ in rows])
        dead: dict[int, list[int]] = {}
        for _, seg, n in rows:
            d = dead.setdefault(seg, [0, 0])
            d[0] += 1
            d[1] += n
        conn.executemany(
            "UPDATE segments SET dead_chunks = dead_chunks + ?, dead_vectors = dead_vectors + ? WHERE id = ?",
            [(c, v, seg) for seg, (c, v) in dead.items()],
        )

    # ----------------------------------------------------------------------------- reads
    def _snapshot(self, conn: sqlite3.Connection) -> tuple[list[int], np.ndarray]:
        """Live segment ids and all tombstoned chunk ids, read in one transaction."""
        own_tx = not conn.in_transaction  # a writer reading inside its own transaction is consistent
        if own_tx:
            conn.execute("BEGIN")
        try:
            rows = conn.execute("SELECT id, created FROM segments ORDER BY id").fetchall()
            dead = np.fromiter((r[0] for r in conn.execute("SELECT chunk_id FROM tombstones")), np.int64)
        finally:
            if own_tx:
                conn.execute("COMMIT")
        for sid, created in rows:
            # An id can come back with other contents (another process compacted the newest
            # segment away, or rebuilt the index): forget what a long-lived reader cached.
            if self._created.get(sid, created) != created:
                self._cache.pop(sid, None)
                self._f32.pop(sid, None)
            self._created[sid] = created
        dead.sort()
        return [sid for sid, _ in rows], dead

    def _with_retry(self, conn: sqlite3.Connection, fn):
        """Run ``fn(segments, dead)``; a compaction may delete a segment between our snapshot and
        opening its file, so re-snapshot and retry (files we already mapped stay readable)."""
        for attempt in range(3):
            segs, dead = self._snapshot(conn)
            if attempt:
                # Forget only what is gone: clearing the whole cache here made a daemon (whose
                # threads share this store while one of them compacts) drop and re-cast
                # gigabytes of float32 vectors on every compaction that raced a search.
                live = set(segs)
                for cache in (self._cache, self._f32):
                    for sid in [sid for sid in list(cache) if sid not in live]:
                        cache.pop(sid, None)
            try:
                return fn(segs, dead)
            except FileNotFoundError:
                if attempt == 2:
                    raise IndexCorruptError(
                        "segment files are missing; run `supergrep index --force` to rebuild"
                    ) from None
        raise AssertionError("unreachable")

    def _float32(self, seg: _Segment) -> np.ndarray | None:
        """The segment as float32 when the cache budget allows, else None (cast per block)."""
        got = self._f32.get(seg.id)
        if got is not None or self.cache_bytes <= 0:
            return got
        need = seg.vectors.shape[0] * self.dim * 4
        # list(): other threads (a daemon's searches) may add entries while we sum.
        if sum(a.nbytes for a in list(self._f32.values())) + need > self.cache_bytes:
            return None
        got = seg.rows(0, seg.vectors.shape[0])  # (n_tokens, dim) float32
        self._f32[seg.id] = got
        return got

    def _segment_scores(self, seg: _Segment, query: np.ndarray, keep: np.ndarray) -> np.ndarray:
        """MaxSim of the query against the segment's chunks where ``keep`` is True (else -inf)."""
        layout = seg.layout
        scores = np.full(len(layout), -np.inf, dtype=np.float32)
        if not keep.any():
            return scores
        offsets, lengths = layout[:, 1], layout[:, 2]
        i, n = 0, len(layout)
        while i < n:
            # A block: whole chunks, about block_tokens token vectors (at least one chunk).
            start_tok = offsets[i]
            j = int(np.searchsorted(offsets, start_tok + self.block_tokens, side="left"))
            j = max(j, i + 1)
            if keep[i:j].any():
                end_tok = offsets[j - 1] + lengths[j - 1]
                block = self._float32(seg)
                block = block[start_tok:end_tok] if block is not None else seg.rows(start_tok, end_tok)
                scores[i:j] = maxsim_packed(query, block, offsets[i:j] - start_tok)
            i = j
        scores[~keep] = -np.inf
        return scores

    def search(self, conn: sqlite3.Connection, query: np.ndarray, k: int,
               allowed: np.ndarray | None = None, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        query = np.ascontiguousarray(query, dtype=np.float32)

        def run(segs: list[int], dead: np.ndarray):
            all_ids, all_scores = [], []
            # Map the whole snapshot first: a mapped file stays readable after a compaction
            # deletes it, so only this instant (not the whole scan) can race one.
            for seg in [self._load(sid) for sid in segs]:
                ids = seg.layout[:, 0]
                keep = ~np.isin(ids, dead, assume_unique=False) if len(dead) else np.ones(len(ids), bool)
                if allowed is not None:
                    keep &= np.isin(ids, allowed)
                scores = self._segment_scores(seg, query, keep)
                best = top_k(scores, k)
                best = best[np.isfinite(scores[best])]
                all_ids.append(ids[best])
                all_scores.append(scores[best])
            if not all_ids:
                return np.zeros(0, np.int64), np.zeros(0, np.float32)
            ids = np.concatenate(all_ids)
            scores = np.concatenate(all_scores)
            order = top_k(scores, k)
            return ids[order], scores[order]

        return self._with_retry(conn, run)

    def _locate(self, conn: sqlite3.Connection, chunk_ids: list[int]) -> dict[int, tuple[int, int, int]]:
        found: dict[int, tuple[int, int, int]] = {}
        for start in range(0, len(chunk_ids), 500):
            part = [int(c) for c in chunk_ids[start : start + 500]]
            marks = ",".join("?" * len(part))
            for cid, seg, off, n in conn.execute(
                f"SELECT chunk_id, seg, offset, n FROM vec_chunks WHERE chunk_id IN ({marks})", part
            ):
                found[cid] = (seg, off, n)
        return found

    def get(self, conn: sqlite3.Connection, chunk_ids: list[int]) -> list[np.ndarray]:
        def run(_segs, _dead):
            where = self._locate(conn, chunk_ids)
            out = []
            for cid in chunk_ids:
                if int(cid) not in where:
                    raise KeyError(f"chunk {cid} has no vectors")
                seg, off, n = where[int(cid)]
                out.append(self._load(seg).rows(off, off + n))
            return out

        return self._with_retry(conn, run)

    def score(self, conn: sqlite3.Connection, query: np.ndarray, chunk_ids: list[int]) -> np.ndarray:
        query = np.ascontiguousarray(query, dtype=np.float32)

        def run(_segs, _dead):
            where = self._locate(conn, chunk_ids)
            out = np.full(len(chunk_ids), -np.inf, dtype=np.float32)
            for i, cid in enumerate(chunk_ids):
                loc = where.get(int(cid))
                if loc is not None:
                    seg, off, n = loc
                    out[i] = maxsim_packed(query, self._load(seg).rows(off, off + n), np.zeros(1, np.int64))[0]
            return out

        return self._with_retry(conn, run)

    # ----------------------------------------------------------------------- maintenance
    def maintain(self, conn: sqlite3.Connection) -> None:
        self._collect_garbage(conn)
        rows = conn.execute(
            "SELECT id, n_vectors, dead_vectors FROM segments ORDER BY n_vectors - dead_vectors"
        ).fetchall()
        victims = [sid for sid, n, dead in rows if n == 0 or dead > self.REWRITE_DEAD_FRACTION * n]
        live = [r for r in rows if r[0] not in victims]
        if len(live) > self.MERGE_MAX_SEGMENTS:
            # Merge the smallest segments until the count is back to half the limit.
            victims += [sid for sid, _, _ in live[: len(live) - self.MERGE_MAX_SEGMENTS // 2]]
        if victims:
            self._rewrite(conn, victims)
            self._collect_garbage(conn)

    def _rewrite(self, conn: sqlite3.Connection, victims: list[int]) -> None:
        """Copy the live chunks of ``victims`` into one new segment, in one transaction."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            dead = {r[0] for r in conn.execute("SELECT chunk_id FROM tombstones")}
            ids: list[int] = []
            vecs: list[np.ndarray] = []
            for sid in victims:
                seg = self._load(sid)
                for cid, off, n in seg.layout:
                    if int(cid) not in dead:
                        ids.append(int(cid))
                        vecs.append(seg.rows(off, off + n))  # int8: re-quantizes to the same q
            if ids:
                self._write_segment(conn, ids, vecs)
            marks = ",".join("?" * len(victims))
            conn.execute(f"DELETE FROM tombstones WHERE seg IN ({marks})", victims)
            conn.execute(f"DELETE FROM segments WHERE id IN ({marks})", victims)
            crashpoint("compaction_before_commit")
            conn.execute("COMMIT")
            crashpoint("compaction_committed")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        for sid in victims:
            self._forget(sid)
        log.info("compacted %d segments into one (%d chunks)", len(victims), len(ids))

    def _collect_garbage(self, conn: sqlite3.Connection) -> None:
        """Delete files no committed row refers to (a crash before commit, a compaction whose
        old files were not yet removed, an interrupted conversion's compressed files), and
        stale temp files."""
        live = {r[0] for r in conn.execute("SELECT id FROM segments")}
        for name in self._listdir():
            if self._is_garbage(name, live, conn):
                try:
                    os.unlink(self.dir / name)
                except OSError:
                    pass
                m = _SEG_RE.match(name) or _CSEG_RE.match(name)
                if m:
                    self._forget(int(m.group(1)))

    def _is_garbage(self, name: str, live: set[int], conn: sqlite3.Connection) -> bool:
        if name.startswith(".") and name.endswith(".tmp"):
            return True
        if m := _SEG_RE.match(name):
            return int(m.group(1)) not in live
        return bool(_CSEG_RE.match(name) or _CODEC_RE.match(name))  # an exact index has none

    def _forget(self, seg: int) -> None:
        self._cache.pop(seg, None)
        self._f32.pop(seg, None)

    def warm(self, conn: sqlite3.Connection) -> None:
        """Map every live segment, fill the float32 cache (as far as ``cache_bytes`` allows) and
        drop cached segments that no longer exist."""
        segs, _ = self._snapshot(conn)
        live = set(segs)
        for cache in (self._cache, self._f32, self._created):
            for sid in [sid for sid in list(cache) if sid not in live]:
                cache.pop(sid, None)
        for sid in segs:
            try:
                self._float32(self._load(sid))
            except FileNotFoundError:
                return  # compacted away meanwhile; the next warm-up catches up

    def check(self, conn: sqlite3.Connection) -> None:
        """Map every live segment (retrying past a concurrent compaction, like a search)."""
        self._with_retry(conn, lambda segs, _dead: [self._load(sid) for sid in segs])

    def stats(self, conn: sqlite3.Connection) -> dict:
        n, size = conn.execute(
            "SELECT COALESCE(SUM(n_vectors - dead_vectors), 0), COALESCE(SUM(bytes), 0) FROM segments"
        ).fetchone()
        return {"vectors": int(n), "bytes": int(size)}
