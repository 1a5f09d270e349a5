"""Differentiable MaxSim scores between every query and every document of a batch."""

from __future__ import annotations

from typing import Any

NEG = -1e4  # masked similarity: below any cosine, finite so gradients stay finite


def maxsim_scores(ops: Any, q: Any, q_mask: Any, d: Any, d_mask: Any, doc_chunk: int = 64) -> Any:
    """Mean over query tokens of the best document-token similarity, for all pairs.

    Args:
        ops: The framework's ops (``supergrep.train.ops``).
        q: (n_q, q_len, dim) unit query token vectors.
        q_mask: (n_q, q_len) True = a real query token (expansion tokens count as real).
        d: (n_d, d_len, dim) unit document token vectors.
        d_mask: (n_d, d_len) True = a real document token.
        doc_chunk: Documents scored at a time: bounds the (n_q, q_len, chunk, d_len) temporary.

    Returns:
        (n_q, n_d) scores in [-1, 1]. Training uses the mean over query tokens (search ranks by
        the sum; per query the order is the same) so that a temperature has a fixed meaning.

    Relations: ``supergrep.scoring.maxsim`` is the NumPy inference version (sums, no masks).

    >>> import numpy as np
    >>> from supergrep.train.ops import NumpyOps
    >>> q = np.array([[[1.0, 0.0], [0.0, 1.0]]])            # 1 query, 2 tokens
    >>> d = np.array([[[0.6, 0.8], [1.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]])
    >>> dm = np.array([[True, True], [True, False]])        # doc 1 has one real token
    >>> maxsim_scores(NumpyOps(), q, np.ones((1, 2), bool), d, dm).round(3).tolist()
    [[0.9, 0.5]]
    """
    fused = getattr(ops, "fused_maxsim", None)  # torch on CUDA: Triton kernels, no (n_q, q_len, n_d, d_len) temporary
    if fused is not None:
        scores = fused(q, q_mask, d, d_mask)
        if scores is not None:
            return scores
    parts = []
    n_d = ops.shape(d)[0]
    for s in range(0, n_d, doc_chunk):
        dc, mc = d[s : s + doc_chunk], d_mask[s : s + doc_chunk]
        sims = ops.einsum("iqh,jkh->iqjk", q, dc)  # (n_q, q_len, chunk, d_len)
        sims = ops.where(mc[None, None, :, :], sims, NEG)
        best = ops.max(sims, axis=3)  # (n_q, q_len, chunk)
        best = ops.where(q_mask[:, :, None], best, 0.0)
        parts.append(ops.sum(best, axis=1))  # (n_q, chunk)
    total = ops.concat(parts, axis=1)  # (n_q, n_d)
    n_tokens = ops.sum(ops.astype_float(q_mask), axis=1)  # (n_q,)
    return total / n_tokens[:, None]
