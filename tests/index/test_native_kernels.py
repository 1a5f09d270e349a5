"""The compressed store's fused C kernels (index/_kernels.c) against the NumPy path they replace.

Both paths must give the same candidates (bit for bit) and the same re-rank scores (the same
float32 arithmetic per token; the sum over query tokens may round differently), through every
segment layout an index can hold: several segments, uint16 and int32 centroid ids, float16
scales and version-1 segments without them, tombstones, centroids newer than a segment. Bad
input raises instead of reading out of bounds. `make test` sets SUPERGREP_REQUIRE_NATIVE=1
where a C compiler is installed, so these tests cannot skip silently there.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_compressed import clustered, new_store, queries_from, tx

from supergrep.index import native
from supergrep.index.codec import ResidualCodec
from supergrep.index.intmm import int_matmul

if not native.available():
    if os.environ.get("SUPERGREP_REQUIRE_NATIVE") == "1":
        raise RuntimeError("SUPERGREP_REQUIRE_NATIVE=1 but supergrep.index._kernels is not built "
                           "(pip install -e . compiles it where a C compiler is installed)")
    pytest.skip("the C kernels are not built here", allow_module_level=True)

from supergrep.index import _kernels  # noqa: E402


@pytest.fixture(params=["simd", "scalar"])
def mode(request):
    """Every kernel test runs on the SIMD path this CPU has and on the portable one."""
    _kernels.set_scalar(request.param == "scalar")
    yield request.param
    _kernels.set_scalar(False)


def reference(resid, codes, scale, w8, alpha, offset, st, bounds):
    """The NumPy re-rank of ``CompressedStore._score_blocks`` over documents given as
    (segment, start, length), in float32, step by step as it computes."""
    out = []
    for s, a, n in bounds:
        r = resid[s][a:a + n]
        dec = np.concatenate([r >> 4, r & 15], axis=1)
        sims = np.empty((n, w8.shape[1]), np.float32)
        np.multiply(int_matmul(dec, w8), alpha, out=sims, dtype=np.float32, casting="unsafe")
        sims += offset
        sims += st[codes[s][a:a + n].astype(np.int64)]
        sims *= np.float32(1.0) if scale[s] is None else scale[s][a:a + n].astype(np.float32)[:, None]
        out.append(sims.max(axis=0).sum() if n else 0.0)
    return np.array(out, np.float32)


def segments(rng, nb=12, k=300):
    """Three segments: uint16 codes + float16 scales, int32 codes + no scales (a version-1
    segment), uint16 codes + float32 scales."""
    lens = (400, 250, 90)
    resid = [rng.integers(0, 256, (n, nb), dtype=np.uint8) for n in lens]
    codes = [rng.integers(0, k, lens[0]).astype(np.uint16), rng.integers(0, k, lens[1]).astype(np.int32),
             rng.integers(0, k, lens[2]).astype(np.uint16)]
    scale = [(rng.random(lens[0]) + 0.5).astype(np.float16), None, (rng.random(lens[2]) + 0.5).astype(np.float32)]
    return resid, codes, scale


@pytest.mark.parametrize(("q", "nb"), [(32, 12), (5, 192), (13, 20), (40, 64), (71, 12), (32, 192)])
def test_rerank_kernel_equals_the_numpy_path(mode, q, nb):
    """``nb`` bytes a token: 24 dims (groups of 4 bytes, none in a block of 4), 384 (48 groups:
    the SIMD path's blocks of 4 alone), 40 (a block and a group left over), 128."""
    rng = np.random.default_rng(q)
    resid, codes, scale = segments(rng, nb=nb)
    nb = resid[0].shape[1]
    w8 = rng.integers(-127, 128, (2 * nb, q), dtype=np.int8)
    st = rng.standard_normal((300, q)).astype(np.float32)
    alpha = (rng.random(q) * 0.01).astype(np.float32)
    offset = rng.standard_normal(q).astype(np.float32)
    bounds = [(0, 0, 37), (1, 200, 50), (2, 0, 90), (0, 399, 1), (1, 10, 0), (0, 100, 300)]
    seg, start, length = (np.array(c, np.int64) for c in zip(*bounds, strict=True))
    out = np.full(len(bounds), np.nan, np.float32)
    native.rerank_nibbles(resid, codes, scale, seg, start, length, native.pack_nibble_weights(w8), alpha, offset,
                          st, out)
    want = reference(resid, codes, scale, w8, alpha, offset, st, bounds)
    np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-5)
    assert out[4] == 0.0  # an empty document


@pytest.mark.parametrize("nb", [12, 20, 192])
def test_both_kernel_paths_agree_bit_for_bit(nb):
    """The scalar path (Apple Silicon, CPUs without AVX2) is not an approximation of the SIMD one."""
    rng = np.random.default_rng(1)
    resid, codes, scale = segments(rng, nb=nb)
    q = 29
    args = (native.pack_nibble_weights(rng.integers(-127, 128, (2 * nb, q), dtype=np.int8)),
            (rng.random(q) * 0.01).astype(np.float32), rng.standard_normal(q).astype(np.float32),
            rng.standard_normal((300, q)).astype(np.float32))
    seg, start, length = np.array([0, 1, 2]), np.array([5, 0, 3]), np.array([300, 250, 80])
    got = []
    for scalar in (False, True):
        _kernels.set_scalar(scalar)
        out = np.empty(3, np.float32)
        native.rerank_nibbles(resid, codes, scale, seg, start, length, *args, out)
        got.append(out)
    _kernels.set_scalar(False)
    np.testing.assert_array_equal(got[0], got[1])


def test_rerank_kernel_refuses_out_of_range_input():
    rng = np.random.default_rng(2)
    resid, codes, scale = segments(rng)
    q = 8
    wp = native.pack_nibble_weights(rng.integers(-127, 128, (24, q), dtype=np.int8))
    a, o = np.ones(q, np.float32), np.zeros(q, np.float32)
    st = np.zeros((300, q), np.float32)
    out = np.empty(1, np.float32)

    def run(seg, start, length, st=st, wp=wp, codes=codes):
        native.rerank_nibbles(resid, codes, scale, np.array([seg]), np.array([start]), np.array([length]), wp, a, o,
                              st, out)

    run(0, 0, 400)
    with pytest.raises(ValueError, match="out of range"):
        run(0, 1, 400)  # past the segment's last token
    with pytest.raises(ValueError, match="segment index"):
        run(3, 0, 1)
    with pytest.raises(ValueError, match="centroid id"):
        run(0, 0, 400, st=st[:100])  # codes up to 299 against 100 centroid rows
    with pytest.raises(ValueError, match="weights"):
        run(0, 0, 10, wp=wp[:2])
    with pytest.raises(ValueError, match="disagree"):
        run(0, 0, 10, codes=[codes[0][:10], codes[1], codes[2]])


def test_candidate_kernel_sums_best_values_and_refuses_a_corrupt_inverted_list():
    """Two segments (documents 0-2 and 3-4); a list entry outside its own segment raises."""
    off = [np.array([0, 2, 4], np.int64), np.array([0, 1, 2], np.int64)]
    base = np.array([0, 3])
    cur, acc = np.zeros(5, np.float32), np.zeros(5, np.float32)
    keep = np.array([True, True, True, False, True])
    probes, vals = np.array([[0, 1], [1, 0]], np.int64), np.array([[0.5, 1.0], [0.25, 2.0]], np.float32)

    def run(ivf, off=off):
        return native.candidates(ivf, off, base, probes, vals, cur, acc, keep, 10.0)

    with pytest.raises(ValueError, match="outside the index"):
        run([np.array([0, 1, 2, 3], np.int32), np.array([0, 1], np.int32)])  # 3 is the next segment's
    with pytest.raises(ValueError, match="outside the index"):
        run([np.array([0, 1, 2, 1], np.int32), np.array([0, 1], np.int32)], [np.array([0, 2, 9]), off[1]])
    cur[:], acc[:] = 0, 0
    cand, score = run([np.array([0, 1, 2, 1], np.int32), np.array([0, 1], np.int32)])
    # token 0: doc 1 in both lists counts its best (1.0); docs 3, 4 (lists 0, 1 of segment 2);
    # token 1 likewise with the values swapped; doc 3 is not kept
    assert cand.tolist() == [0, 1, 2, 4]
    np.testing.assert_array_equal(score, np.float32([10.5 + 2.0, 10 + 1.0 + 2.0, 10 + 1.0 + 0.25, 10 + 1.0 + 0.25]))
    assert not cur.any() and not acc.any()


@pytest.fixture(scope="module")
def nibble_index(tmp_path_factory):
    """A 4-bit equally spaced (nibble) codec, several segments, tombstones, and a codec that
    grew centroids after the first segment was written."""
    rng = np.random.default_rng(4)
    docs, centers = clustered(rng, 500)
    codec = ResidualCodec.train(np.concatenate(list(docs.values())), nbits=4, n_centroids=32)
    assert codec.nibble_levels
    path = tmp_path_factory.mktemp("nib")
    s, conn = new_store(path, codec, integer_scores=True, nprobe=4, rerank=24)
    ids = list(docs)
    tx(conn, s.add, ids[:200], [docs[i] for i in ids[:200]])
    grown = codec.extend(np.concatenate([docs[i] for i in ids[200:260]]), 8)  # 8 the first segment lacks
    tx(conn, s.write_codec, grown)
    for lo in (200, 350):
        tx(conn, s.add, ids[lo:lo + 150], [docs[i] for i in ids[lo:lo + 150]])
    tx(conn, s.remove, ids[::7])
    return s, conn, docs


@pytest.mark.parametrize("exact", [False, True])
def test_search_is_the_same_with_and_without_the_kernels(nibble_index, monkeypatch, exact):
    s, conn, docs = nibble_index
    view, codec = s._view_for(conn)
    assert len(view.segs) == 3 and codec.n_centroids == 40 and not view.live.all()
    for q in queries_from(docs, np.random.default_rng(11), n=12):
        got = {}
        for flag in ("1", "0"):
            monkeypatch.setenv("SUPERGREP_NATIVE", flag)
            got[flag] = (s._candidates(view, codec, q, view.live), s.search(conn, q, 10, exact=exact))
        (c1, a1, _), (ids1, sc1) = got["1"]
        (c0, a0, _), (ids0, sc0) = got["0"]
        np.testing.assert_array_equal(c1, c0)
        np.testing.assert_array_equal(a1, a0)  # the same float32 sums, bit for bit
        np.testing.assert_array_equal(ids1, ids0)
        np.testing.assert_allclose(sc1, sc0, rtol=2e-6)


def test_a_failing_candidate_kernel_leaves_no_dirty_scratch(nibble_index, monkeypatch):
    """The kernel fills the doc-sized scratch and may stop half-way on a corrupt list: the next
    query must not see its partial sums."""
    s, conn, docs = nibble_index
    view, codec = s._view_for(conn)
    q = queries_from(docs, np.random.default_rng(12), n=1)[0]
    want = s._candidates(view, codec, q, view.live)
    seg = view.segs[1]
    good = seg.ivf
    seg.ivf = good.copy()
    seg.ivf[len(seg.ivf) // 2:] = 10**6  # entries past the index: the kernel stops there
    try:
        with pytest.raises(ValueError, match="outside the index"):
            s._candidates(view, codec, q, view.live)
    finally:
        seg.ivf = good
    got = s._candidates(view, codec, q, view.live)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("q", [32, 13, 5, 40])
def test_centroid_interaction_kernel_equals_numpy(mode, q):
    rng = np.random.default_rng(q)
    _, codes, _ = segments(rng)
    st = rng.standard_normal((300, q)).astype(np.float32)
    bounds = [(0, 0, 50), (1, 10, 100), (2, 89, 1), (1, 0, 0), (0, 3, 397)]
    seg, start, length = (np.array(c, np.int64) for c in zip(*bounds, strict=True))
    out = np.full(len(bounds), np.nan, np.float32)
    native.centroid_interaction(codes, seg, start, length, st, out)
    want = [st[codes[s][a:a + n].astype(np.int64)].max(axis=0).sum() if n else 0.0 for s, a, n in bounds]
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-5)
    with pytest.raises(ValueError, match="centroid id"):
        native.centroid_interaction(codes, seg, start, length, st[:100], out)


def test_hybrid_deep_search_is_the_same_with_and_without_the_kernels(nibble_index, monkeypatch):
    """Hybrid fusion's semantic side (``search_deep``): exact scores for the re-ranked, centroid
    interaction estimates for the rest, the same with the kernels as without."""
    s, conn, docs = nibble_index
    for q in queries_from(docs, np.random.default_rng(13), n=8):
        got = {}
        for flag in ("1", "0"):
            monkeypatch.setenv("SUPERGREP_NATIVE", flag)
            got[flag] = s.search_deep(conn, q, 40, also=[5, 17, 33])
        (ids1, sc1, ex1, m1), (ids0, sc0, ex0, m0) = got["1"], got["0"]
        np.testing.assert_array_equal(ids1, ids0)
        np.testing.assert_array_equal(ex1, ex0)
        np.testing.assert_allclose(sc1, sc0, rtol=1e-5, atol=1e-5)
        assert m1 == pytest.approx(m0, abs=1e-5)
