"""Training data: tokenise once into a memory-mapped cache, length-bucketed batches, prefetch.

- ``TokenCache``: the pairs of a file, tokenised by the model's own role tokenizer, stored as
  flat int32 arrays + offsets under ``$SUPERGREP_HOME/cache/tokens/<key>/``. The key hashes the
  tokenizer files, the role settings (prefixes, lengths) and the data file's bytes, so any change
  re-tokenises and nothing else does. Written atomically (temp dir + rename).
- ``bucket_batches``: a deterministic epoch order (seed, epoch) in which each batch holds pairs
  of similar document length, so no batch is padded to the corpus' longest example.
- ``Prefetcher``: a background thread collating the next batches while the device works.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from supergrep.backends.packing import Packed, pack_documents  # noqa: F401 - re-exported
from supergrep.config import supergrep_home
from supergrep.corpus.documents import Pair
from supergrep.encoder.spec import ModelSpec, sha256_of
from supergrep.encoder.tokenize import RoleTokenizer
from supergrep.errors import InputError

CACHE_VERSION = 2  # 2: teacher scores (t_scores.npy)


def _pack(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.fromiter((t for r in rows for t in r), dtype=np.int32, count=int(offsets[-1]))
    return flat, offsets


@dataclass
class TokenCache:
    """Tokenised pairs: ``query(i)``, ``document(i)`` and ``negatives(i)`` as int32 id arrays."""

    q_ids: np.ndarray
    q_off: np.ndarray
    d_ids: np.ndarray
    d_off: np.ndarray
    n_ids: np.ndarray  # hard-negative documents, flat
    n_off: np.ndarray  # offsets into n_ids per negative document
    n_of: np.ndarray  # (n_pairs + 1,) offsets into the negative documents per pair
    t_scores: np.ndarray  # (n_pairs, 1 + n_neg) float32 teacher scores, or (n_pairs, 0) without

    def __len__(self) -> int:
        return len(self.q_off) - 1

    def query(self, i: int) -> np.ndarray:
        return self.q_ids[self.q_off[i] : self.q_off[i + 1]]

    def document(self, i: int) -> np.ndarray:
        return self.d_ids[self.d_off[i] : self.d_off[i + 1]]

    def negatives(self, i: int) -> list[np.ndarray]:
        return [self.n_ids[self.n_off[j] : self.n_off[j + 1]] for j in range(self.n_of[i], self.n_of[i + 1])]

    def doc_lengths(self) -> np.ndarray:
        return np.diff(self.d_off)

    NAMES = ("q_ids", "q_off", "d_ids", "d_off", "n_ids", "n_off", "n_of", "t_scores")

    @classmethod
    def build(cls, pairs: list[Pair], tokenizer: RoleTokenizer) -> TokenCache:
        q_ids, q_off = _pack(tokenizer([p.query for p in pairs], "query"))
        d_ids, d_off = _pack(tokenizer([p.document() for p in pairs], "document"))
        negs = [n.document() for p in pairs for n in p.negatives]
        n_ids, n_off = _pack(tokenizer(negs, "document") if negs else [])
        n_of = np.zeros(len(pairs) + 1, dtype=np.int64)
        np.cumsum([len(p.negatives) for p in pairs], out=n_of[1:])
        return cls(q_ids, q_off, d_ids, d_off, n_ids, n_off, n_of, _teacher_matrix(pairs))

    def save(self, directory: Path) -> None:
        tmp = directory.with_name(f".{directory.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for name in self.NAMES:
            np.save(tmp / f"{name}.npy", getattr(self, name), allow_pickle=False)
        (tmp / "done").write_text("ok")
        try:
            os.replace(tmp, directory)
        except OSError:  # another process finished the same cache first
            shutil.rmtree(tmp, ignore_errors=True)

    @classmethod
    def load(cls, directory: Path) -> TokenCache | None:
        if not (directory / "done").is_file():
            return None
        try:
            arrays = {n: np.load(directory / f"{n}.npy", mmap_mode="r", allow_pickle=False) for n in cls.NAMES}
        except (OSError, ValueError):
            return None
        return cls(**arrays)


def _teacher_matrix(pairs: list[Pair]) -> np.ndarray:
    """(n, 1 + n_neg) teacher scores when every pair has them for the same number of negatives
    (the listwise loss pairs row i's scores with its own documents), else (n, 0)."""
    widths = {len(p.teacher_scores) for p in pairs}
    if widths == {0} or not pairs:
        return np.zeros((len(pairs), 0), dtype=np.float32)
    if len(widths) > 1:
        raise InputError(f"teacher scores: the training rows score lists of different lengths {sorted(widths)} "
                         f"(0 = none); every row needs the positive's and the same number of negatives' "
                         f"(re-run `supergrep mine-negatives --teacher`)")
    return np.array([p.teacher_scores for p in pairs], dtype=np.float32)


def cached_tokens(pairs: list[Pair], source: Path | None, spec: ModelSpec, tokenizer: RoleTokenizer,
                  tag: str) -> TokenCache:
    """The pairs' token cache, built on first use; ``source`` is the data file it came from
    (None: no caching, e.g. for in-memory pairs)."""
    if source is None:
        return TokenCache.build(pairs, tokenizer)
    h = hashlib.sha256()
    h.update(f"v{CACHE_VERSION}|{tag}|{len(pairs)}".encode())
    h.update(sha256_of(source).encode())
    h.update(json.dumps(spec.settings.to_dict(), sort_keys=True).encode())
    for name in ("tokenizer.json", "vocab.txt", "spiece.model", "vocab.json", "merges.txt", "tokenizer_config.json"):
        f = spec.transformer_path / name
        if f.is_file():
            h.update(sha256_of(f).encode())
    directory = supergrep_home() / "cache" / "tokens" / h.hexdigest()[:24]
    got = TokenCache.load(directory)
    if got is not None and len(got) == len(pairs):
        return got
    built = TokenCache.build(pairs, tokenizer)
    directory.parent.mkdir(parents=True, exist_ok=True)
    built.save(directory)
    return TokenCache.load(directory) or built


def bucket_batches(lengths: np.ndarray, batch_size: int, seed: int, epoch: int, bucket_factor: int = 32) -> list[np.ndarray]:
    """One epoch's batches: shuffled, cut into windows of ``bucket_factor`` batches, each window
    sorted by document length and cut into full batches, then the batch order shuffled.
    Incomplete batches are dropped (every query needs the same number of negatives).

    >>> bs = bucket_batches(np.array([5, 50, 6, 49, 7, 48, 8, 47]), 2, seed=0, epoch=0, bucket_factor=4)
    >>> sorted(sorted(int(i) for i in b) for b in bs)   # short with short, long with long
    [[0, 2], [1, 3], [4, 6], [5, 7]]
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    window = batch_size * bucket_factor
    batches: list[np.ndarray] = []
    for s in range(0, len(order), window):
        chunk = order[s : s + window]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk) - batch_size + 1, batch_size)]
    perm = rng.permutation(len(batches))
    return [batches[i] for i in perm]


@dataclass
class Batch:
    """Padded token ids and masks for one step (NumPy; the backend moves them to its device).

    Attributes:
        q_ids, q_mask: (batch, q_len) query ids / True = real token (expansion tokens included).
        d_ids, d_mask: (batch + n_negatives, d_len) the positives first, in query order, then
            the hard negatives.
        epoch, index: Where in the data this batch is (for exact resume).
        packed: The documents packed into rows (``packing: true``), else None.
        t_scores: (batch, 1 + n_negatives) precomputed teacher scores of each row's own
            documents, when the data has them and negatives are used, else None.
        staged: The trainer's host side of a step done ahead (``TorchTrainer.stage``, in the
            prefetch thread): host tensors, pinned on CUDA; None until then.
        teacher: ``distill_teacher``'s own tokenisation of the same rows, (q_ids, q_mask, d_ids,
            d_mask) in the same order (queries, positives, negatives), else None.
    """

    q_ids: np.ndarray
    q_mask: np.ndarray
    d_ids: np.ndarray
    d_mask: np.ndarray
    epoch: int
    index: int
    packed: Packed | None = None
    t_scores: np.ndarray | None = None
    staged: Any = None
    teacher: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    @property
    def n_tokens(self) -> int:
        return int(self.q_mask.sum() + self.d_mask.sum())


def _pad(rows: list[np.ndarray], pad_id: int, multiple: int, width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    longest = max(len(r) for r in rows)
    if width is None:
        width = -(-longest // multiple) * multiple
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)  # (rows, width)
    mask = np.zeros((len(rows), width), dtype=bool)  # (rows, width), True = real token
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = True
    return ids, mask


def collate(cache: TokenCache, rows: np.ndarray, tokenizer: RoleTokenizer, query_expansion_to: int,
            use_negatives: bool, pad_multiple: int, epoch: int = 0, index: int = 0, *,
            widths: tuple[int, int] | None = None, pack_to: int = 0) -> Batch:
    """Pad one batch. With query expansion, queries are filled to ``query_expansion_to`` with
    the mask token and those positions count as real query tokens (ColBERT). ``widths``
    (query, document) overrides the padded lengths (a rank's shard takes its global batch's).
    ``pack_to`` > 0 also packs the documents into rows of that many tokens (``Batch.packed``)."""
    queries = [cache.query(int(i)) for i in rows]
    if query_expansion_to:
        q_ids, q_mask = _pad(queries, tokenizer.mask_id, 1, query_expansion_to)
        q_mask[:] = True
    else:
        q_ids, q_mask = _pad(queries, tokenizer.pad_id, pad_multiple, widths[0] if widths else None)
    docs = [cache.document(int(i)) for i in rows]
    if use_negatives:
        docs += [n for i in rows for n in cache.negatives(int(i))]
    d_ids, d_mask = _pad(docs, tokenizer.pad_id, pad_multiple, widths[1] if widths else None)
    packed = pack_documents(d_ids, d_mask, pack_to, tokenizer.pad_id, pad_multiple) if pack_to else None
    t_scores = np.ascontiguousarray(cache.t_scores[rows]) if use_negatives and cache.t_scores.shape[1] else None
    return Batch(q_ids, q_mask, d_ids, d_mask, epoch, index, packed, t_scores)


class Prefetcher:
    """Collates batches in a background thread, ``depth`` ahead of the consumer.

    Iterating yields ``Batch`` objects in exactly the order of ``plan`` (a list of
    (epoch, index, rows)), so resuming from a position reproduces the same data.
    """

    def __init__(self, plan: Iterator[tuple[int, int, np.ndarray]], make_batch, depth: int = 4):
        self._q: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._error: BaseException | None = None

        def work() -> None:
            try:
                for epoch, index, rows in plan:
                    if self._stop.is_set():
                        return
                    self._q.put(make_batch(rows, epoch, index))
            except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
                self._error = exc
            finally:
                self._q.put(None)

        self._thread = threading.Thread(target=work, name="supergrep-prefetch", daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[Batch]:
        while True:
            item = self._q.get()
            if item is None:
                if self._error is not None:
                    raise self._error
                return
            yield item

    def close(self) -> None:
        self._stop.set()
        try:
            while True:
                self._q.get_nowait()
        except queue.Empty:
            pass


def staged_ahead(batches: list[Batch], stage, depth: int = 4) -> Iterator[Batch]:
    """``stage(b)`` of each batch, done ``depth`` ahead in a background thread (as ``train``'s
    prefetch thread stages its batches): for benchmarks that feed prepared batches. The thread
    starts now, before the first ``next``; it stops when the iterator ends or is dropped."""
    pre = Prefetcher(((0, i, None) for i in range(len(batches))), lambda _r, _e, i: stage(batches[i]), depth)

    def gen() -> Iterator[Batch]:
        try:
            yield from pre
        finally:
            pre.close()

    return gen()
