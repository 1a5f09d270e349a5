"""Residual compression of token vectors (ColBERTv2-style): a k-means centroid + 1, 2 or 4 bits
per dimension.

A vector ``x`` is stored as the id of its nearest centroid ``c`` (by inner product, the vectors
are unit length) and, per dimension ``d``, the bucket of ``x[d] - c[d]`` among ``2**nbits``
buckets. It is decoded as ``c[d] + weight[d, bucket]``. Each dimension's buckets are a scalar
quantiser fitted to that dimension's residuals on the training sample, started from
equal-probability buckets (ColBERTv2's) and refined by Lloyd's algorithm: by default with
equally spaced weights (``uniform_levels``: a 4-bit bucket index is then itself the integer the
re-rank multiplies, read from the packed nibbles with no decode table), or as a free Lloyd-Max
quantiser (``lloyd_max``, ``ResidualCodec.LEVELS = "lloyd"``, the default before 2026-11-27:
1.3x less reconstruction error, but a table lookup per byte to decode). Either has ~3x less
error than the equal-probability buckets on heavy-tailed token states. Per-dimension buckets
(ColBERTv2 uses one set for all dimensions) matter for raw transformer token states, whose
dimensions have very different spreads.

Bits are packed most significant first, ``8 / nbits`` dimensions per byte, so a 384-d vector
takes 48 bytes at 1 bit plus its centroid id. The inner product of a query vector with a stored
one never needs the decoded vector: ``q . x = q . c + sum_byte LUT[byte position, byte value]``
(a 256-entry table per byte position, built once per query token).

K-means comes from faiss (``faiss.Kmeans``): the library ColBERT/PLAID train with, one
dependency-free abi3 wheel on PyPI (numpy is its only requirement), and much faster than
scikit-learn's MiniBatchKMeans, which would also pull SciPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from supergrep.index.intmm import MAX_DIM, int_matmul

NBITS = (1, 2, 4)


def default_n_centroids(n_vectors: int) -> int:
    """A power of two near ``4 * sqrt(n)``, in [16, 65536] and at most n / 32 (enough points per
    centroid to train on). 1M vectors -> 4096 centroids, 50M -> 32768.

    >>> default_n_centroids(1_000_000), default_n_centroids(50_000_000), default_n_centroids(10_000)
    (4096, 32768, 312)
    """
    k = 2 ** round(math.log2(max(4 * math.sqrt(max(n_vectors, 1)), 1)))
    k = min(k, max(n_vectors // 32, 16))
    return int(min(max(k, 16), 65536))


def _decode_table(nbits: int) -> np.ndarray:
    """(256, 8 // nbits) uint8: the buckets a packed byte holds, most significant first."""
    per = 8 // nbits
    v = np.arange(256, dtype=np.uint16)[:, None]
    shifts = np.arange(per - 1, -1, -1, dtype=np.uint16) * nbits
    return ((v >> shifts) & ((1 << nbits) - 1)).astype(np.uint8)


@dataclass
class ResidualCodec:
    """Centroids + per-dimension residual buckets.

    Attributes:
        centroids: (K, dim) float32 unit rows.
        cutoffs: (rdim, 2**nbits - 1) float32 bucket boundaries of each coded component.
        weights: (rdim, 2**nbits) float32 decoded value of each bucket.
        nbits: 1, 2 or 4.
        train_error: Mean squared reconstruction error on the training sample (the drift
            reference: new vectors decoding much worse than this mean the centroids no longer
            fit the data).
        rotation: None (the residual's own dimensions are coded, rdim = dim) or (dim, rdim)
            float32 orthonormal columns: the residual's principal axes, largest variance first
            (``principal_axes``). The codec then quantises ``rdim`` coordinates of the residual in
            that basis and drops the rest: the residuals of transformer token states are
            anisotropic (on the stdlib minilm-l3 index the top 128 of 384 axes hold 72% of their
            variance), so at equal bytes spending them on the strong axes keeps more of each
            vector (docs/benchmarks.md, "Rotated residuals").
    """

    centroids: np.ndarray
    cutoffs: np.ndarray
    weights: np.ndarray
    nbits: int
    train_error: float = 0.0
    rotation: np.ndarray | None = None

    def __post_init__(self) -> None:
        self._table = _decode_table(self.nbits)
        # (residual_bytes * 256, 8 // nbits): the decoded residual values each byte stands for.
        if self.rotation is not None:
            self.rotation = np.ascontiguousarray(self.rotation, dtype=np.float32)
            if self.rotation.shape != (self.dim, len(self.weights)) or len(self.weights) > self.dim:
                raise ValueError(f"rotation {self.rotation.shape} does not map {self.dim} dimensions to {len(self.weights)}")
        per = 8 // self.nbits
        w = self.weights.reshape(self.rdim // per, per, 1 << self.nbits)  # (bytes, per, levels)
        t = self._table.astype(np.int64)  # (256, per)
        values = np.ascontiguousarray(w[:, np.arange(per)[None, :], t[None, :, :]].reshape(-1, per), dtype=np.float32)
        # One item per (byte position, byte value), as one wide scalar: a 1-D take of 8/16-byte
        # items is 4x faster than fancy-indexing rows of a 2-D table (measured, 4-bit decode).
        wide = {2: np.dtype(np.int64), 4: np.dtype(np.complex128)}.get(per, np.dtype((np.void, per * 4)))
        self._byte_values = values.view(wide).ravel()

    @property
    def dim(self) -> int:
        return int(self.centroids.shape[1])

    @property
    def rdim(self) -> int:
        """Coded components of each residual: ``dim``, or the rotation's kept axes."""
        return int(self.weights.shape[0])

    @property
    def n_centroids(self) -> int:
        return int(self.centroids.shape[0])

    @property
    def residual_bytes(self) -> int:
        return self.rdim * self.nbits // 8

    @property
    def code_dtype(self) -> np.dtype:
        return np.dtype(np.uint16 if self.n_centroids <= 65536 else np.int32)

    # ------------------------------------------------------------------------- training
    @classmethod
    def train(cls, sample: np.ndarray, nbits: int = 1, n_centroids: int | None = None,
              niter: int | None = None, seed: int = 0, n_vectors: int | None = None,
              components: int = 0) -> ResidualCodec:
        """Fit centroids (faiss k-means) and residual buckets on a sample of unit vectors.

        Args:
            sample: (n, dim) float32 unit rows.
            nbits: Bits per coded component of the residual.
            n_centroids: Number of centroids (default from ``n_vectors``, see
                ``default_n_centroids``).
            n_vectors: How many vectors the codec will encode (sizes the default K).
            components: 0: code every dimension of the residual as it is. Otherwise code its
                coordinates on its ``components`` principal axes (``rotation``), fitted on the
                same sample as the buckets.
        """
        import faiss

        if nbits not in NBITS:
            raise ValueError(f"nbits must be one of {NBITS}, got {nbits}")
        sample = np.ascontiguousarray(sample, dtype=np.float32)
        n, dim = sample.shape
        rdim = components or dim
        if not 0 < rdim <= dim or rdim * nbits % 8:
            raise ValueError(f"{rdim} coded components (of {dim}) x {nbits} bits must be a multiple of 8 bits")
        k = n_centroids or default_n_centroids(n_vectors or n)
        k = max(1, min(k, n))
        # 32 points per centroid, 8 iterations: the codec is refined by the residuals anyway, and
        # training must stay a small fraction of the time it took to encode the vectors.
        # min_points_per_centroid: 32 per centroid is the design, not a mistake faiss should
        # print a warning about on every large index's first conversion (it wants 39)
        km = faiss.Kmeans(dim, k, niter=niter or cls.KMEANS_ITERS, seed=seed, spherical=True, verbose=False,
                          max_points_per_centroid=32, min_points_per_centroid=8)
        km.train(sample)
        centroids = np.ascontiguousarray(km.centroids, dtype=np.float32)
        centroids /= np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)
        # The bucket statistics and the reference error come from sub-samples: 32K residuals pin
        # 15 quantiles per dimension far below the bucket widths, and sorting all 131K rows of
        # every dimension took 4.3 s of a stdlib conversion (the error's encode + decode 6.4 s).
        rng = np.random.default_rng(seed)
        stats = sample[np.sort(rng.choice(n, cls.QUANTILE_ROWS, replace=False))] if n > cls.QUANTILE_ROWS else sample
        resid = stats - centroids[assign(stats, centroids)]  # (n, dim)
        rotation = principal_axes(resid, rdim) if components else None
        if rotation is not None:
            resid = resid @ rotation  # (n, rdim): the coordinates that are coded
        cutoffs, weights = cls.fit_levels(resid, nbits)
        codec = cls(centroids, cutoffs, weights, nbits, rotation=rotation)
        held = sample[np.sort(rng.choice(n, cls.ERROR_ROWS, replace=False))] if n > cls.ERROR_ROWS else sample
        codec.train_error = float(codec.error(held))
        return codec

    @classmethod
    def fit_levels(cls, resid: np.ndarray, nbits: int) -> tuple[np.ndarray, np.ndarray]:
        """(cutoffs, weights) of each column of the sample ``resid`` ((n, rdim)), the kind of
        levels new codecs get (``LEVELS``), refined from equal-probability buckets."""
        levels = 1 << nbits
        start = np.quantile(resid, (np.arange(levels) + 0.5) / levels, axis=0).T  # (rdim, levels)
        fit = uniform_levels if cls.LEVELS == "uniform" else lloyd_max
        return fit(resid, start, cls.LLOYD_ITERS)

    KMEANS_ITERS = 8  # k-means iterations (the codec's residuals refine what k-means leaves)
    # Residual levels of a new codec: "uniform" (equally spaced, ``uniform_levels``: scored from the
    # nibbles, no decode table) or "lloyd" (Lloyd-Max, ``lloyd_max``). docs/benchmarks.md, "Equally
    # spaced residual levels".
    LEVELS = "uniform"
    LLOYD_ITERS = 20  # refinement rounds of each dimension's buckets (``lloyd_max``)
    QUANTILE_ROWS = 32768  # residuals the bucket cutoffs and weights are estimated on
    ERROR_ROWS = 16384  # vectors the reference reconstruction error is measured on

    def extend(self, vectors: np.ndarray, n_new: int, seed: int = 0) -> ResidualCodec:
        """A codec with ``n_new`` more centroids fitted on ``vectors`` (the data that drifted).

        Existing centroid ids keep their meaning, so everything already encoded stays valid.
        """
        import faiss

        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        n_new = max(1, min(n_new, len(vectors)))
        km = faiss.Kmeans(self.dim, n_new, niter=10, seed=seed, spherical=True, verbose=False,
                          max_points_per_centroid=64, min_points_per_centroid=8)
        km.train(vectors)
        extra = np.ascontiguousarray(km.centroids, dtype=np.float32)
        extra /= np.maximum(np.linalg.norm(extra, axis=1, keepdims=True), 1e-12)
        return ResidualCodec(np.concatenate([self.centroids, extra]), self.cutoffs, self.weights,
                             self.nbits, self.train_error, self.rotation)

    # ------------------------------------------------------------------ encode / decode
    def encode(self, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(codes (n,), packed residuals (n, residual_bytes) uint8)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        codes = assign(vectors, self.centroids)
        packed = np.empty((len(vectors), self.residual_bytes), np.uint8)
        # Residual, buckets and bytes a block of rows at a time, so the temporaries stay in the
        # cache (whole-array passes over a 4,096-chunk conversion batch went to memory 15 times
        # and held ~1 GB of float32 residuals).
        for s in range(0, len(vectors), self.ENCODE_BLOCK):
            e = min(s + self.ENCODE_BLOCK, len(vectors))
            resid = vectors[s:e] - self.centroids.take(codes[s:e], axis=0)
            packed[s:e] = self.pack(resid if self.rotation is None else resid @ self.rotation)
        return codes.astype(self.code_dtype), packed

    ENCODE_BLOCK = 1024  # rows per residual pass (1.5 MB of float32 at 384-d)

    def pack(self, resid: np.ndarray) -> np.ndarray:
        """(n, residual_bytes) uint8 buckets of (n, rdim) coded coordinates (the residual, or
        its rotated coordinates)."""
        n, dim = resid.shape
        buckets = np.zeros((n, dim), np.uint8)
        above = np.empty((n, dim), bool)
        for t in range(self.cutoffs.shape[1]):  # 1, 3 or 15 comparisons per value
            np.greater(resid, self.cutoffs[:, t], out=above)
            buckets += above.view(np.uint8)
        per = 8 // self.nbits
        b = buckets.reshape(n, dim // per, per)
        packed = b[:, :, 0] << np.uint8(self.nbits * (per - 1))
        for t in range(1, per):
            packed |= b[:, :, t] << np.uint8(self.nbits * (per - 1 - t))
        return packed

    def buckets(self, packed: np.ndarray) -> np.ndarray:
        """(n, rdim) uint8 bucket of every coded component."""
        return self._table[packed].reshape(len(packed), self.rdim)

    def decode(self, codes: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """(n, dim) float32 reconstructed vectors."""
        out = self.centroids.take(codes.astype(np.int64, copy=False), axis=0)  # (n, dim) copy
        out += self.decode_residuals(packed)
        return out

    def decode_residuals(self, packed: np.ndarray) -> np.ndarray:
        """(n, dim) float32 decoded residuals (``decode`` without the centroids)."""
        z = self.decode_coords(packed)
        return z if self.rotation is None else z @ self.rotation.T

    def decode_coords(self, packed: np.ndarray) -> np.ndarray:
        """(n, rdim) float32 decoded coded coordinates (the residual itself when unrotated)."""
        idx = packed.astype(np.int32) + np.arange(packed.shape[1], dtype=np.int32) * 256
        return self._byte_values.take(idx).view(np.float32).reshape(len(packed), self.rdim)

    def residual_query(self, query: np.ndarray) -> np.ndarray:
        """(q, rdim) float32: the query in the coded coordinates, so that ``q . residual =
        residual_query(q) . coded`` (the rotation is orthonormal)."""
        query = np.asarray(query, dtype=np.float32)
        return query if self.rotation is None else query @ self.rotation

    def scales(self, codes: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """(n,) float16: 1 / |decoded vector| of each row. A decoded vector is not unit length
        (its residual is quantised); scoring it renormalised is closer to the exact cosine: on
        the stdlib index, Recall@10 of every chunk scored .977 -> .986 (docs/benchmarks.md,
        "Renormalised decoded vectors"). float16: 2 bytes a token, resolution ~5e-4 relative."""
        out = np.empty(len(packed), np.float16)
        if self.rotation is not None:
            # |c + R z|^2 = |c|^2 + 2 (R^T c) . z + |z|^2 (R's columns orthonormal): no rotation
            # back to ``dim`` per token (that product was +100 s of a 69M-vector build)
            rc = self.centroids @ self.rotation  # (K, rdim)
            cn = np.einsum("ij,ij->i", self.centroids, self.centroids)
        for s in range(0, len(packed), self.ENCODE_BLOCK):
            e = min(s + self.ENCODE_BLOCK, len(packed))
            if self.rotation is None:
                x = self.decode(codes[s:e], packed[s:e])
                sq = np.einsum("ij,ij->i", x, x)
            else:
                z = self.decode_coords(packed[s:e])
                c = codes[s:e].astype(np.int64, copy=False)
                sq = cn[c] + 2 * np.einsum("ij,ij->i", rc[c], z) + np.einsum("ij,ij->i", z, z)
            out[s:e] = 1.0 / np.maximum(np.sqrt(np.maximum(sq, 0)), 1e-6)
        return out

    def error(self, vectors: np.ndarray) -> float:
        """Mean squared reconstruction error of ``vectors`` (per vector, summed over dims)."""
        codes, packed = self.encode(vectors)
        return float(((self.decode(codes, packed) - vectors) ** 2).sum(axis=1).mean()) if len(vectors) else 0.0

    # ------------------------------------------------------------------ integer scoring
    def int_levels(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The residual weights as 7-bit integers, for ``intmm.int_matmul``: ``weights[d, b] ~=
        mid[d] + step[d] * (u[d, b] - 64)`` with ``u`` in [1, 127] (the largest rounding error
        is step / 2 = 1/252 of the dimension's weight range).

        Returns (table, mid, step): ``table`` holds, per (byte position, byte value), the
        ``8 / nbits`` values ``u`` of the dimensions that byte packs as one wide unsigned item
        (uint16 at 4 bits), so one ``take`` decodes a token into uint8 rows; mid, step: (dim,)
        float32."""
        got = getattr(self, "_int_levels", None)
        if got is not None:
            return got
        w = self.weights.astype(np.float64)
        lo, hi = w.min(axis=1), w.max(axis=1)
        mid = (lo + hi) / 2
        step = np.where(hi > lo, (hi - lo) / 126, 1.0)
        u = (np.rint((w - mid[:, None]) / step[:, None]) + 64).astype(np.uint8)  # (dim, levels) in [1, 127]
        per = 8 // self.nbits
        u = u.reshape(self.rdim // per, per, 1 << self.nbits)
        t = self._table.astype(np.int64)  # (256, per)
        vals = np.ascontiguousarray(u[:, np.arange(per)[None, :], t[None, :, :]].reshape(-1, per))
        table = vals.view(np.dtype(f"<u{per}")).ravel()
        self._int_levels = (table, mid.astype(np.float32), step.astype(np.float32))
        return self._int_levels

    def int_query(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The query side of ``int_levels``: (w8 (dim, q) int8, alpha (q,), offset (q,)) with
        ``q . residual ~= alpha * (u @ w8) + offset`` for a token's integer levels ``u``.
        ``query * step`` is rounded per query token to int8 in [-127, 127] (alpha = its largest
        magnitude / 127)."""
        _, mid, step = self.int_levels()
        query = self.residual_query(query)
        w = query.astype(np.float32) * step  # (q, rdim)
        alpha = np.maximum(np.abs(w).max(axis=1), 1e-30) / 127
        w8 = np.rint(w / alpha[:, None]).astype(np.int8)
        offset = query @ mid - 64 * alpha * w8.sum(axis=1, dtype=np.int64)
        return np.ascontiguousarray(w8.T), alpha.astype(np.float32), offset.astype(np.float32)

    # Below this many centroids the integer product runs on the calling thread alone.
    SPLIT_MIN_CENTROIDS = 2048

    @property
    def nibble_levels(self) -> bool:
        """True when every dimension's 16 levels (4 bits) are equally spaced (``uniform_levels``):
        then a packed byte's two nibbles are the integers the re-rank multiplies, with no decode
        table (``nibble_query``)."""
        got = getattr(self, "_nibble", None)
        if got is None:
            got = False
            if self.nbits == 4:
                d = np.diff(self.weights.astype(np.float64), axis=1)
                got = bool((d > 0).all() and np.allclose(d, d[:, :1], rtol=1e-3, atol=0))
            self._nibble = got
        return got

    def nibble_query(self, query: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The query side of a nibble decode (``nibble_levels`` codecs): (w8 (dim, q) int8, alpha
        (q,), offset (q,)) with ``q . residual ~= alpha * (k @ w8) + offset``, where ``k`` (n, dim)
        holds each token's high nibbles (dimensions 0, 2, 4, ...) then its low nibbles (1, 3,
        5, ...): ``w8``'s rows are in that order. Rounding as in ``int_query``."""
        w = self.weights.astype(np.float64)
        step = (w[:, -1] - w[:, 0]) / (w.shape[1] - 1)
        query = self.residual_query(query)
        ws = query.astype(np.float64) * step  # (q, rdim)
        alpha = np.maximum(np.abs(ws).max(axis=1), 1e-30) / 127
        w8 = np.rint(ws / alpha[:, None]).astype(np.int8)
        order = np.concatenate([np.arange(0, self.rdim, 2), np.arange(1, self.rdim, 2)])
        offset = query.astype(np.float64) @ w[:, 0]
        return np.ascontiguousarray(w8[:, order].T), alpha.astype(np.float32), offset.astype(np.float32)

    def centroid_scores(self, query: np.ndarray, integer: bool = True, pool=None) -> np.ndarray:
        """(K, q) float32 query-centroid scores ``C Q^T``. ``integer``: through ``int_matmul``
        with the centroids as 7-bit integers (a scale per centroid) and the query as int8 (a
        scale per token): one BLAS float32 GEMM was ~7 ms of a 100K-chunk search (16,384
        centroids), the integer product ~1.5 ms with VNNI; the scores move by ~1e-3
        (docs/benchmarks.md, "Integer scoring"). ``pool``: an executor whose thread computes
        the second half of the centroids' rows (onnxruntime and torch release the GIL): without
        VNNI (AVX2 only) the product was 8.0-8.6 ms at 16,384 centroids, 3.9-4.0 ms split in two
        (docs/benchmarks.md, "An AVX2-only machine"). Same values either way."""
        if not integer or self.dim > MAX_DIM:
            return self.centroids @ query.T  # (K, q) directly: no transposed copy
        got = getattr(self, "_int_centroids", None)
        if got is None:
            c = self.centroids.astype(np.float64)
            step = np.maximum(np.abs(c).max(axis=1), 1e-30) / 63
            u = (np.rint(c / step[:, None]) + 64).astype(np.uint8)  # [1, 127]
            got = self._int_centroids = (u, step.astype(np.float32))
        u, step = got
        beta = np.maximum(np.abs(query).max(axis=1), 1e-30) / 127
        q8 = np.rint(query / beta[:, None]).astype(np.int8)  # (q, dim)
        q8t = np.ascontiguousarray(q8.T)
        zero = 64 * q8.sum(axis=1, dtype=np.int32)
        beta32 = beta.astype(np.float32)
        out = np.empty((len(u), len(query)), np.float32)

        def rows(lo: int, hi: int) -> None:
            y = int_matmul(u[lo:hi], q8t)  # (rows, q) int32
            y -= zero  # the zero point; |y| < 2**24: exact as float32
            np.multiply(y, step[lo:hi, None], out=out[lo:hi], dtype=np.float32, casting="unsafe")
            out[lo:hi] *= beta32

        half = len(u) // 2 if pool is not None and len(u) >= self.SPLIT_MIN_CENTROIDS else 0
        if not half:
            rows(0, len(u))
            return out
        second = pool.submit(rows, half, len(u))
        rows(0, half)
        second.result()
        return out

    def residual_lut(self, query: np.ndarray) -> np.ndarray:
        """(q, residual_bytes, 256) float32: ``q . residual`` contributed by each packed byte."""
        per = 8 // self.nbits
        qw = self.residual_query(query)[:, :, None] * self.weights[None]  # (q, rdim, levels)
        qw = qw.reshape(len(query), self.rdim // per, per, 1 << self.nbits)
        lut = np.zeros((len(query), self.rdim // per, 256), np.float32)
        for t in range(per):
            lut += qw[:, :, t, self._table[:, t]]
        return lut


class _SortedResiduals:
    """Each dimension's residuals sorted once, with prefix sums: a Lloyd round is then a few
    binary searches per dimension and differences of prefix sums (a pass over the residuals per
    round took ~1 s of a conversion per round)."""

    def __init__(self, resid: np.ndarray):
        self.n, self.dim = resid.shape
        self.ranked = np.ascontiguousarray(resid.T)  # (dim, n): each dimension's residuals, sorted
        self.ranked.sort(axis=1)
        self.prefix = np.zeros((self.dim, self.n + 1))
        np.cumsum(self.ranked, axis=1, out=self.prefix[:, 1:])
        self.rows = np.arange(self.dim)[:, None]

    def buckets(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(counts, sums), each (dim, levels): the residuals in each bucket of the quantiser with
        levels ``w`` and cutoffs halfway between them."""
        cut = ((w[:, 1:] + w[:, :-1]) / 2).astype(np.float32)  # as the codec stores and compares them
        # a value is in bucket t when cut[t - 1] < value <= cut[t] (pack's count of cutoffs below it)
        ends = np.empty((self.dim, w.shape[1] + 1), np.int64)
        ends[:, 0], ends[:, -1] = 0, self.n
        for d in range(self.dim):
            ends[d, 1:-1] = np.searchsorted(self.ranked[d], cut[d], side="right")
        sums = self.prefix[self.rows, ends[:, 1:]] - self.prefix[self.rows, ends[:, :-1]]
        return np.diff(ends, axis=1), sums


def _quantiser(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(cutoffs halfway between levels, levels), float32, as the codec stores them."""
    cutoffs = np.ascontiguousarray((w[:, 1:] + w[:, :-1]) / 2, dtype=np.float32)
    return cutoffs, np.ascontiguousarray(w, dtype=np.float32)


def lloyd_max(resid: np.ndarray, weights: np.ndarray, iters: int) -> tuple[np.ndarray, np.ndarray]:
    """Each dimension's scalar quantiser refined by Lloyd's algorithm (the 1-D k-means of Lloyd
    1982 / Max 1960): cutoffs halfway between neighbouring levels, each level the mean of the
    residuals that fall between its cutoffs. Returns ((dim, levels - 1) cutoffs, (dim, levels)
    weights), float32, weights ascending.

    Why: the residuals of transformer token states are heavy-tailed (kurtosis 5-9 per dimension
    on a stdlib minilm-l3 index), and equal-probability buckets (the quantiles this starts from,
    ColBERTv2's choice) make the outer buckets wide, with a median that sits far from the tail's
    values. On that index, 4 bits: reconstruction error 0.0164 -> 0.0052 per vector (3.1x) and
    Recall@10 of decoded-vector MaxSim against exact .941 -> .977 (200 queries; docs/benchmarks.md,
    "Lloyd-Max residual buckets"), with the same bytes and file format.

    ``weights``: (dim, levels) starting levels, ascending per row (e.g. bucket quantiles).
    """
    resid = np.asarray(resid, dtype=np.float32)
    w = np.array(weights, dtype=np.float64)
    if len(resid) and w.shape[1] > 1 and iters > 0:
        data = _SortedResiduals(resid)
        for _ in range(iters):
            counts, sums = data.buckets(w)
            # an empty bucket keeps its level; sorting keeps the levels (and so the cutoffs) ascending
            w = np.sort(np.where(counts > 0, sums / np.maximum(counts, 1), w), axis=1)
    return _quantiser(w)


def uniform_levels(resid: np.ndarray, weights: np.ndarray, iters: int) -> tuple[np.ndarray, np.ndarray]:
    """Each dimension's scalar quantiser with equally spaced levels ``a + s * k`` (k = 0 ..
    levels - 1), fitted by Lloyd's algorithm under that constraint: cutoffs halfway between
    levels, then ``(a, s)`` the least-squares line through the residuals of each bucket against
    its index. Returns ((dim, levels - 1) cutoffs, (dim, levels) weights) like ``lloyd_max``.

    Why: a code whose level is an affine function of the bucket index decodes without a table
    (the bucket index itself is the integer the re-rank multiplies; the spacing and offset fold
    into the query), where Lloyd-Max levels need a per-dimension lookup: half of the re-rank's
    time on an AVX2 CPU (docs/benchmarks.md, "Equally spaced residual levels"). ``weights``:
    starting levels, ascending per row (only their first and last value are used)."""
    resid = np.asarray(resid, dtype=np.float32)
    w0 = np.asarray(weights, dtype=np.float64)
    k = np.arange(w0.shape[1], dtype=np.float64)
    a = w0[:, 0].copy()
    s = np.where(w0[:, -1] > w0[:, 0], (w0[:, -1] - w0[:, 0]) / max(len(k) - 1, 1), 1e-6)
    if len(resid) and len(k) > 1:
        data = _SortedResiduals(resid)
        for _ in range(max(iters, 1)):
            counts, sums = data.buckets(a[:, None] + s[:, None] * k[None, :])
            cnt = counts.astype(np.float64)
            # least squares of x ~ a + s * k over every residual x in bucket k
            nn, k1, k2 = cnt.sum(1), cnt @ k, cnt @ (k * k)
            x1, xk = sums.sum(1), sums @ k
            den = nn * k2 - k1 * k1
            ok = den > 0
            s = np.maximum(np.where(ok, (nn * xk - k1 * x1) / np.where(ok, den, 1), s), 1e-9)
            a = np.where(nn > 0, (x1 - s * k1) / np.maximum(nn, 1), a)
    return _quantiser(a[:, None] + s[:, None] * k[None, :])


def principal_axes(resid: np.ndarray, k: int) -> np.ndarray:
    """(dim, k) float32: the ``k`` leading eigenvectors of the residuals' (uncentred) second
    moment, largest first, each signed so its largest entry is positive (deterministic across
    LAPACK builds). Coordinates on them are decorrelated, and the first ones carry most of the
    residual energy, which is what ``ResidualCodec(rotation=...)`` spends its bits on."""
    r = np.asarray(resid, dtype=np.float64)
    m = r.T @ r / max(len(r), 1)
    vals, vecs = np.linalg.eigh(m)  # ascending
    vecs = vecs[:, np.argsort(vals)[::-1][:k]]
    vecs *= np.sign(vecs[np.abs(vecs).argmax(axis=0), np.arange(k)])
    return np.ascontiguousarray(vecs, dtype=np.float32)


def assign(vectors: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """Nearest centroid (largest inner product) of each row.

    faiss's exact inner-product search (a blocked GEMM and a top-1 kept per row, on its own
    OpenMP threads): 2.3x NumPy's matmul + argmax under the CLI's one-thread OpenBLAS setting
    (which is there for search latency), the same centroids (stdlib vectors, 4,096 centroids).
    """
    import faiss

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if not len(vectors):
        return np.zeros(0, np.int64)
    index = faiss.IndexFlatIP(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    _, ids = index.search(vectors, 1)
    return ids[:, 0].astype(np.int64)


def pool_tokens(vectors: np.ndarray, factor: float) -> np.ndarray:
    """Merge similar token vectors of one document (Clavié et al. 2024, "token pooling"):
    agglomerative clustering (average cosine linkage) down to ``ceil(n / factor)`` groups,
    each stored as its renormalised mean. The first vector ([CLS]) is kept as is.

    >>> v = np.array([[1, 0], [0, 1], [0.1, 1], [1, 0.05]], np.float32)
    >>> v /= np.linalg.norm(v, axis=1, keepdims=True)
    >>> pool_tokens(v, 2.0).shape  # [CLS] kept, the other three merged into one
    (2, 2)
    """
    n = len(vectors)
    target = max(1, math.ceil(n / factor))
    if factor <= 1 or n <= target or n <= 2:
        return vectors
    head, rest = vectors[:1], np.asarray(vectors[1:], dtype=np.float32)
    want = max(1, target - 1)
    m = len(rest)
    if m <= want:
        return vectors
    sums = rest.copy()
    counts = np.ones(m, np.float32)
    alive = np.ones(m, bool)
    sim = rest @ rest.T
    np.fill_diagonal(sim, -np.inf)
    for _ in range(m - want):
        flat = int(np.argmax(sim))
        i, j = divmod(flat, m)
        if i > j:
            i, j = j, i
        # Average linkage on the normalised sums: merge j into i.
        sums[i] += sums[j]
        counts[i] += counts[j]
        alive[j] = False
        sim[j, :] = -np.inf
        sim[:, j] = -np.inf
        ci = sums[i] / counts[i]
        row = (sums / counts[:, None]) @ ci
        row[~alive] = -np.inf
        row[i] = -np.inf
        sim[i, :] = row
        sim[:, i] = row
    pooled = sums[alive] / counts[alive, None]
    pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return np.concatenate([head, pooled.astype(vectors.dtype)])
