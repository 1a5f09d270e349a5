"""The compressed, candidate-generating vector store (PLAID/WARP-style), behind ``VectorStore``.

Storage: every token vector is a centroid id + 1/2/4-bit residual (``codec.py``), optionally
after document-token pooling. Segments are immutable one-file containers (``container.py``),
memory-mapped, written before the SQLite transaction that makes them visible, exactly like the
exact store's; deletions are tombstones; ``maintain`` merges and rewrites segments. A segment:

    layout  int64 (n_docs, 3)    chunk id, first token, n tokens (sorted by chunk id)
    codes   uint16|int32 (n_tok) centroid id of each token, document-major
    resid   uint8 (n_tok, dim * nbits / 8) packed residual buckets, document-major
    scale   float16 (n_tok)      1 / |decoded vector| of each token (version 2; a version-1
                                 segment has none and scores its tokens unscaled)
    ivf     int32 (n_pairs)      local doc indices grouped by centroid (one entry per centroid x doc)
    ivf_off int64 (K + 1)        where each centroid's group starts (K when the segment was written)

Search, four stages (all NumPy; ``nprobe``, ``candidates`` and ``rerank`` are the knobs):

1. ``S = Q C^T``: every query token against every centroid.
2. Candidate generation (WARP-style token retrieval over the centroid inverted lists): each query
   token probes its ``nprobe`` best centroids; a document's approximate score is
   ``sum_q max`` over the probed centroids holding one of its tokens, with a missing query token
   imputed by the score of the ``nprobe``-th centroid (XTR/WARP's missing-similarity estimate).
3. PLAID centroid interaction for the best ``candidates`` documents: ``sum_q max_t S[q, code_t]``
   over all of their tokens.
4. Exact re-rank of the best ``rerank``: MaxSim over the decoded vectors, each renormalised to
   unit length (``scale``), as the exact store's vectors are.

Drift: a batch whose vectors decode much worse than the codec's training sample
(``drift_ratio``) gets new centroids fitted on it; existing ids keep their meaning, so nothing
already stored is rewritten. The codec is a versioned generation file named by the ``meta`` row
``codec``, committed in the same transaction as the segment that first uses it.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from supergrep.config import IndexConfig, SearchConfig
from supergrep.errors import IndexCorruptError
from supergrep.index import native
from supergrep.index.codec import ResidualCodec, pool_tokens
from supergrep.index.container import populate, read_container, write_container
from supergrep.index.format import crashpoint, fsync_dir
from supergrep.index.intmm import MAX_DIM, int_matmul
from supergrep.index.store import _CODEC_RE, _CSEG_RE, _SEG_RE, SegmentStore, _Segment
from supergrep.scoring.maxsim import top_k

log = logging.getLogger(__name__)

_POOLS: dict[str, object] = {}
_POOL_LOCK = threading.Lock()


def thread_pool(name: str, workers: int):
    """A process-wide pool of ``workers`` threads named ``name``, created on first use; None on a
    single core (the work then runs in line). Shared by every store, searcher and thread of the
    process (the daemon's searches queue on it)."""
    pool = _POOLS.get(name)
    if pool is None:
        import os
        from concurrent.futures import ThreadPoolExecutor

        with _POOL_LOCK:
            pool = _POOLS.get(name)
            if pool is None:
                pool = ThreadPoolExecutor(workers, thread_name_prefix=name) if (os.cpu_count() or 1) > 1 else False
                _POOLS[name] = pool
    return pool or None


def helper_pool():
    """One helper thread for a search's second core: half of the exact re-rank and of the
    query-centroid product."""
    return thread_pool("sg-rerank", 1)

SEGMENT_KIND, SEGMENT_VERSION = "compressed-segment", 2  # 2: + scale
# 2: + rotation (the residual coded on its principal axes). A codec without one is still
# written as version 1, which every earlier reader understands.
CODEC_KIND, CODEC_VERSION = "residual-codec", 2
STORE_META_KEY = "vector_store"  # meta row: "exact" (absent) or "compressed"
CODEC_META_KEY = "codec"  # meta row: the committed codec generation



@dataclass
class CompressSettings:
    """How vectors are compressed (index time) and searched (query time). The defaults are the
    config's (``[index]`` and ``[search]`` in ``config.py``, the only source of defaults)."""

    nbits: int = IndexConfig.nbits
    components: int = IndexConfig.components
    pool_factor: float = IndexConfig.pool_factor
    n_centroids: int = IndexConfig.centroids
    drift_ratio: float = IndexConfig.drift_ratio
    nprobe: int = SearchConfig.nprobe
    candidates: int = SearchConfig.ncandidates
    rerank: int = SearchConfig.rerank
    integer_scores: bool = SearchConfig.integer_scores


@dataclass
class _CSegment:
    id: int
    layout: np.ndarray
    codes: np.ndarray
    resid: np.ndarray
    ivf: np.ndarray
    ivf_off: np.ndarray
    scale: np.ndarray | None = None  # (n_tok,) float16; None in a version-1 segment

    @property
    def starts(self) -> np.ndarray:
        return self.layout[:, 1]


@dataclass
class _View:
    """All live segments of one snapshot, numbered as one document space."""

    key: tuple
    segs: list[_CSegment]
    base: np.ndarray  # first global doc index of each segment
    doc_ids: np.ndarray  # (n_docs,) chunk id of each global doc
    live: np.ndarray  # (n_docs,) bool: not tombstoned
    by_id: tuple[np.ndarray, np.ndarray] | None = None  # (sorted live chunk ids, their global docs), built on first use
    runs: np.ndarray | None = None  # (n_docs, 2) first token and length in its segment, built on first use


def _code_dtype(view: _View) -> np.dtype:
    """A dtype holding every segment's centroid ids (uint16 until a codec grows past 65,536
    centroids; segments written after that hold int32)."""
    return np.result_type(*(s.codes.dtype for s in view.segs)) if view.segs else np.dtype(np.uint16)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + n)`` for each pair, vectorised.

    >>> _ranges(np.array([5, 0, 9]), np.array([2, 0, 3])).tolist()
    [5, 6, 9, 10, 11]
    """
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(starts - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


def top_per_column(st: np.ndarray, n: int, block: int = 128) -> np.ndarray:
    """(cols, n) row indices of each column's ``n`` largest values, in no particular order: the
    probed centroids of each query token, from the (centroids, query tokens) scores.

    ``np.argpartition`` over (16384, 32) query-centroid scores took 4-5 ms of a 24 ms search at
    100K chunks. Here each column's ``n``-th largest block maximum is a lower bound ``t`` of its
    ``n``-th largest value (the ``n`` best blocks each hold a value >= t), so only the few values
    >= t are ranked: ~1 ms. Ties at the cut go to the lower row (argpartition's pick is
    arbitrary).

    >>> top_per_column(np.array([[0.1, 0.9, 0.5, 0.7], [3.0, 1.0, 2.0, 0.0]]).T, 2, block=1).tolist()
    [[1, 3], [0, 2]]
    """
    rows, cols = st.shape
    if n >= rows:
        return np.broadcast_to(np.arange(rows), (cols, rows)).copy()
    nb = rows // block
    if rows % block or nb < 2 * n:
        return np.ascontiguousarray(np.argpartition(st, rows - n, axis=0)[rows - n:].T)
    # Block maxima (nb, cols) by halving each block: numpy's max over the middle axis took
    # 0.54 ms here, the halvings 0.22.
    m = st.reshape(nb, block, cols)
    while m.shape[1] % 2 == 0:
        h = m.shape[1] // 2
        m = np.maximum(m[:, :h], m[:, h:])
    m = m.max(axis=1)
    t = np.partition(m, nb - n, axis=0)[nb - n]  # (cols,)
    # >= n per column; flatnonzero + divmod: np.nonzero of the 2-D mask took 0.9 ms, this 0.06
    r, c = np.divmod(np.flatnonzero(st >= t), cols)
    order = np.lexsort((r, -st[r, c], c))  # by column, then value descending, then row
    r = r[order]
    first = np.searchsorted(c[order], np.arange(cols))
    return r[first[:, None] + np.arange(n)[None, :]]


def _nth_largest(x: np.ndarray, n: int, block: int = 128) -> np.generic:
    """The ``n``-th largest value of 1-D ``x`` (1 <= n <= len(x)).

    As in ``top_per_column``: the ``n``-th largest block maximum is a lower bound, so only the
    few values above it are partitioned (0.1 vs 0.55 ms for 64 of ~57K candidates).

    >>> x = np.array([3.0, 9.0, 1.0, 7.0, 7.0, 2.0, 8.0])
    >>> [float(_nth_largest(x, n, block=2)) for n in (1, 2, 3, 4)]  # n = 1 through the blocks
    [9.0, 8.0, 7.0, 7.0]
    """
    nb = len(x) // block
    if nb < 2 * n:
        return x[np.argpartition(x, len(x) - n)[len(x) - n]]
    m = x[: nb * block].reshape(nb, block).max(axis=1)
    t = np.partition(m, nb - n)[nb - n]  # n blocks hold a value >= t
    sub = x[x >= t]
    return np.partition(sub, len(sub) - n)[len(sub) - n]


def _top_stable(scores: np.ndarray, ids: np.ndarray, n: int) -> np.ndarray:
    """Indices of the ``n`` best scores, ties at the cut broken by chunk id (approximate scores
    tie often; this keeps the candidates independent of how documents fall into segments).

    >>> _top_stable(np.array([1.0, 2.0, 1.0, 1.0]), np.array([9, 5, 3, 7]), 2).tolist()
    [1, 2]
    """
    if n >= len(scores):
        return np.arange(len(scores))
    if n <= 0:
        return np.zeros(0, np.int64)
    thr = _nth_largest(scores, n)
    above = np.flatnonzero(scores > thr)
    ties = np.flatnonzero(scores == thr)
    ties = ties[np.argsort(ids[ties], kind="stable")][: n - len(above)]
    return np.concatenate([above, ties])


class CompressedStore(SegmentStore):
    """Centroid + residual token vectors with candidate generation and exact re-rank.

    Args:
        index_dir: The index directory.
        dim: Vector dimension.
        settings: Compression and search knobs (``CompressSettings``).
    """

    def __init__(self, index_dir: Path, dim: int, settings: CompressSettings | None = None):
        super().__init__(index_dir, dim)
        self.settings = settings or CompressSettings()
        self._cseg: dict[int, _CSegment] = {}
        self._codecs: dict[int, ResidualCodec] = {}
        self._view: _View | None = None
        # id(conn) -> (conn, (data_version, total_changes), view, codec): what _view_for found on
        # a connection, valid while neither changes (the conn is held, so its id is not reused)
        self._seen: dict[int, tuple] = {}
        # Per-thread scratch (a daemon runs several searches at once on one store).
        self._local = threading.local()

    # ----------------------------------------------------------------------------- files
    def _cpath(self, seg: int) -> Path:
        return self.dir / f"cseg-{seg:08d}.sgc"

    def _codec_path(self, gen: int) -> Path:
        return self.dir / f"codec-{gen:08d}.sgc"

    def codec_generation(self, conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (CODEC_META_KEY,)).fetchone()
        return int(row[0]) if row else 0

    def codec(self, conn: sqlite3.Connection, gen: int | None = None) -> ResidualCodec:
        gen = self.codec_generation(conn) if gen is None else gen
        got = self._codecs.get(gen)
        if got is not None:
            return got
        if gen <= 0:
            raise IndexCorruptError("the compressed index has no codec; run `supergrep index --force`")
        path = self._codec_path(gen)
        try:
            meta, arrays = read_container(path, CODEC_KIND, CODEC_VERSION)
        except FileNotFoundError:
            raise IndexCorruptError(f"{path.name} is missing; run `supergrep index --force`") from None
        rotation = arrays.get("rotation")
        try:
            codec = ResidualCodec(np.array(arrays["centroids"], np.float32), np.array(arrays["cutoffs"]),
                                  np.array(arrays["weights"]), int(meta["nbits"]), float(meta["train_error"]),
                                  None if rotation is None else np.array(rotation, np.float32))
        except (KeyError, ValueError) as e:
            raise IndexCorruptError(f"{path.name} is inconsistent ({e}); run `supergrep index --force`") from None
        if codec.dim != self.dim:
            raise IndexCorruptError(f"{path.name} has dim {codec.dim}, the index {self.dim}; run `supergrep index --force`")
        self._codecs = {gen: codec}
        return codec

    def write_codec(self, conn: sqlite3.Connection, codec: ResidualCodec) -> int:
        """Write a new codec generation file and point the ``meta`` row at it, inside the
        caller's write transaction (the file is durable before the row commits)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        on_disk = [int(m.group(1)) for p in self._listdir() if (m := _CODEC_RE.match(p))]
        gen = max([self.codec_generation(conn), *on_disk]) + 1
        arrays = {"centroids": codec.centroids, "cutoffs": codec.cutoffs, "weights": codec.weights}
        if codec.rotation is not None:
            arrays["rotation"] = codec.rotation
        write_container(self._codec_path(gen), CODEC_KIND, 1 if codec.rotation is None else CODEC_VERSION, arrays,
                        {"nbits": codec.nbits, "dim": codec.dim, "n_centroids": codec.n_centroids,
                         "train_error": codec.train_error})
        fsync_dir(self.dir)
        crashpoint("codec_written")
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (CODEC_META_KEY, str(gen)))
        self._codecs[gen] = codec
        return gen

    def _load(self, seg: int) -> _CSegment:  # type: ignore[override]
        got = self._cseg.get(seg)
        if got is not None:
            return got
        path = self._cpath(seg)
        _, a = read_container(path, SEGMENT_KIND, SEGMENT_VERSION)  # FileNotFoundError: retried
        try:
            # Plain ndarray views of the mappings: np.memmap's __getitem__ costs more than the
            # gathers a search does through it.
            s = _CSegment(seg, np.asarray(a["layout"]), a["codes"].view(np.ndarray), a["resid"].view(np.ndarray),
                          a["ivf"].view(np.ndarray), np.asarray(a["ivf_off"]),
                          a["scale"].view(np.ndarray) if "scale" in a else None)
        except KeyError:
            raise IndexCorruptError(f"{path.name} lacks an array; run `supergrep index --force`") from None
        if s.resid.ndim != 2 or len(s.codes) != len(s.resid) or s.layout.ndim != 2 or (
                s.scale is not None and s.scale.shape != s.codes.shape):
            raise IndexCorruptError(f"{path.name} has inconsistent arrays; run `supergrep index --force`")
        self._cseg[seg] = s
        return s

    def _write_encoded(self, conn: sqlite3.Connection, ids: np.ndarray, lengths: np.ndarray, codes: np.ndarray,
                       resid: np.ndarray, codec: ResidualCodec) -> int:
        """Write one durable compressed segment (docs already sorted by chunk id) and record it.
        Each token's scale comes from its codes (the same for a copied token as where it came
        from; a version-1 segment's tokens get theirs when a merge rewrites them)."""
        n_centroids = codec.n_centroids
        scale = codec.scales(codes, resid)
        n_docs = len(ids)
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if n_docs else np.zeros(0, np.int64)
        layout = np.stack([ids, offsets, lengths], axis=1).astype(np.int64) if n_docs else np.zeros((0, 3), np.int64)
        # Inverted lists: one entry per (centroid, doc) pair, grouped by centroid, docs ascending.
        doc_of_tok = np.repeat(np.arange(n_docs, dtype=np.int64), lengths)
        pairs = np.unique(codes.astype(np.int64) * max(n_docs, 1) + doc_of_tok)
        ivf = (pairs % max(n_docs, 1)).astype(np.int32)
        counts = np.bincount(pairs // max(n_docs, 1), minlength=n_centroids)
        ivf_off = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.dir.mkdir(parents=True, exist_ok=True)
        seg = self._new_segment_id(conn)
        size = write_container(self._cpath(seg), SEGMENT_KIND, SEGMENT_VERSION,
                               {"layout": layout, "codes": codes, "resid": resid, "ivf": ivf, "ivf_off": ivf_off,
                                "scale": scale})
        fsync_dir(self.dir)
        crashpoint("segment_written")
        conn.execute(
            "INSERT INTO segments (id, n_chunks, n_vectors, bytes, created) VALUES (?, ?, ?, ?, ?)",
            (seg, n_docs, int(lengths.sum()), size, time.time()),
        )
        conn.executemany(
            "INSERT OR REPLACE INTO vec_chunks (chunk_id, seg, offset, n) VALUES (?, ?, ?, ?)",
            [(int(i), seg, int(o), int(n)) for i, o, n in layout],
        )
        return seg

    # ---------------------------------------------------------------------------- writes
    def prepare(self, vectors: list[np.ndarray], pooled: list[bool] | None = None) -> list[np.ndarray]:
        """Pool each document's tokens (unless already pooled) to the stored form."""
        f = self.settings.pool_factor
        if f <= 1:
            return [np.asarray(v, np.float32) for v in vectors]
        return [np.asarray(v, np.float32) if (pooled and pooled[i]) else pool_tokens(np.asarray(v, np.float32), f)
                for i, v in enumerate(vectors)]

    def add(self, conn: sqlite3.Connection, chunk_ids: list[int], vectors: list[np.ndarray],
            pooled: list[bool] | None = None) -> None:
        if len(chunk_ids) != len(vectors):
            raise ValueError("one vector matrix per chunk id")
        if not chunk_ids:
            return
        vecs = self.prepare(vectors, pooled)
        order = np.argsort(np.asarray(chunk_ids, dtype=np.int64), kind="stable")
        ids = np.asarray(chunk_ids, dtype=np.int64)[order]
        lengths = np.array([len(vecs[i]) for i in order], dtype=np.int64)
        if lengths.min() <= 0:
            raise ValueError("every chunk needs at least one token vector")
        flat = np.concatenate([vecs[i] for i in order]).astype(np.float32)
        if flat.shape[1] != self.dim:
            raise ValueError(f"vectors have dim {flat.shape[1]}, the index stores {self.dim}")
        codec = self.codec(conn)
        codes, resid = codec.encode(flat)
        codec, codes, resid = self._handle_drift(conn, codec, flat, codes, resid)
        self._write_encoded(conn, ids, lengths, codes, resid, codec)

    def _handle_drift(self, conn, codec: ResidualCodec, flat: np.ndarray, codes: np.ndarray, resid: np.ndarray):
        """New centroids for a batch the codebook no longer fits (measured, not assumed)."""
        if len(flat) < 256 or codec.train_error <= 0:
            return codec, codes, resid
        err = float(((codec.decode(codes, resid) - flat) ** 2).sum(axis=1).mean())
        if err <= self.settings.drift_ratio * codec.train_error:
            return codec, codes, resid
        per_centroid = max(16, 64)
        n_new = int(min(max(len(flat) // per_centroid, 8), 4096))
        if codec.code_dtype == np.uint16 and codec.n_centroids + n_new > 65536:
            n_new = max(0, 65536 - codec.n_centroids)
            if n_new == 0:
                log.warning("codebook full (65536 centroids); rebuild with --force to re-cluster")
                return codec, codes, resid
        new = codec.extend(flat, n_new)
        self.write_codec(conn, new)
        codes, resid = new.encode(flat)
        err2 = float(((new.decode(codes, resid) - flat) ** 2).sum(axis=1).mean())
        log.info("drift: batch error %.4f vs trained %.4f; added %d centroids (error now %.4f)",
                 err, codec.train_error, n_new, err2)
        self._view = None
        return new, codes, resid

    # ----------------------------------------------------------------------------- reads
    def _snapshot_c(self, conn: sqlite3.Connection) -> tuple[list[int], np.ndarray, int]:
        own_tx = not conn.in_transaction
        if own_tx:
            conn.execute("BEGIN")
        try:
            segs = [r[0] for r in conn.execute("SELECT id FROM segments ORDER BY id")]
            dead = np.fromiter((r[0] for r in conn.execute("SELECT chunk_id FROM tombstones")), np.int64)
            gen = self.codec_generation(conn)
        finally:
            if own_tx:
                conn.execute("COMMIT")
        dead.sort()
        return segs, dead, gen

    def _view_for(self, conn: sqlite3.Connection) -> tuple[_View, ResidualCodec]:
        """The view of every live segment as ``conn`` sees the index now. A connection that saw
        no commit since its last call (SQLite's ``data_version``: another connection's commit;
        ``total_changes``: its own writes) gets the same view without the snapshot's queries
        (~0.15 ms each, 3-4 calls in a hybrid search; more as tombstones pile up)."""
        stamp = (conn.execute("PRAGMA data_version").fetchone()[0], conn.total_changes)
        seen = self._seen.get(id(conn))
        if seen is not None and seen[0] is conn and seen[1] == stamp and seen[2] is self._view:
            return seen[2], seen[3]
        view, codec = self._view_snapshot(conn)
        if len(self._seen) >= 64:  # closed handles' entries pile up in a long-lived process
            self._seen.clear()
        self._seen[id(conn)] = (conn, stamp, view, codec)
        return view, codec

    def _view_snapshot(self, conn: sqlite3.Connection) -> tuple[_View, ResidualCodec]:
        for attempt in range(3):
            segs, dead, gen = self._snapshot_c(conn)
            key = (tuple(segs), len(dead), int(dead.sum()) if len(dead) else 0, gen)
            if self._view is not None and self._view.key == key:
                return self._view, self.codec(conn, gen)
            try:
                loaded = [self._load(s) for s in segs]
            except FileNotFoundError:
                self._cseg.clear()
                if attempt == 2:
                    raise IndexCorruptError("segment files are missing; run `supergrep index --force`") from None
                continue
            sizes = np.array([len(s.layout) for s in loaded], dtype=np.int64)
            base = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if len(loaded) else np.zeros(0, np.int64)
            doc_ids = np.concatenate([s.layout[:, 0] for s in loaded]) if loaded else np.zeros(0, np.int64)
            live = ~np.isin(doc_ids, dead) if len(dead) else np.ones(len(doc_ids), bool)
            self._view = _View(key, loaded, base, doc_ids, live)
            return self._view, self.codec(conn, gen)
        raise AssertionError("unreachable")

    def _scratch(self, name: str, n: int, dtype) -> np.ndarray:
        """A reusable zero-filled per-thread buffer of at least ``n`` items (the caller leaves it
        zeroed where it wrote). Fresh multi-megabyte temporaries cost page faults on every query,
        more than the work done in them."""
        buf = getattr(self._local, name, None)
        if buf is None or len(buf) < n:
            buf = np.zeros(max(n, 1024), dtype)
            setattr(self._local, name, buf)
        return buf

    def _work(self, name: str, n: int, dtype) -> np.ndarray:
        """A reusable per-thread buffer of at least ``n`` items, contents undefined."""
        buf = getattr(self._local, name, None)
        if buf is None or len(buf) < n or buf.dtype != dtype:
            buf = np.empty(max(n, 1024), dtype)
            setattr(self._local, name, buf)
        return buf[:n]

    @staticmethod
    def _runs(view: _View, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each global doc's tokens are: (segment index per doc, (n, 2) first token and
        length in that segment)."""
        if view.runs is None:  # every segment's (first token, length) in global doc order, once per view
            view.runs = (np.concatenate([sg.layout[:, 1:3] for sg in view.segs]) if view.segs
                         else np.zeros((0, 2), np.int64))
        return np.searchsorted(view.base, docs, side="right") - 1, view.runs[docs]

    @staticmethod
    def _copy_runs(view: _View, seg_of: list[int], lay: list, codes: np.ndarray, resid: np.ndarray | None = None,
                   scale: np.ndarray | None = None) -> None:
        """Each doc's contiguous token run copied as a slice into the next rows of the outputs
        (``resid`` and ``scale`` optional) (160 random stdlib docs: 1.74 ms against 2.67 for
        fancy indexing by per-token ranges, which gathered into a temporary and scattered that
        into place)."""
        o = 0
        for si, (s, n) in zip(seg_of, lay, strict=True):
            seg = view.segs[si]
            codes[o : o + n] = seg.codes[s : s + n]
            if resid is not None:
                resid[o : o + n] = seg.resid[s : s + n]
            if scale is not None:
                scale[o : o + n] = 1.0 if seg.scale is None else seg.scale[s : s + n]
            o += n

    def _gather(self, view: _View, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(codes, residuals, lengths, scales (float32; 1 in a version-1 segment)) of the tokens of
        global docs, in the order given."""
        seg_of, lay = self._runs(view, docs)
        lengths = lay[:, 1].copy()
        total = int(lengths.sum())
        rb = view.segs[0].resid.shape[1] if view.segs else 0
        codes = np.empty(total, _code_dtype(view))
        resid = np.empty((total, rb), np.uint8)
        scale = np.empty(total, np.float32)
        self._copy_runs(view, seg_of.tolist(), lay.tolist(), codes, resid, scale)
        return codes, resid, lengths, scale

    def _decode_docs(self, view: _View, codec: ResidualCodec, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Decoded token vectors of global docs (in the order given) and each doc's first row."""
        codes, resid, lengths, scale = self._gather(view, docs)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        vecs = codec.decode(codes, resid)
        vecs *= scale[:, None]
        return vecs, starts

    EXACT_BLOCK_TOKENS = 2048  # tokens decoded and scored at a time (buffers stay in cache)

    def _exact_scores(self, view: _View, codec: ResidualCodec, query: np.ndarray, docs: np.ndarray,
                      st: np.ndarray | None = None) -> np.ndarray:
        """Exact MaxSim over the decoded vectors: ``q . x = S[q, code] + q . residual``, so only
        the residuals are decoded (``st`` = (K, q) query-centroid scores, computed if absent).

        Decoded in blocks of whole documents (about ``EXACT_BLOCK_TOKENS`` tokens) into reused
        per-thread buffers, with a clip-mode ``take`` (``_byte_offsets``): 3x faster than decoding
        all candidates at once into fresh arrays (measured, 64 candidates, 4 bits)."""
        if len(docs) == 0:
            return np.zeros(0, np.float32)
        if st is None:
            st = self._centroid_scores(codec, query)
        # Each block gathers its own documents' tokens into its thread's buffers (no gather of
        # every candidate up front: half of it now runs on the helper thread, and a block's
        # tokens are still in the cache when they are scored).
        seg_of, lay = self._runs(view, docs)
        ends = np.cumsum(lay[:, 1])
        out = np.empty(len(docs), np.float32)
        iq = self._query_ints(codec, query)
        if iq is not None and iq[4] is not None:  # the C kernel: no blocks, no buffers
            two = int(ends[-1]) >= self.PARALLEL_MIN_TOKENS and len(docs) > 1
            self._score_native(view, iq, st, seg_of, lay, ends, out, helper_pool() if two else None)
            return out
        runs = (seg_of.tolist(), lay.tolist())
        blocks = []  # (first doc, end doc, first token, end token): whole documents
        i = 0
        while i < len(docs):
            t0 = int(ends[i - 1]) if i else 0
            j = max(int(np.searchsorted(ends, t0 + self.EXACT_BLOCK_TOKENS, side="right")), i + 1)
            blocks.append((i, j, t0, int(ends[j - 1])))
            i = j
        pool = helper_pool() if int(ends[-1]) >= self.PARALLEL_MIN_TOKENS and len(blocks) > 1 else None
        if pool is None:
            self._score_blocks(blocks, codec, query, st, view, runs, ends, out, iq)
            return out
        # Every other block on a helper thread (NumPy's take and matmul release the GIL; each
        # thread decodes into its own buffers). 12,670-chunk stdlib index, 2 cores, the same
        # results: a whole warm search 1.17-1.19x (semantic p50 16.2-17.0 -> 13.4-14.2 ms,
        # hybrid 43.0-47.0 -> 36.9-38.7 ms; docs/daemon.md).
        half = pool.submit(self._score_blocks, blocks[1::2], codec, query, st, view, runs, ends, out, iq)
        self._score_blocks(blocks[0::2], codec, query, st, view, runs, ends, out, iq)
        half.result()
        return out

    def _score_native(self, view: _View, iq: tuple, st: np.ndarray, seg: np.ndarray, lay: np.ndarray,
                      ends: np.ndarray, out: np.ndarray, pool) -> None:
        """The re-rank of nibble codecs by the fused C kernel (``index/_kernels.c``), which reads
        each document in place from its segment: the documents split in two halves of about the
        same number of tokens, one on the helper thread (the kernel releases the GIL). 100K
        synthetic chunks, 2 AVX2 cores: the re-rank 12.1 -> ~5 ms in a search."""
        arrays = ([s.resid for s in view.segs], [s.codes for s in view.segs], [s.scale for s in view.segs])
        start = np.ascontiguousarray(lay[:, 0])
        length = np.ascontiguousarray(lay[:, 1])
        w = (iq[4], iq[1], iq[2], st)
        if pool is None:
            native.rerank_nibbles(*arrays, seg, start, length, *w, out)
            return
        h = min(max(int(np.searchsorted(ends, ends[-1] / 2)), 1), len(out) - 1)
        half = pool.submit(native.rerank_nibbles, *arrays, seg[h:], start[h:], length[h:], *w, out[h:])
        native.rerank_nibbles(*arrays, seg[:h], start[:h], length[:h], *w, out[:h])
        half.result()

    # Candidate generation sums every doc densely while the index has at most this many docs per
    # (query token's) entry; sparse random access beyond (see ``_candidates``).
    DENSE_DOCS_PER_ENTRY = 128

    # Below this many candidate tokens a re-rank runs on the calling thread alone (the hand-off
    # costs more than it saves; the C kernel on stdlib docs, 2 AVX2 cores: 2,042 tokens 390 us
    # alone vs 423 split, 4,454 tokens 865 vs 521-544).
    PARALLEL_MIN_TOKENS = 4096

    def _score_blocks(self, blocks: list[tuple[int, int, int, int]], codec: ResidualCodec, query: np.ndarray,
                      st: np.ndarray, view: _View, runs: tuple[list[int], list], ends: np.ndarray,
                      out: np.ndarray, iq: tuple | None = None) -> None:
        nb = view.segs[0].resid.shape[1]
        offsets = self._byte_offsets(nb)
        nibbles = iq is not None and iq[3]
        table = codec._byte_values if iq is None else None if nibbles else codec.int_levels()[0]
        seg_of, lay = runs
        code_dtype = _code_dtype(view)
        rq = codec.residual_query(query).T if iq is None else None  # float path: once, not per block
        for i, j, t0, t1 in blocks:
            n = t1 - t0
            codes = self._work("bcodes", n, code_dtype)
            resid = self._work("bresid", n * nb, np.uint8).reshape(n, nb)
            scale = self._work("bscale", n, np.float32)
            self._copy_runs(view, seg_of[i:j], lay[i:j], codes, resid, scale)
            if nibbles:  # equally spaced levels: the nibbles are the integers (no table, no take)
                dec = self._work("decn", n * 2 * nb, np.uint8).reshape(n, 2 * nb)
                np.right_shift(resid, 4, out=dec[:, :nb])
                np.bitwise_and(resid, 15, out=dec[:, nb:])
            else:
                idx = self._work("idx", n * nb, offsets.dtype).reshape(n, nb)
                np.add(resid, offsets, out=idx, dtype=offsets.dtype)
                dec = self._work("dec" if iq is None else "deci", n * nb, table.dtype).reshape(n, nb)
                table.take(idx, out=dec, mode="clip")
            # (token, query token) layout: the centroid scores are added as contiguous rows of
            # st, and each document's max runs down its own block of rows
            sims = self._work("sims", len(query) * n, np.float32).reshape(n, len(query))
            if iq is None:
                np.matmul(dec.view(np.float32).reshape(n, codec.rdim), rq, out=sims)
            else:
                w8, alpha, offset = iq[:3]
                y = int_matmul(dec.view(np.uint8).reshape(n, codec.rdim), w8)
                np.multiply(y, alpha, out=sims, dtype=np.float32, casting="unsafe")  # exact: |y| < 2**24
                sims += offset
            cent = self._work("cent", len(query) * n, np.float32).reshape(n, len(query))
            np.take(st, codes, axis=0, out=cent)
            sims += cent
            sims *= scale[:, None]  # each decoded token at unit length
            starts = np.concatenate([[0], ends[i : j - 1] - t0]).astype(np.int64)
            out[i:j] = np.maximum.reduceat(sims, starts, axis=0).sum(axis=1)

    def _query_ints(self, codec: ResidualCodec, query: np.ndarray) -> tuple | None:
        """The query's side of the integer re-rank, (w8, alpha, offset, nibbles, w8 packed for the
        C kernel or None) (None: float32),
        remembered for the thread's last query like ``_centroid_scores``: hybrid fusion scores one
        query's candidates in several rounds."""
        if not self.settings.integer_scores or codec.dim > MAX_DIM:
            return None
        last = getattr(self._local, "query_ints", None)
        if last is not None and last[0] is codec and last[1].shape == query.shape and np.array_equal(last[1], query):
            return last[2]
        if codec.nibble_levels:
            w8, alpha, offset = codec.nibble_query(query)
            packed = native.pack_nibble_weights(w8) if native.available() and w8.shape[0] % 8 == 0 else None
            iq = (w8, alpha, offset, True, packed)
        else:
            iq = (*codec.int_query(query), False, None)
        self._local.query_ints = (codec, query.copy(), iq)
        return iq

    def _centroid_scores(self, codec: ResidualCodec, query: np.ndarray, st: np.ndarray | None = None) -> np.ndarray:
        """(K, q) query-centroid scores, remembered for the thread's last query: hybrid fusion
        scores one query's candidates in several rounds (``Searcher._fuse_exactly``), and each
        round would otherwise redo this (q x dim x K) product (~2 ms at 4,096 centroids).
        ``st``: scores already computed for ``query`` (stage 1's), to remember."""
        last = getattr(self._local, "centroid_scores", None)
        integer = self.settings.integer_scores
        if st is None and last is not None and last[0] is codec and last[3] == integer \
                and last[1].shape == query.shape and np.array_equal(last[1], query):
            return last[2]
        if st is None:
            st = codec.centroid_scores(query, integer, helper_pool())
        self._local.centroid_scores = (codec, query.copy(), st, integer)
        return st

    def _byte_offsets(self, nb: int) -> np.ndarray:
        """Where each byte position's 256 entries start in the codec's decode table: uint16
        while the table has at most 65,536 entries (up to 256 residual bytes, e.g. 384-d at 4
        bits), which ``take`` reads 20% faster than intp indices (4x fewer bytes written)."""
        got = getattr(self._local, "offsets", None)
        if got is None or len(got) != nb:
            got = np.arange(nb, dtype=np.intp) * 256
            if nb <= 256:
                got = got.astype(np.uint16)
            self._local.offsets = got
        return got

    def _codes_of(self, view: _View, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(centroid ids, lengths) of the tokens of global docs, in the order given (no residuals)."""
        seg_of, lay = self._runs(view, docs)
        lengths = lay[:, 1].copy()
        codes = np.empty(int(lengths.sum()), np.int64)
        self._copy_runs(view, seg_of.tolist(), lay.tolist(), codes)
        return codes, lengths

    def _centroid_interaction(self, view: _View, st: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """PLAID stage 3: ``sum_q max_t S[q, code_t]`` over every token of each doc."""
        if len(docs) == 0:
            return np.zeros(0, np.float32)
        if native.available():  # one pass in C over the segments in place (index/_kernels.c)
            seg_of, lay = self._runs(view, docs)
            out = np.empty(len(docs), np.float32)
            native.centroid_interaction([s.codes for s in view.segs], np.asarray(seg_of, np.int64),
                                        np.ascontiguousarray(lay[:, 0]), np.ascontiguousarray(lay[:, 1]),
                                        np.ascontiguousarray(st, np.float32), out)
            return out
        codes, lengths = self._codes_of(view, docs)
        sims = st[codes]  # (n_tok, q)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        return np.maximum.reduceat(sims, starts, axis=0).sum(axis=1)

    def search(self, conn: sqlite3.Connection, query: np.ndarray, k: int,
               allowed: np.ndarray | None = None, exact: bool = False) -> tuple[np.ndarray, np.ndarray]:
        query = np.ascontiguousarray(query, dtype=np.float32)
        view, codec = self._view_for(conn)
        keep = view.live
        if allowed is not None:
            keep = keep & np.isin(view.doc_ids, allowed)
        n_live = int(keep.sum())
        if n_live == 0 or k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        p = self.settings
        rerank = max(p.rerank, k)
        if exact or n_live <= rerank:
            docs = np.flatnonzero(keep)
            scores = self._exact_scores(view, codec, query, docs)
            best = top_k(scores, k)
            return view.doc_ids[docs[best]], scores[best]
        docs, approx, st = self._candidates(view, codec, query, keep)
        if p.candidates > 0 and len(docs) > max(p.candidates, rerank):
            docs = docs[_top_stable(approx, view.doc_ids[docs], max(p.candidates, rerank))]
            approx = self._centroid_interaction(view, st, docs)
        docs = docs[_top_stable(approx, view.doc_ids[docs], rerank)]
        docs = docs[np.argsort(view.doc_ids[docs], kind="stable")]  # exact ties: lower chunk id first
        scores = self._exact_scores(view, codec, query, docs, st)
        best = top_k(scores, k)
        return view.doc_ids[docs[best]], scores[best]

    def search_deep(self, conn: sqlite3.Connection, query: np.ndarray, k: int, allowed: np.ndarray | None = None,
                    also=None, exact: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """Hybrid fusion's semantic side: the best ``rerank`` candidates get exact MaxSim, as in
        ``search``; the rest of the top ``k`` and the ``also`` chunks get their centroid
        interaction (``sum_q max_t S[q, code_t]``, no residual decoded) shifted by the median
        gap between exact and centroid scores over the exactly scored ones (the largest
        deviation from that gap is returned as the estimates' margin). Re-ranking all of
        them exactly decoded ~30x more vectors than a semantic search (docs/daemon.md)."""
        if exact:
            return super().search_deep(conn, query, k, allowed, also, exact=True)
        query = np.ascontiguousarray(query, dtype=np.float32)
        view, codec = self._view_for(conn)
        keep = view.live
        if allowed is not None:
            keep = keep & np.isin(view.doc_ids, allowed)
        p = self.settings
        rerank = max(p.rerank, 1)
        n_live = int(keep.sum())
        if n_live == 0 or k <= 0 or n_live <= rerank:
            return super().search_deep(conn, query, k, allowed, also, exact=False)
        docs, approx, st = self._candidates(view, codec, query, keep)
        st = self._centroid_scores(codec, query, st)
        sel = _top_stable(approx, view.doc_ids[docs], max(k, rerank))
        docs, approx = docs[sel], approx[sel]
        if p.candidates > 0 and len(docs) > rerank:  # PLAID stage 3 orders the deep ones too
            approx = self._centroid_interaction(view, st, docs)
        docs = docs[np.lexsort((view.doc_ids[docs], -approx))]  # best first, ties by chunk id
        top = np.sort(docs[:rerank])
        exact_scores = self._exact_scores(view, codec, query, top, st)
        deep = docs[rerank:]
        also = also() if callable(also) else also  # BM25's hits, computed meanwhile (hybrid)
        if also:
            extra = self._global_docs(view, np.asarray(list(also), dtype=np.int64))
            extra = extra[extra >= 0]
            extra = extra[keep[extra]]
            deep = np.unique(np.concatenate([deep, extra]))
        deep = deep[~np.isin(deep, top)]
        est = self._centroid_interaction(view, st, np.concatenate([top, deep]))
        gap = exact_scores - est[: len(top)]
        shift = float(np.median(gap))
        margin = float(np.quantile(np.abs(gap - shift), 0.9))  # how far 9 in 10 estimates were off, at most
        ids = view.doc_ids[np.concatenate([top, deep])]
        scores = np.concatenate([exact_scores, est[len(top):] + shift]).astype(np.float32)
        is_exact = np.arange(len(ids)) < len(top)
        order = np.lexsort((ids, -scores))
        # the top k, best first; then whatever else was scored exactly or asked for
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        wanted = (rank < k) | is_exact | np.isin(ids, np.asarray(list(also or []), np.int64))
        pick = order[wanted[order]]
        return ids[pick], scores[pick], is_exact[pick], margin

    def _candidates(self, view: _View, codec: ResidualCodec, query: np.ndarray,
                    keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stages 1-2: (global docs touched by the probed centroids, approximate scores, S^T).

        S^T = (K, q) is computed as ``C Q^T``: 6.4 ms at (16384, 384) x (384, 32) here against
        9 ms for ``Q C^T``, bit-identical, and the exact re-rank wants this layout anyway."""
        st = codec.centroid_scores(query, self.settings.integer_scores, helper_pool())  # (K, q)
        nprobe = max(1, min(self.settings.nprobe, st.shape[0]))
        probes = top_per_column(st, nprobe)  # (q, nprobe)
        pscores = st[probes, np.arange(len(query))[:, None]]
        # each token's probes in ascending score order: a doc's entries of one token then come
        # weakest first, so a plain ``put`` (sequential: the last write wins) leaves its best
        order = np.argsort(pscores, axis=1, kind="stable")
        probes, pscores = np.take_along_axis(probes, order, 1), np.take_along_axis(pscores, order, 1)
        impute = pscores[:, 0]  # (q,) the nprobe-th best centroid score
        n_docs, nq = len(view.doc_ids), len(query)
        vals = (pscores - impute[:, None]).astype(np.float32)  # (q, nprobe) >= 0
        # > 0: a doc reached only through a token's weakest probe (value 0) still sums above 0,
        # so the touched docs are those with a positive sum (no separate seen-set pass over
        # every entry: 1.5 ms at 100K chunks). 1e-30 vanishes in every sum that has a real value.
        np.maximum(vals, np.float32(1e-30), out=vals)
        if not view.segs:
            return np.zeros(0, np.int64), np.zeros(0, np.float32), st
        if native.available():
            return (*self._candidates_native(view, probes, vals, impute, keep), st)
        # Every (query token, probed centroid, doc in its list) entry, token by token: each
        # segment's inverted lists gathered into their slots of one array.
        cs, nseg = probes.ravel(), len(view.segs)
        lens = np.zeros((nq, nseg, nprobe), np.int64)
        firsts = []
        for si, seg in enumerate(view.segs):
            ok = cs < len(seg.ivf_off) - 1  # centroids added after the segment was written
            c = np.where(ok, cs, 0)
            firsts.append(seg.ivf_off[c])
            lens[:, si, :] = np.where(ok, seg.ivf_off[c + 1] - firsts[-1], 0).reshape(nq, nprobe)
        flat = lens.ravel()
        ends = np.cumsum(flat)
        if nseg == 1:
            docs = view.segs[0].ivf[_ranges(firsts[0], flat)].astype(np.intp)  # take/put want intp
        else:
            docs = np.empty(int(ends[-1]), np.intp)
            slots = (ends - flat).reshape(nq, nseg, nprobe)
            for si, seg in enumerate(view.segs):
                n = lens[:, si, :].ravel()
                docs[_ranges(slots[:, si, :].ravel(), n)] = seg.ivf[_ranges(firsts[si], n)] + view.base[si]
        evals = np.repeat(np.broadcast_to(vals[:, None, :], lens.shape).ravel(), flat)
        # One query token at a time into doc-sized float32 scratch (kept zeroed between calls):
        # its best value per doc by an ordered ``put``, then added to the running sums. Dense
        # (every doc's sum += its value, 0 for the untouched) where the index is not much larger
        # than a token's entries: one SIMD pass instead of three random-access ones (1M chunks,
        # ~21K entries a token: 47.6 -> 14.3 ms; 100K: 6.3 -> 4.1; stdlib 2.2 -> 1.35 ms; float64
        # sums of float32 values ran 4x slower, a mixed-type loop). Sparse otherwise (take, add,
        # put). float32 sums are within ~1e-6 of float64 ones (at most 32 terms below ~2 each).
        entries = int(ends[-1]) if len(ends) else 0
        dense = n_docs <= self.DENSE_DOCS_PER_ENTRY * max(entries // max(nq, 1), 1)
        try:
            cur = self._scratch("cur", n_docs, np.float32)
            acc = self._scratch("acc32", n_docs, np.float32)
            cur_n, acc_n = cur[:n_docs], acc[:n_docs]
            t0 = 0
            for t1 in ends.reshape(nq, -1)[:, -1].tolist():
                d = docs[t0:t1]
                cur.put(d, evals[t0:t1])  # a doc under several probed centroids: its best (the last)
                if dense:
                    np.add(acc_n, cur_n, out=acc_n)
                else:
                    x = acc.take(d)
                    x += cur.take(d)
                    acc.put(d, x)  # a doc listed twice writes the same sum twice
                cur.put(d, 0.0)
                t0 = t1
            cand = np.flatnonzero(acc_n > 0)
            scores = (acc_n[cand].astype(np.float64) + float(impute.sum())).astype(np.float32)
            if dense:
                acc_n.fill(0.0)
            else:
                acc[cand] = 0.0
        except BaseException:
            # an interrupted merge would leave the scratch dirty for this thread's next query
            for name in ("cur", "acc32"):
                setattr(self._local, name, None)
            raise
        ok = keep[cand]
        return cand[ok], scores[ok], st

    def _candidates_native(self, view: _View, probes: np.ndarray, vals: np.ndarray, impute: np.ndarray,
                           keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stage 2 by the C kernel (``index/_kernels.c``): the same float32 sums token by token,
        segment by segment, each inverted list read in place (no gather of every entry, no dense
        pass per query token), the candidates written out as each segment ends. 2 AVX2 cores:
        100K synthetic chunks 7.4 -> ~2 ms beyond the query-centroid product; 1M (1 bit, 70 tokens)
        ~33 -> ~20 ms (random access to ~430K touched documents' sums bounds it there)."""
        n_docs = len(view.doc_ids)
        cur = self._scratch("cur", n_docs, np.float32)
        acc = self._scratch("acc32", n_docs, np.float32)
        try:
            return native.candidates([s.ivf for s in view.segs], [s.ivf_off for s in view.segs], view.base,
                                     np.ascontiguousarray(probes, np.int64), np.ascontiguousarray(vals, np.float32),
                                     cur, acc, np.ascontiguousarray(keep, bool), float(impute.sum()))
        except BaseException:
            for name in ("cur", "acc32"):  # possibly left dirty: fresh ones next query
                setattr(self._local, name, None)
            raise

    def score(self, conn: sqlite3.Connection, query: np.ndarray, chunk_ids: list[int]) -> np.ndarray:
        query = np.ascontiguousarray(query, dtype=np.float32)
        view, codec = self._view_for(conn)
        out = np.full(len(chunk_ids), -np.inf, dtype=np.float32)
        if not len(chunk_ids) or not len(view.doc_ids):
            return out
        docs = self._global_docs(view, np.asarray(chunk_ids, dtype=np.int64))
        ok = docs >= 0
        out[ok] = self._exact_scores(view, codec, query, docs[ok])
        return out

    def _global_docs(self, view: _View, chunk_ids: np.ndarray) -> np.ndarray:
        """Global doc index of each live chunk id, -1 where absent or tombstoned. One binary
        search in the view's sorted live ids (built once per view: a search per segment cost
        ~0.3 ms a call at 10 segments, and hybrid fusion calls this 3-4 times a query)."""
        if view.by_id is None:
            live = np.flatnonzero(view.live)
            order = np.argsort(view.doc_ids[live], kind="stable")  # equal ids: the later segment last
            view.by_id = (view.doc_ids[live][order], live[order])
        ids, docs = view.by_id
        out = np.full(len(chunk_ids), -1, np.int64)
        if not len(ids):
            return out
        pos = np.searchsorted(ids, chunk_ids, side="right") - 1
        hit = pos >= 0
        hit[hit] = ids[pos[hit]] == chunk_ids[hit]
        out[hit] = docs[pos[hit]]
        return out

    def get(self, conn: sqlite3.Connection, chunk_ids: list[int]) -> list[np.ndarray]:
        view, codec = self._view_for(conn)
        docs = self._global_docs(view, np.asarray(chunk_ids, dtype=np.int64))
        if (docs < 0).any():
            raise KeyError(f"chunk {chunk_ids[int(np.argmax(docs < 0))]} has no vectors")
        vecs, starts = self._decode_docs(view, codec, docs)
        ends = np.append(starts[1:], len(vecs))
        return [vecs[a:b] for a, b in zip(starts, ends, strict=True)]

    # ----------------------------------------------------------------------- maintenance
    def _rewrite(self, conn: sqlite3.Connection, victims: list[int]) -> None:
        """Merge the live documents of ``victims`` into one segment (codes copied, not re-encoded)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            dead = np.fromiter((r[0] for r in conn.execute("SELECT chunk_id FROM tombstones")), np.int64)
            codec = self.codec(conn)
            segs = [self._load(sid) for sid in victims]
            sizes = np.array([len(sg.layout) for sg in segs], np.int64)
            doc_ids = np.concatenate([sg.layout[:, 0] for sg in segs])
            view = _View((), segs, np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64), doc_ids,
                         np.ones(len(doc_ids), bool))
            live = np.flatnonzero(~np.isin(doc_ids, dead))
            docs = live[np.argsort(doc_ids[live], kind="stable")]
            n = len(docs)
            if n:
                codes, resid, lengths, _ = self._gather(view, docs)  # scales recomputed from the codes
                self._write_encoded(conn, doc_ids[docs], lengths, codes, resid, codec)
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
        log.info("compacted %d compressed segments into one (%d chunks)", len(victims), n)

    def _is_garbage(self, name: str, live: set[int], conn: sqlite3.Connection) -> bool:
        """Compressed segments no committed row names, codecs other than the committed one,
        exact segment files (a conversion's leftovers) and stale temp files."""
        if name.startswith(".") and name.endswith(".tmp"):
            return True
        if m := _CSEG_RE.match(name):
            return int(m.group(1)) not in live
        if m := _CODEC_RE.match(name):
            return int(m.group(1)) != self.codec_generation(conn)
        return bool(_SEG_RE.match(name))

    def warm(self, conn: sqlite3.Connection) -> dict:
        """Long-lived processes (the daemon after an update, ``bench search`` before its clock):
        open the current segments, map every page of them (``container.populate``) and build
        what the first integer-scored search would (the codec's integer tables, the product
        backend). Returns {"bytes": mapped, "seconds": spent}."""
        t0 = time.perf_counter()
        view, codec = self._view_for(conn)
        live = {s.id for s in view.segs}
        for sid in [sid for sid in list(self._cseg) if sid not in live]:
            self._cseg.pop(sid, None)
        done = 0
        for seg in view.segs:
            done += populate([seg.codes, seg.resid, seg.scale, seg.ivf, seg.layout])
        if self.settings.integer_scores and codec.dim <= MAX_DIM:
            if not codec.nibble_levels:  # equally spaced levels are read from the nibbles, no table
                codec.int_levels()
            codec.centroid_scores(np.ones((1, codec.dim), np.float32), integer=True)
        return {"bytes": done, "seconds": time.perf_counter() - t0}

    def _forget(self, seg: int) -> None:
        self._cseg.pop(seg, None)
        self._view = None

    def stats(self, conn: sqlite3.Connection) -> dict:
        out = super().stats(conn)
        try:
            out["bytes"] += self._codec_path(self.codec_generation(conn)).stat().st_size
        except OSError:
            pass
        return out


def convert(conn: sqlite3.Connection, index_dir: Path, dim: int, settings: CompressSettings,
            sample_size: int = 131072, seed: int = 0, vector_dtype: str = "float16") -> dict:
    """Turn an exact index (float16, or int8 + scales: ``vector_dtype``) into a compressed one,
    in one committed step.

    Trains the codec on a sample of the live vectors (pooled as they will be stored), writes
    every live chunk into compressed segments (streamed one exact segment at a time), then in
    one transaction swaps the segment rows, clears the tombstones and flips the ``meta`` rows.
    A crash before that commit leaves the exact index as it was (the new files are orphans the
    next writer deletes). The caller holds the write lock.

    Returns:
        {"chunks", "vectors_in", "vectors_stored", "centroids", "seconds"}.
    """
    t0 = time.perf_counter()
    if store_kind(conn) == "compressed":
        raise ValueError("the index is already compressed")
    exact = SegmentStore(index_dir, dim, vector_dtype=vector_dtype)
    store = CompressedStore(index_dir, dim, settings)
    segs, dead = exact._snapshot(conn)
    rng = np.random.default_rng(seed)
    loaded: list[_Segment] = [exact._load(s) for s in segs]
    live_layouts = []
    n_in = 0
    for seg in loaded:
        keep = ~np.isin(seg.layout[:, 0], dead) if len(dead) else np.ones(len(seg.layout), bool)
        live_layouts.append(seg.layout[keep])
        n_in += int(seg.layout[keep, 2].sum())
    # Sample whole documents (pooling needs them), about sample_size stored vectors.
    all_docs = [(si, row) for si, lay in enumerate(live_layouts) for row in range(len(lay))]
    est_stored = n_in / max(settings.pool_factor, 1.0)
    frac = min(1.0, sample_size / max(est_stored, 1))
    pick = [all_docs[i] for i in np.flatnonzero(rng.random(len(all_docs)) < frac)] or all_docs[:1]
    sample = np.concatenate([
        store.prepare([loaded[si].rows(o, o + n)])[0]
        for si, row in pick for (_, o, n) in [live_layouts[si][row]]
    ])
    codec = ResidualCodec.train(sample, nbits=settings.nbits, n_centroids=settings.n_centroids or None,
                                n_vectors=int(est_stored), seed=seed,
                                components=min(settings.components, dim))
    conn.execute("BEGIN IMMEDIATE")
    try:
        store.write_codec(conn, codec)
        old = list(segs)
        n_stored = 0
        for seg, lay in zip(loaded, live_layouts, strict=True):
            for s in range(0, len(lay), 4096):
                part = lay[s : s + 4096]
                if not len(part):
                    continue
                # One segment per 4,096 chunks, encoded 512 chunks at a time: their float32
                # vectors at once were ~850 MB of a stdlib conversion's peak.
                lengths, codes, resid = [], [], []
                for b in range(0, len(part), 512):
                    vecs = store.prepare([seg.rows(o, o + n) for _, o, n in part[b : b + 512]])
                    lengths += [len(v) for v in vecs]
                    c, r = codec.encode(np.concatenate(vecs))
                    codes.append(c)
                    resid.append(r)
                store._write_encoded(conn, part[:, 0].astype(np.int64), np.array(lengths, np.int64),
                                     np.concatenate(codes), np.concatenate(resid), codec)
                n_stored += sum(lengths)
        if old:
            marks = ",".join("?" * len(old))
            conn.execute(f"DELETE FROM segments WHERE id IN ({marks})", old)
        conn.execute("DELETE FROM tombstones")
        conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (STORE_META_KEY, "compressed"))
        crashpoint("convert_before_commit")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    crashpoint("convert_committed")
    store._collect_garbage(conn)
    info = {"chunks": sum(len(x) for x in live_layouts), "vectors_in": n_in, "vectors_stored": n_stored,
            "centroids": codec.n_centroids, "seconds": round(time.perf_counter() - t0, 2)}
    log.info("compressed the index: %s", info)
    return info


def store_kind(conn: sqlite3.Connection) -> str:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (STORE_META_KEY,)).fetchone()
    return row[0] if row else "exact"


def bytes_per_vector(n_bytes: int, n_vectors: int) -> float:
    return n_bytes / n_vectors if n_vectors else math.nan
