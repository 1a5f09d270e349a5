"""Integer scoring in the compressed store (``intmm``, ``ResidualCodec.int_levels`` /
``int_query`` / ``centroid_scores``): exact integer products on every backend, and scores within
the rounding bounds derived from the 7-bit levels and 8-bit queries."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch  # noqa: F401 - loaded, so intmm's torch backend can run (intmm never imports torch)

from supergrep.index import intmm
from supergrep.index.codec import ResidualCodec
from supergrep.index.compressed import CompressedStore, CompressSettings
from supergrep.index.format import connect
from supergrep.scoring.maxsim import maxsim

BACKENDS = [("numpy", intmm._numpy_impl), ("torch", intmm._torch_impl)]
if importlib.util.find_spec("onnxruntime") and importlib.util.find_spec("onnx"):
    BACKENDS.append(("onnxruntime", intmm._ort_impl))


def unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("name,make", BACKENDS, ids=[b[0] for b in BACKENDS])
def test_int_matmul_is_exact_on_every_backend(name, make):
    rng = np.random.default_rng(0)
    run = make()
    for n, k, m in [(1, 8, 1), (37, 384, 13), (300, 96, 32), (5, intmm.MAX_DIM, 3)]:
        a = rng.integers(0, 128, (n, k)).astype(np.uint8)
        b = rng.integers(-127, 128, (k, m)).astype(np.int8)
        want = a.astype(np.int64) @ b.astype(np.int64)
        assert np.array_equal(run(a, b).astype(np.int64), want), (name, n, k, m)
    # The extremes: pairs of products at +-127 * 127 (where a kernel that adds pairs in int16
    # would saturate if the left side had 8 bits) and sums as large as the dimension allows.
    k = intmm.MAX_DIM
    a = np.full((4, k), 127, np.uint8)
    b = np.stack([np.full(k, 127), np.full(k, -127), np.tile([127, -127], k // 2), np.zeros(k)], 1).astype(np.int8)
    assert np.array_equal(run(a, b).astype(np.int64), a.astype(np.int64) @ b.astype(np.int64))


def test_int_matmul_picks_a_backend_and_handles_empty():
    assert intmm.backend() in {"onnxruntime", "torch", "numpy"}
    assert intmm.int_matmul(np.zeros((0, 8), np.uint8), np.zeros((8, 3), np.int8)).shape == (0, 3)


def _codec(nbits, dim=48, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((12, dim))
    # heavy-tailed token states with an outlier dimension, as transformer token states have
    x = centers[rng.integers(0, 12, 3000)] + 0.4 * rng.standard_t(4, (3000, dim))
    x[:, 5] *= 4
    x = unit(x)
    return ResidualCodec.train(x, nbits=nbits, n_centroids=16), x


@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_int_levels_are_the_weights_within_half_a_step(nbits):
    codec, _ = _codec(nbits)
    table, mid, step = codec.int_levels()
    per = 8 // nbits
    assert table.dtype.itemsize == per and len(table) == codec.residual_bytes * 256
    # decode every byte value of every position both ways
    packed = np.tile(np.arange(256, dtype=np.uint8)[:, None], (1, codec.residual_bytes))
    idx = packed.astype(np.int64) + np.arange(codec.residual_bytes) * 256
    u = table.take(idx).view(np.uint8).reshape(256, codec.dim).astype(np.float64)
    assert u.min() >= 1 and u.max() <= 127
    ref = codec.decode_residuals(packed)
    assert (np.abs(mid + step * (u - 64) - ref) <= step / 2 + 1e-6).all()


def _resid_bound(codec, q, u):
    """|integer q . r - q . r| <= sum_d |q_d| step_d / 2 + alpha / 2 * sum_d |u_d - 64|."""
    _, _, step = codec.int_levels()
    _, alpha, _ = codec.int_query(q)
    return (np.abs(q) @ (step / 2))[None, :] + np.abs(u - 64) @ np.ones(codec.dim)[:, None] * alpha[None, :] / 2


@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_int_query_scores_residuals_within_the_rounding_bound(nbits):
    codec, x = _codec(nbits)
    codes, packed = codec.encode(x[:400])
    q = unit(np.random.default_rng(1).standard_normal((9, codec.dim)))
    table, _, _ = codec.int_levels()
    idx = packed.astype(np.int64) + np.arange(codec.residual_bytes) * 256
    u = table.take(idx).view(np.uint8).reshape(len(packed), codec.dim)
    w8, alpha, offset = codec.int_query(q)
    got = intmm.int_matmul(u, w8) * alpha + offset  # (tokens, q)
    want = codec.decode_residuals(packed).astype(np.float64) @ q.T.astype(np.float64)
    err = np.abs(got - want)
    bound = _resid_bound(codec, q, u.astype(np.float64))
    assert (err <= bound + 1e-5).all()
    assert err.max() > 0  # it is the integer path, not the float one


def test_integer_centroid_scores_within_the_rounding_bound():
    codec, _ = _codec(4)
    q = unit(np.random.default_rng(2).standard_normal((7, codec.dim)))
    got = codec.centroid_scores(q, integer=True).astype(np.float64)
    want = codec.centroids.astype(np.float64) @ q.T.astype(np.float64)
    c = codec.centroids.astype(np.float64)
    step = np.abs(c).max(axis=1) / 63
    beta = np.abs(q).max(axis=1) / 127
    # |c^ . q^ - c . q| <= |c^| . |q^ - q| + |c^ - c| . |q|, each rounding at most half a step
    bound = (np.abs(c).sum(1) + step * codec.dim / 2)[:, None] * beta[None, :] / 2 + (step[:, None] / 2) * np.abs(q).sum(1)[None, :]
    assert (np.abs(got - want) <= bound + 1e-6).all()
    np.testing.assert_array_equal(codec.centroid_scores(q, integer=False), codec.centroids @ q.T)


def test_centroid_scores_split_over_a_helper_thread_are_the_same():
    """The second half of the centroids on a pool's thread: the same values, bit for bit (an
    off-by-one at the split would leave a row unwritten or scaled by the other half's step)."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(3)
    k = ResidualCodec.SPLIT_MIN_CENTROIDS + 3  # odd: the halves differ in size
    codec = ResidualCodec(unit(rng.standard_normal((k, 64))), np.zeros((64, 15), np.float32),
                          np.zeros((64, 16), np.float32), 4)
    q = unit(rng.standard_normal((5, 64)))
    with ThreadPoolExecutor(1) as pool:
        split = codec.centroid_scores(q, integer=True, pool=pool)
    whole = codec.centroid_scores(q, integer=True)
    np.testing.assert_array_equal(split, whole)
    assert np.abs(whole - codec.centroids @ q.T).max() < 0.02  # and both are the scores


@pytest.mark.parametrize("dim,nbits", [(48, 4), (544, 4), (48, 2)])
def test_store_integer_scores_follow_float_maxsim(tmp_path, dim, nbits):
    """The store's re-rank in integers against float MaxSim over the same decoded vectors: within
    the summed rounding bounds, and the same top results. 544-d at 4 bits: 272 residual bytes,
    the intp decode indices."""
    rng = np.random.default_rng(4)
    centers = rng.standard_normal((20, dim))
    docs = {i + 1: unit(centers[rng.integers(0, 20, int(rng.integers(3, 20)))] + 0.5 * rng.standard_normal((1, dim)))
            for i in range(150)}
    for v in docs.values():
        v += 0.3 * rng.standard_normal(v.shape).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
    codec = ResidualCodec.train(np.concatenate(list(docs.values())), nbits=nbits, n_centroids=16)
    conn = connect(tmp_path)
    s = CompressedStore(tmp_path, dim, CompressSettings(pool_factor=1.0, nbits=nbits, integer_scores=True))
    conn.execute("BEGIN IMMEDIATE")
    s.write_codec(conn, codec)
    s.add(conn, list(docs), list(docs.values()))
    conn.execute("COMMIT")
    ids = list(docs)
    dec = dict(zip(ids, s.get(conn, ids), strict=True))
    q = unit(centers[rng.integers(0, 20, 6)] + 0.5 * rng.standard_normal((6, dim)))
    got = s.score(conn, q, ids)
    want = np.array([maxsim(q, dec[i]) for i in ids])
    # per (token, query token): the centroid-score bound + the residual bound, times the token's
    # scale (|decoded| ~ 1); a document's MaxSim moves by at most the sum over query tokens of
    # the largest bound among its tokens
    c = codec.centroids.astype(np.float64)
    step_c = np.abs(c).max(axis=1) / 63
    beta = np.abs(q).max(axis=1) / 127
    table, _, _ = codec.int_levels()
    bounds = []
    for i in ids:
        cds, packed = codec.encode(docs[i])
        u = table.take(packed.astype(np.int64) + np.arange(codec.residual_bytes) * 256).view(np.uint8)
        u = u.reshape(len(packed), dim).astype(np.float64)
        cc = c[cds.astype(np.int64)]
        b_s = (np.abs(cc).sum(1) + step_c[cds.astype(np.int64)] * dim / 2)[:, None] * beta[None, :] / 2 \
            + (step_c[cds.astype(np.int64)][:, None] / 2) * np.abs(q).sum(1)[None, :]
        scale = 1 / np.linalg.norm(codec.decode(cds, packed), axis=1)
        bounds.append(((b_s + _resid_bound(codec, q, u)) * scale[:, None] * 1.001).max(axis=0).sum())
    err = np.abs(got - want)
    assert (err <= np.array(bounds) + 1e-4).all(), (err.max(), min(bounds))
    assert 0 < err.max() < 0.05 * np.abs(want).max()  # > 0: the integer path ran
    top = lambda sc: set(np.array(ids)[np.argsort(-sc)[:10]].tolist())  # noqa: E731
    assert len(top(got) & top(want)) >= 9
    # search() with integer scores: the same top 10 as the float store
    s2 = CompressedStore(tmp_path, dim, CompressSettings(pool_factor=1.0, nbits=nbits, integer_scores=False))
    a, b = s.search(conn, q, 10, exact=True)[0], s2.search(conn, q, 10, exact=True)[0]
    assert len(set(a.tolist()) & set(b.tolist())) >= 9


def test_warm_maps_every_segment_and_changes_no_result(tmp_path, monkeypatch):
    rng = np.random.default_rng(7)
    dim = 32
    docs = {i + 1: unit(rng.standard_normal((int(rng.integers(2, 9)), dim))) for i in range(120)}
    codec = ResidualCodec.train(np.concatenate(list(docs.values())), nbits=4, n_centroids=8)
    conn = connect(tmp_path)
    s = CompressedStore(tmp_path, dim, CompressSettings(pool_factor=1.0, nbits=4, rerank=16))
    conn.execute("BEGIN IMMEDIATE")
    s.write_codec(conn, codec)
    s.add(conn, list(docs)[:60], list(docs.values())[:60])
    conn.execute("COMMIT")
    conn.execute("BEGIN IMMEDIATE")
    s.add(conn, list(docs)[60:], list(docs.values())[60:])  # a second segment
    conn.execute("COMMIT")
    q = unit(rng.standard_normal((5, dim)))
    before = s.search(conn, q, 10)
    got = s.warm(conn)
    view, _ = s._view_for(conn)
    assert len(view.segs) == 2
    want = sum(a.nbytes for seg in view.segs for a in (seg.codes, seg.resid, seg.scale, seg.ivf, seg.layout)
               if a is not None and a.size)
    assert got["bytes"] == want and got["seconds"] >= 0
    after = s.search(conn, q, 10)
    assert before[0].tolist() == after[0].tolist() and np.array_equal(before[1], after[1])
    # where MADV_POPULATE_READ is missing, a read of one byte per page does the same
    import supergrep.index.container as container

    monkeypatch.setattr(container.sys, "platform", "darwin")
    assert container.populate([view.segs[0].resid, None, np.zeros(3)]) == view.segs[0].resid.nbytes


def test_tune_malloc_is_idempotent():
    from supergrep.arrays import tune_malloc_for_serving

    first = tune_malloc_for_serving()
    assert isinstance(first, bool) and tune_malloc_for_serving() is first
    import sys

    if sys.platform.startswith("linux"):
        import ctypes.util

        if "glibc" in (ctypes.util.find_library("c") or "") or hasattr(ctypes.CDLL(None), "mallopt"):
            assert first is True


def test_uniform_levels_are_equally_spaced_and_beat_equal_probability():
    """``uniform_levels``: each dimension's levels lie on a line (so ``nibble_levels`` holds), and
    the fit is a real quantiser: its error is far below equal-probability buckets' on heavy-tailed
    residuals (and not below Lloyd-Max's, which it constrains)."""
    from supergrep.index.codec import lloyd_max, uniform_levels

    rng = np.random.default_rng(5)
    x = np.concatenate([rng.laplace(0, 0.03, (8000, 4)), 0.02 * rng.standard_t(4, (8000, 4))], 1).astype(np.float32)
    start = np.quantile(x, (np.arange(16) + 0.5) / 16, axis=0).T

    def err(cut, w):
        b = (x[:, :, None] > cut[None]).sum(-1)
        return float(((x - w[np.arange(x.shape[1])[None, :], b]) ** 2).mean())

    cu, wu = uniform_levels(x, start, 20)
    d = np.diff(wu.astype(np.float64), axis=1)
    np.testing.assert_allclose(d, d[:, :1] * np.ones_like(d), rtol=1e-4)
    np.testing.assert_allclose(cu, (wu[:, 1:] + wu[:, :-1]) / 2, rtol=1e-6)
    e_u, e_l = err(cu, wu), err(*lloyd_max(x, start, 20))
    e_q = err((start[:, 1:] + start[:, :-1]) / 2, start)
    assert e_l <= e_u < 0.6 * e_q, (e_l, e_u, e_q)


def test_nibble_scores_follow_float_maxsim(tmp_path, monkeypatch):
    """A codec with equally spaced 4-bit levels is scored from the packed nibbles (no decode
    table): the same top results as float MaxSim over the decoded vectors, scores within the
    int8 query rounding, and the table path is not taken."""
    monkeypatch.setattr(ResidualCodec, "LEVELS", "uniform")
    rng = np.random.default_rng(6)
    dim = 64
    centers = rng.standard_normal((20, dim))
    docs = {i + 1: unit(centers[rng.integers(0, 20, int(rng.integers(3, 30)))] + 0.6 * rng.standard_normal((1, dim)))
            for i in range(200)}
    codec = ResidualCodec.train(np.concatenate(list(docs.values())), nbits=4, n_centroids=16)
    assert codec.nibble_levels
    conn = connect(tmp_path)
    s = CompressedStore(tmp_path, dim, CompressSettings(pool_factor=1.0, nbits=4, integer_scores=True))
    conn.execute("BEGIN IMMEDIATE")
    s.write_codec(conn, codec)
    s.add(conn, list(docs), list(docs.values()))
    conn.execute("COMMIT")
    monkeypatch.setattr(ResidualCodec, "int_levels", lambda self: (_ for _ in ()).throw(AssertionError("table path")))
    ids = list(docs)
    dec = dict(zip(ids, s.get(conn, ids), strict=True))
    q = unit(centers[rng.integers(0, 20, 8)] + 0.5 * rng.standard_normal((8, dim)))
    got = s.score(conn, q, ids)
    want = np.array([maxsim(q, dec[i]) for i in ids])
    assert 0 < np.abs(got - want).max() < 0.02 * np.abs(want).max()
    assert set(np.argsort(-got)[:10].tolist()) == set(np.argsort(-want)[:10].tolist())
    a = s.search(conn, q, 10, exact=True)[0]
    assert set(a.tolist()) == set(np.array(ids)[np.argsort(-want)[:10]].tolist())
