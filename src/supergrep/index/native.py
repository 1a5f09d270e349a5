"""The compressed store's fused C kernels (``_kernels.c``), when the build compiled them.

``pip install`` compiles ``supergrep.index._kernels`` where a C compiler is available (setup.py
marks it optional); without it, or with ``SUPERGREP_NATIVE=0`` in the environment (A/B
benchmarks, tests of the fallback), the store runs the same arithmetic in NumPy.
"""

from __future__ import annotations

import os

import numpy as np

try:
    from supergrep.index import _kernels
except ImportError:  # no compiler at install time: the NumPy path
    _kernels = None


def available() -> bool:
    """Whether the fused kernels are compiled and enabled."""
    return _kernels is not None and os.environ.get("SUPERGREP_NATIVE", "1") != "0"


def simd() -> str:
    """The kernels' instruction set: 'avx2', 'scalar', or 'none' (not compiled or disabled)."""
    return _kernels.simd() if available() else "none"


def pack_nibble_weights(w8: np.ndarray) -> np.ndarray:
    """The nibble re-rank's query weights, (2 * nb, q) int8 with the high nibbles' rows first
    (``ResidualCodec.nibble_query``), in the kernel's layout: (nb / 4, 2, ceil(q / 8), 8, 4),
    i.e. [group g, half h, query block b, lane l, byte r] = w8[h * nb + 4 g + r, 8 b + l].

    >>> w = np.arange(16, dtype=np.int8).reshape(8, 2)  # nb = 4, q = 2
    >>> p = pack_nibble_weights(w)
    >>> p.shape, p[0, 0, 0, 0].tolist(), p[0, 1, 0, 1].tolist(), int(p[0, 0, 0, 2:].any())
    ((1, 2, 1, 8, 4), [0, 2, 4, 6], [9, 11, 13, 15], 0)
    """
    rows, q = w8.shape
    nb = rows // 2
    if rows % 2 or nb % 4:
        raise ValueError(f"nibble weights need a multiple of 8 rows, got {rows}")
    njb = -(-q // 8)
    w = np.zeros((rows, njb * 8), np.int8)
    w[:, :q] = w8
    return np.ascontiguousarray(w.reshape(2, nb // 4, 4, njb, 8).transpose(1, 0, 3, 4, 2))


def rerank_nibbles(resid: list[np.ndarray], codes: list[np.ndarray], scale: list[np.ndarray | None],
                   seg: np.ndarray, start: np.ndarray, length: np.ndarray, wp: np.ndarray, alpha: np.ndarray,
                   offset: np.ndarray, st: np.ndarray, out: np.ndarray) -> None:
    """``out[d]`` = sum over query tokens of max over document ``d``'s tokens of
    ``((y * alpha + offset) + st[code]) * scale``, ``y`` the exact integer product of the token's
    4-bit residual levels with the query's weights (``wp``: ``pack_nibble_weights``).

    Document ``d`` is rows ``start[d] : start[d] + length[d]`` of segment ``seg[d]``'s arrays
    (``resid[s]`` (n, nb) uint8, ``codes[s]`` uint16/int32, ``scale[s]`` float16/float32 or None
    for 1), read in place. Runs with the GIL released; every index is checked first."""
    _kernels.rerank_nibbles(resid, codes, scale, seg, start, length, wp, alpha, offset, st, out)


def candidates(ivf: list[np.ndarray], ivf_off: list[np.ndarray], base: np.ndarray, probes: np.ndarray,
               vals: np.ndarray, cur: np.ndarray, acc: np.ndarray, keep: np.ndarray,
               impute_total: float) -> tuple[np.ndarray, np.ndarray]:
    """WARP-style candidates: for each query token ``j`` (a row of ``probes`` (q, nprobe) int64
    centroid ids, ``vals`` (q, nprobe) float32 > 0), every document in one of the token's probed
    inverted lists gets its best value there added to its float32 sum, token by token. Returns
    (documents with a sum, in order, that ``keep`` (bool, one per document) allows; their sums +
    ``impute_total``, as float32).

    Segment ``s`` holds documents ``base[s]`` up to the next base; its lists are
    ``ivf[s][ivf_off[s][c]:ivf_off[s][c + 1]]`` (int32 local documents); a centroid past a
    segment's ``ivf_off`` is skipped. ``cur`` and ``acc`` are zeroed float32 scratch of one value
    per document, left zeroed. GIL released; a list entry outside its segment raises ValueError."""
    n = len(keep)
    cand = np.empty(n, np.int64)
    score = np.empty(n, np.float32)
    got = _kernels.candidates(ivf, ivf_off, base, probes, vals, cur[:n], acc[:n], keep.view(np.uint8),
                              float(impute_total), cand, score)
    return cand[:got], score[:got]


def centroid_interaction(codes: list[np.ndarray], seg: np.ndarray, start: np.ndarray, length: np.ndarray,
                         st: np.ndarray, out: np.ndarray) -> None:
    """PLAID's centroid interaction: ``out[d]`` = sum over query tokens of max over document
    ``d``'s tokens of ``st[code, j]`` (``st`` (K, q) float32), the documents read in place as in
    ``rerank_nibbles`` (``codes[s]`` uint16/int32 per segment). GIL released."""
    _kernels.centroid_interaction(codes, seg, start, length, st, out)
