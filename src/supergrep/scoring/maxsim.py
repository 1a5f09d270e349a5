"""MaxSim (late interaction) over variable-length token matrices, in NumPy.

The score of a document for a query is the sum, over query tokens, of the query token's best
cosine similarity with any document token (Khattab & Zaharia, ColBERT, 2020). Token vectors are
unit length, so a dot product is a cosine.
"""

from __future__ import annotations

import numpy as np


def maxsim(query: np.ndarray, document: np.ndarray) -> float:
    """MaxSim of one query against one document.

    Args:
        query: (q_tokens, dim) unit rows.
        document: (d_tokens, dim) unit rows.

    >>> q = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> d = np.array([[0.6, 0.8], [1.0, 0.0]])
    >>> round(maxsim(q, d), 6)  # max(0.6, 1.0) + max(0.8, 0.0)
    1.8
    """
    if len(document) == 0:
        return 0.0
    return float((query @ document.T).max(axis=1).sum())


def maxsim_packed(query: np.ndarray, tokens: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """MaxSim of one query against many documents stored back to back.

    Args:
        query: (q_tokens, dim) float32 unit rows.
        tokens: (n_tokens, dim) all documents' token vectors, concatenated (any float dtype;
            converted to float32 here, so pass a block, not a whole index).
        starts: (n_docs,) int64 offset of each document's first token in ``tokens``; strictly
            increasing (every document has at least one token) and ``starts[0] == 0``.

    Returns:
        (n_docs,) float32 scores.

    >>> q = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    >>> toks = np.array([[0.6, 0.8], [1.0, 0.0], [0.0, 1.0]], np.float32)
    >>> [round(float(s), 4) for s in maxsim_packed(q, toks, np.array([0, 2]))]  # docs: rows 0-1, row 2
    [1.8, 1.0]
    """
    if len(starts) == 0:
        return np.zeros(0, np.float32)
    sims = query.astype(np.float32, copy=False) @ tokens.astype(np.float32, copy=False).T  # (q, n_tokens)
    best = np.maximum.reduceat(sims, starts, axis=1)  # (q, n_docs)
    return best.sum(axis=0)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, best first (ties broken by lower index).

    >>> top_k(np.array([0.1, 0.9, 0.5, 0.9]), 3).tolist()
    [1, 3, 2]
    """
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, np.int64)
    part = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    return part[np.lexsort((part, -scores[part]))]
