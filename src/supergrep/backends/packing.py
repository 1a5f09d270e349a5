"""Sequence packing: documents end to end in rows of a fixed capacity, for attention with a
block-diagonal mask (``packing: true``). Pure NumPy, below both the trainers and the data layer."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Packed:
    """A batch's documents packed end to end into rows, for attention with a block-diagonal mask.

    Attributes:
        ids: (rows, width) token ids; each row holds several documents back to back.
        seg: (rows, width) which document a position belongs to (its row in ``d_ids``); -1 is
            padding (padding attends to padding only, so no softmax row is empty).
        pos: (rows, width) the position of a token within its own document (0, 1, ...).
        gather: (n_docs, d_len) for each position of the padded ``d_ids``, its flat index into
            (rows * width); padding positions point at ``rows * width``, one past the end (a zero
            vector the trainer appends).
    """

    ids: np.ndarray
    seg: np.ndarray
    pos: np.ndarray
    gather: np.ndarray

    @property
    def fill(self) -> float:
        """Share of the packed positions that are real tokens."""
        return float((self.seg >= 0).mean())


def pack_documents(d_ids: np.ndarray, d_mask: np.ndarray, capacity: int, pad_id: int, multiple: int = 8) -> Packed:
    """First-fit-decreasing packing of padded documents into rows of at most ``capacity`` tokens.

    >>> ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0], [4, 0, 0, 0]])
    >>> p = pack_documents(ids, ids > 0, capacity=4, pad_id=0, multiple=1)
    >>> p.ids.tolist(), p.seg.tolist(), p.pos.tolist()
    ([[5, 6, 7, 4], [8, 9, 0, 0]], [[0, 0, 0, 2], [1, 1, -1, -1]], [[0, 1, 2, 0], [0, 1, 0, 0]])
    >>> p.gather.tolist()   # rows * width = 8 is the zero slot
    [[0, 1, 2, 8], [4, 5, 8, 8], [3, 8, 8, 8]]
    """
    lengths = d_mask.sum(axis=1).astype(np.int64)
    capacity = max(int(capacity), int(lengths.max()))
    fill: list[int] = []
    row_of = np.zeros(len(lengths), dtype=np.int64)
    start_of = np.zeros(len(lengths), dtype=np.int64)
    for i in np.argsort(-lengths, kind="stable"):
        n = int(lengths[i])
        r = next((r for r, f in enumerate(fill) if f + n <= capacity), len(fill))
        if r == len(fill):
            fill.append(0)
        row_of[i], start_of[i] = r, fill[r]
        fill[r] += n
    rows = len(fill)
    width = -(-max(fill) // multiple) * multiple
    ids = np.full((rows, width), pad_id, dtype=np.int64)
    seg = np.full((rows, width), -1, dtype=np.int64)
    pos = np.zeros((rows, width), dtype=np.int64)
    gather = np.full(d_ids.shape, rows * width, dtype=np.int64)
    for i, n in enumerate(lengths):
        r, s, n = int(row_of[i]), int(start_of[i]), int(n)
        ids[r, s : s + n] = d_ids[i, :n]
        seg[r, s : s + n] = i
        pos[r, s : s + n] = np.arange(n)
        gather[i, :n] = r * width + s + np.arange(n)
    return Packed(ids, seg, pos, gather)


def pack_queries_and_documents(q_ids: np.ndarray, q_mask: np.ndarray, d_ids: np.ndarray, d_mask: np.ndarray,
                               capacity: int, pad_id: int, multiple: int = 8) -> Packed:
    """Queries and documents packed together (``gather`` rows: the queries, then the documents),
    so one encoder pass embeds both: what a packed training step runs."""
    width = max(q_ids.shape[1], d_ids.shape[1])

    def widen(a: np.ndarray, fill) -> np.ndarray:
        out = np.full((a.shape[0], width), fill, dtype=a.dtype)
        out[:, : a.shape[1]] = a
        return out

    ids = np.concatenate([widen(q_ids, pad_id), widen(d_ids, pad_id)])
    mask = np.concatenate([widen(q_mask, False), widen(d_mask, False)])
    return pack_documents(ids, mask, capacity, pad_id, multiple)


@dataclass
class Flat:
    """Queries and documents laid end to end with no padding at all (``attn_implementation:
    varlen``): what the varlen T5 forward and its attention kernel take.

    Attributes:
        ids: (N,) the real tokens of every query, then of every document, in order.
        cu: (n + 1,) int32 start offset of each sequence in ``ids`` (cu[-1] = N).
        gather: (n, width) for each position of the padded layout (queries then documents, both
            widened to the wider of the two), its index into ``ids``; padding points at N, one past
            the end (a zero vector the trainer appends).
        max_len: the longest sequence.
        pos: (N,) each token's position within its own sequence (for absolute position
            embeddings: BERT, RoBERTa).
    """

    ids: np.ndarray
    cu: np.ndarray
    gather: np.ndarray
    max_len: int
    pos: np.ndarray


def filler_lengths(fill: int, fixed: int = 0) -> np.ndarray:
    """The filler sequences' lengths for ``fill`` tokens: as many of 64 as needed (the last one
    shorter), or exactly ``fixed`` of them, as even as they come (each >= 1 token when fill >=
    fixed: a sequence of no tokens is an empty softmax).

    >>> filler_lengths(130).tolist(), filler_lengths(130, 4).tolist(), filler_lengths(0).tolist()
    ([64, 64, 2], [33, 33, 32, 32], [])
    """
    if fixed:
        return np.full(fixed, fill // fixed, dtype=np.int64) + (np.arange(fixed) < fill % fixed)
    fillers = np.full(-(-fill // 64), 64, dtype=np.int64)
    if fill:
        fillers[-1] = fill - 64 * (len(fillers) - 1)
    return fillers


def flatten_queries_and_documents(q_ids: np.ndarray, q_mask: np.ndarray, d_ids: np.ndarray,
                                  d_mask: np.ndarray, pad_multiple: int = 1, fixed_fillers: int = 0) -> Flat:
    """Vectorised (no per-sequence Python loop): masks are prefixes (real tokens first).

    ``pad_multiple`` > 1 rounds the token count up with filler sequences of at most 64 tokens
    (id 0, their own positions, never gathered), so the step's GEMM shapes repeat across steps
    instead of being new every step. ``fixed_fillers`` > 0: always that many filler sequences, the
    token count rounded up from the real tokens plus one per filler, so the offsets ``cu`` keep one
    length across steps too (static shapes for CUDA graphs).

    >>> f = flatten_queries_and_documents(np.array([[5, 6]]), np.array([[1, 1]], bool),
    ...                                   np.array([[7, 8, 9], [4, 0, 0]]), np.array([[1, 1, 1], [1, 0, 0]], bool))
    >>> f.ids.tolist(), f.cu.tolist(), f.gather.tolist(), f.max_len, f.pos.tolist()
    ([5, 6, 7, 8, 9, 4], [0, 2, 5, 6], [[0, 1, 6], [2, 3, 4], [5, 6, 6]], 3, [0, 1, 0, 1, 2, 0])
    >>> g = flatten_queries_and_documents(np.array([[5, 6]]), np.array([[1, 1]], bool),
    ...                                   np.array([[7, 8, 9], [4, 0, 0]]), np.array([[1, 1, 1], [1, 0, 0]], bool), 8)
    >>> g.ids.tolist(), g.cu.tolist(), g.gather.tolist(), g.pos.tolist()
    ([5, 6, 7, 8, 9, 4, 0, 0], [0, 2, 5, 6, 8], [[0, 1, 8], [2, 3, 4], [5, 8, 8]], [0, 1, 0, 1, 2, 0, 0, 1])
    """
    width = max(q_ids.shape[1], d_ids.shape[1])

    def widen(a: np.ndarray, fill) -> np.ndarray:
        out = np.full((a.shape[0], width), fill, dtype=a.dtype)
        out[:, : a.shape[1]] = a
        return out

    ids = np.concatenate([widen(q_ids, 0), widen(d_ids, 0)])
    mask = np.concatenate([widen(q_mask.astype(bool), False), widen(d_mask.astype(bool), False)])
    lengths = mask.sum(axis=1)
    if not np.array_equal(mask, np.arange(width)[None, :] < lengths[:, None]):
        raise ValueError("flatten_queries_and_documents needs prefix masks (real tokens first)")
    n_real = int(lengths.sum())
    fill = fixed_fillers + -(n_real + fixed_fillers) % max(pad_multiple, 1)
    fillers = filler_lengths(fill, fixed_fillers)
    cu = np.zeros(len(lengths) + len(fillers) + 1, dtype=np.int32)
    np.cumsum(np.concatenate([lengths, fillers]), out=cu[1:])
    n = int(cu[-1])
    gather = np.where(mask, cu[:len(lengths), None].astype(np.int64) + np.arange(width)[None, :], n)
    pos = np.concatenate([np.broadcast_to(np.arange(width), mask.shape)[mask]]
                         + [np.arange(n) for n in fillers]).astype(np.int64)
    flat_ids = np.concatenate([ids[mask], np.zeros(fill, dtype=ids.dtype)]).astype(np.int64)
    return Flat(flat_ids, cu, gather, int(max(lengths.max(), fillers.max(initial=0))), pos)
