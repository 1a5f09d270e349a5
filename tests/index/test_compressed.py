"""The compressed store: codec error bounds, candidate recall, incremental == rebuild, drift."""

from __future__ import annotations

import numpy as np
import pytest

from supergrep.errors import IndexCorruptError
from supergrep.index.codec import ResidualCodec, pool_tokens
from supergrep.index.compressed import CompressedStore, CompressSettings, convert, store_kind
from supergrep.index.container import read_container, write_container
from supergrep.index.format import connect
from supergrep.index.store import SegmentStore
from supergrep.scoring.maxsim import maxsim

DIM = 32


def clustered(rng, n_docs, n_topics=24, tokens=(4, 24), noise=0.35, centers=None):
    """Documents whose tokens sit around a few topic centres (as code tokens do)."""
    if centers is None:
        centers = rng.standard_normal((n_topics * 4, DIM)).astype(np.float32)
    docs = {}
    for i in range(n_docs):
        topic = rng.integers(0, len(centers) // 4)
        n = int(rng.integers(*tokens))
        c = centers[topic * 4 + rng.integers(0, 4, n)]
        v = c + noise * rng.standard_normal((n, DIM)).astype(np.float32)
        docs[i + 1] = v / np.linalg.norm(v, axis=1, keepdims=True)
    return docs, centers


def unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def tx(conn, fn, *args):
    conn.execute("BEGIN IMMEDIATE")
    fn(conn, *args)
    conn.execute("COMMIT")


def new_store(path, codec, **kw):
    """A store scoring in float32 unless asked (the tests of its machinery compare with float
    MaxSim at 1e-5; integer scoring has tests of its own below)."""
    path.mkdir(parents=True, exist_ok=True)
    conn = connect(path)
    kw.setdefault("integer_scores", False)
    s = CompressedStore(path, DIM, CompressSettings(pool_factor=1.0, **kw))
    tx(conn, s.write_codec, codec)
    conn.execute("INSERT INTO meta (key, value) VALUES ('vector_store', 'compressed')")
    return s, conn


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    docs, centers = clustered(rng, 400)
    sample = np.concatenate(list(docs.values()))
    codec = ResidualCodec.train(sample, nbits=2, n_centroids=32)
    return docs, centers, codec


# ------------------------------------------------------------------------------ codec
@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_round_trip_error_is_bounded_and_shrinks_with_bits(data, nbits):
    docs, _, _ = data
    x = np.concatenate(list(docs.values()))
    codec = ResidualCodec.train(x, nbits=nbits, n_centroids=32)
    codes, packed = codec.encode(x)
    assert packed.shape == (len(x), DIM * nbits // 8) and packed.dtype == np.uint8
    y = codec.decode(codes, packed)
    # Every decoded residual lies in its bucket's [cutoff below, cutoff above] (the outer
    # buckets extend to the sample's extremes): the per-dimension error is bounded by the
    # bucket's width.
    resid = x - codec.centroids[codes.astype(int)]
    lo = np.concatenate([resid.min(0, keepdims=True).T, codec.cutoffs], axis=1)
    hi = np.concatenate([codec.cutoffs, resid.max(0, keepdims=True).T], axis=1)
    b = codec.buckets(packed)
    width = (hi - lo)[np.arange(DIM), b]
    assert (np.abs(y - x) <= width + 1e-6).all()
    err = ((y - x) ** 2).sum(1).mean()
    cos = ((y * x).sum(1) / np.linalg.norm(y, axis=1)).mean()
    # Measured on this data: 1 bit .869, 2 bits .948, 4 bits .992 mean cosine.
    assert cos > {1: 0.85, 2: 0.93, 4: 0.985}[nbits]
    assert err == pytest.approx(codec.train_error, rel=1e-5)
    # Inner products straight from the codes (the lookup tables) equal the decoded ones.
    q = unit(np.random.default_rng(1).standard_normal((3, DIM)))
    lut = codec.residual_lut(q)
    direct = q @ codec.centroids[codes.astype(int)].T + lut[:, np.arange(packed.shape[1]), packed].sum(-1)
    np.testing.assert_allclose(direct, q @ y.T, atol=1e-5)


def test_assign_is_the_largest_inner_product(data):
    docs, _, codec = data
    x = np.concatenate(list(docs.values()))
    from supergrep.index.codec import assign

    s = x @ codec.centroids.T
    got = assign(x, codec.centroids)
    top2 = np.sort(s, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-5  # rows without a near tie (summation order may differ)
    assert clear.mean() > 0.95
    np.testing.assert_array_equal(got[clear], s.argmax(axis=1)[clear])
    assert len(assign(x[:0], codec.centroids)) == 0


@pytest.mark.parametrize("nbits", [1, 2, 4])
def test_blocked_encode_equals_per_dimension_buckets(data, nbits, monkeypatch):
    docs, _, _ = data
    x = np.concatenate(list(docs.values()))
    codec = ResidualCodec.train(x, nbits=nbits, n_centroids=32)
    monkeypatch.setattr(ResidualCodec, "ENCODE_BLOCK", 333)  # several blocks, a ragged last one
    codes, packed = codec.encode(x)
    resid = x - codec.centroids[codes.astype(int)]
    want = np.stack([np.searchsorted(codec.cutoffs[d], resid[:, d], side="left") for d in range(DIM)], axis=1)
    np.testing.assert_array_equal(codec.buckets(packed), want)


def test_codec_statistics_come_from_sub_samples_of_a_large_sample(data, monkeypatch):
    docs, _, _ = data
    x = np.concatenate(list(docs.values()))
    full = ResidualCodec.train(x, nbits=2, n_centroids=32)
    monkeypatch.setattr(ResidualCodec, "QUANTILE_ROWS", len(x) // 3)
    monkeypatch.setattr(ResidualCodec, "ERROR_ROWS", len(x) // 4)
    sub = ResidualCodec.train(x, nbits=2, n_centroids=32)
    np.testing.assert_array_equal(sub.centroids, full.centroids)  # k-means still sees every row
    assert not np.array_equal(sub.cutoffs, full.cutoffs)
    width = full.cutoffs[:, -1] - full.cutoffs[:, 0]
    off = np.abs(sub.cutoffs - full.cutoffs) / width[:, None]
    # Lloyd's levels are bucket means (tails included): a little noisier than quantiles
    assert off.mean() < 0.03 and off.max() < 0.2
    assert sub.train_error == pytest.approx(full.train_error, rel=0.1)
    assert sub.error(x) == pytest.approx(full.error(x), rel=0.02)


def test_more_bits_less_error(data):
    docs, _, _ = data
    x = np.concatenate(list(docs.values()))
    errs = [ResidualCodec.train(x, nbits=b, n_centroids=32).train_error for b in (1, 2, 4)]
    assert errs[0] > 2 * errs[1] > 4 * errs[2]


def test_pooling_merges_to_the_target_count():
    rng = np.random.default_rng(3)
    v = unit(rng.standard_normal((41, DIM)))
    p = pool_tokens(v, 2.0)
    assert len(p) == 21
    np.testing.assert_allclose(np.linalg.norm(p, axis=1), 1, atol=1e-5)
    np.testing.assert_array_equal(p[0], v[0])  # [CLS] kept
    # Near-duplicates merge first: a doc of pairs pools back to one row per pair.
    base = unit(rng.standard_normal((10, DIM)))
    twins = unit(np.repeat(base, 2, axis=0) + 0.01 * rng.standard_normal((20, DIM)))
    pooled = pool_tokens(np.concatenate([v[:1], twins]), 2.0)
    assert len(pooled) == 11
    assert (pooled[1:] @ base.T).max(axis=0).min() > 0.99


def test_container_refuses_newer_versions_and_truncation(tmp_path):
    p = tmp_path / "x.sgc"
    write_container(p, "thing", 1, {"a": np.arange(10, dtype=np.int32), "b": np.ones((3, 4), np.uint8)}, {"k": 1})
    meta, arrays = read_container(p, "thing", 1)
    assert meta == {"k": 1} and arrays["a"].tolist() == list(range(10)) and arrays["b"].shape == (3, 4)
    with pytest.raises(IndexCorruptError, match="newer"):
        write_container(p, "thing", 2, {"a": np.zeros(1)})
        read_container(p, "thing", 1)
    write_container(p, "thing", 1, {"a": np.zeros(1000)})
    p.write_bytes(p.read_bytes()[:2000])
    with pytest.raises(IndexCorruptError, match="truncated"):
        read_container(p, "thing", 1)


# ------------------------------------------------------------------------------ search
def queries_from(docs, rng, n=30, noise=0.25):
    ids = rng.choice(list(docs), n)
    out = []
    for i in ids:
        d = docs[int(i)]
        q = d[rng.integers(0, len(d), 8)] + noise * rng.standard_normal((8, DIM)).astype(np.float32)
        out.append(unit(q))
    return out


def test_candidate_recall_on_a_clustered_set(tmp_path, data):
    docs, _, codec = data
    s, conn = new_store(tmp_path, codec, nprobe=4, candidates=0, rerank=48)  # 400 docs, 32 centroids
    tx(conn, s.add, list(docs), list(docs.values()))
    qs = queries_from(docs, np.random.default_rng(5))
    hits, exact_hits = [], []
    for q in qs:
        got, scores = s.search(conn, q, 10)
        want, want_scores = s.search(conn, q, 10, exact=True)
        hits.append(len(set(got.tolist()) & set(want.tolist())) / 10)
        # The exhaustive path is exact MaxSim over the decoded vectors.
        dec = {i: v for i, v in zip(list(docs), s.get(conn, list(docs)), strict=True)}
        brute = sorted(dec, key=lambda i: -maxsim(q, dec[i]))[:10]
        exact_hits.append(want.tolist() == brute)
        # Scores of returned ids are exact (re-ranked), not approximations.
        np.testing.assert_allclose(scores, [maxsim(q, dec[int(i)]) for i in got], rtol=1e-4)
    assert all(exact_hits)
    assert np.mean(hits) >= 0.95, np.mean(hits)
    # Probing every centroid and re-ranking everything is the exhaustive search.
    s.settings.nprobe, s.settings.rerank = codec.n_centroids, len(docs)
    for q in qs[:5]:
        assert s.search(conn, q, 10)[0].tolist() == s.search(conn, q, 10, exact=True)[0].tolist()


def test_allowed_and_score(tmp_path, data):
    docs, _, codec = data
    s, conn = new_store(tmp_path, codec)
    tx(conn, s.add, list(docs), list(docs.values()))
    q = queries_from(docs, np.random.default_rng(6), n=1)[0]
    allowed = np.array([3, 17, 99], np.int64)
    assert sorted(s.search(conn, q, 10, allowed)[0].tolist()) == [3, 17, 99]
    sc = s.score(conn, q, [17, 12345])
    assert np.isfinite(sc[0]) and np.isneginf(sc[1])


def test_global_docs_finds_live_chunks_across_segments(tmp_path, data):
    """Chunk id -> global doc through the view's sorted id map: every segment, tombstoned and
    unknown ids -1, any order and repeats, against a search segment by segment."""
    docs, _, codec = data
    s, conn = new_store(tmp_path, codec)
    ids = list(docs)
    for part in (ids[:40], ids[40:90], ids[90:]):  # three segments
        tx(conn, s.add, part, [docs[i] for i in part])
    dead = ids[5:12] + ids[45:47]
    tx(conn, s.remove, dead)
    view, _ = s._view_for(conn)
    assert len(view.segs) == 3
    rng = np.random.default_rng(3)
    ask = np.array(rng.permutation(ids + [0, -4, 10**9] + ids[:7]), np.int64)
    got = s._global_docs(view, ask)
    for cid, g in zip(ask.tolist(), got.tolist(), strict=True):
        if cid in dead or cid not in docs:
            assert g == -1, cid
        else:
            assert g >= 0 and view.doc_ids[g] == cid and view.live[g], cid
    assert s._global_docs(view, np.zeros(0, np.int64)).tolist() == []


def test_a_connection_sees_other_connections_commits_and_its_own(tmp_path, data):
    """_view_for reuses a connection's last view only while nothing was committed since: by
    another connection (data_version) or by itself (total_changes)."""
    docs, _, codec = data
    s, conn = new_store(tmp_path, codec)
    ids = list(docs)
    tx(conn, s.add, ids[:50], [docs[i] for i in ids[:50]])
    other = connect(tmp_path)
    q = queries_from(docs, np.random.default_rng(8), n=1)[0]
    probe = [ids[0], ids[60], ids[70]]
    assert np.isneginf(s.score(other, q, probe)[1:]).all()
    tx(conn, s.add, ids[50:], [docs[i] for i in ids[50:]])  # committed by the first connection
    assert np.isfinite(s.score(other, q, probe)).all()  # ... seen by the other
    tx(other, s.remove, [ids[60]])  # its own write
    assert np.isneginf(s.score(other, q, probe)[1]) and np.isfinite(s.score(other, q, probe)[2])
    assert np.isneginf(s.score(conn, q, probe)[1])
    view_a, _ = s._view_for(other)
    assert s._view_for(other)[0] is view_a  # nothing new: the same view, no queries
    other.close()


def snapshot(s, conn, qs):
    return [tuple(zip(*(x.tolist() for x in s.search(conn, q, 10)))) for q in qs]


def test_incremental_add_delete_equals_rebuild(tmp_path, data):
    docs, _, codec = data
    ids = list(docs)
    inc, c1 = new_store(tmp_path / "inc", codec)
    inc.MERGE_MAX_SEGMENTS = 4  # force merges too
    for part in np.array_split(np.array(ids), 7):
        tx(c1, inc.add, part.tolist(), [docs[i] for i in part])
    gone = ids[::5]
    tx(c1, inc.remove, gone)
    inc.maintain(c1)  # compaction: rewrites mostly-dead segments, merges small ones
    tx(c1, inc.remove, ids[1::7])
    live = [i for i in ids if i not in set(gone) | set(ids[1::7])]
    assert inc.stats(c1)["vectors"] == sum(len(docs[i]) for i in live)

    ref, c2 = new_store(tmp_path / "ref", codec)
    tx(c2, ref.add, live, [docs[i] for i in live])
    qs = queries_from(docs, np.random.default_rng(7), n=12)
    assert snapshot(inc, c1, qs) == snapshot(ref, c2, qs)
    for a, b in zip(inc.get(c1, live), ref.get(c2, live), strict=True):
        np.testing.assert_array_equal(a, b)
    assert len(list((tmp_path / "inc" / "vectors").glob("cseg-*"))) <= inc.MERGE_MAX_SEGMENTS


def test_drift_adds_centroids_without_touching_stored_codes(tmp_path, data):
    docs, _, codec = data
    s, conn = new_store(tmp_path, codec)
    tx(conn, s.add, list(docs), list(docs.values()))
    before = s.get(conn, [1, 2, 3])
    rng = np.random.default_rng(8)
    far, _ = clustered(rng, 60, n_topics=6)  # new topics the codebook has never seen
    far = {i + 1000: v for i, v in far.items()}
    err_before = s.codec(conn).error(np.concatenate(list(far.values())))
    tx(conn, s.add, list(far), list(far.values()))
    new = s.codec(conn)
    assert s.codec_generation(conn) == 2 and new.n_centroids > codec.n_centroids
    assert new.error(np.concatenate(list(far.values()))) < err_before / 1.5
    for a, b in zip(before, s.get(conn, [1, 2, 3]), strict=True):
        np.testing.assert_array_equal(a, b)
    s.maintain(conn)  # the old codec generation is garbage now
    assert [p.name for p in (tmp_path / "vectors").glob("codec-*")] == ["codec-00000002.sgc"]
    q = queries_from(far, rng, n=1)[0]
    assert s.search(conn, q, 5)[0].tolist() == s.search(conn, q, 5, exact=True)[0].tolist()


def test_convert_exact_index(tmp_path, data):
    docs, _, _ = data
    conn = connect(tmp_path)
    ex = SegmentStore(tmp_path, DIM)
    ids = list(docs)
    tx(conn, ex.add, ids[:200], [docs[i] for i in ids[:200]])
    tx(conn, ex.add, ids[200:], [docs[i] for i in ids[200:]])
    tx(conn, ex.remove, ids[:10])
    info = convert(conn, tmp_path, DIM, CompressSettings(nbits=4, pool_factor=1.0, n_centroids=32))
    assert store_kind(conn) == "compressed" and info["chunks"] == len(ids) - 10
    assert not list((tmp_path / "vectors").glob("seg-*"))  # the exact files are gone
    s = CompressedStore(tmp_path, DIM)
    got = s.get(conn, ids[10:])
    cos = np.mean([(a * b).sum(1).mean() for a, b in zip(got, [docs[i] for i in ids[10:]], strict=True)])
    assert cos > 0.97  # 4 bits (measured .982)
    assert s.stats(conn)["vectors"] == sum(len(docs[i]) for i in ids[10:])


# --------------------------------------------------------------------------- end to end
def test_index_chooses_the_store_by_size_and_stays_incremental(sample_project, tiny_encoder):
    from supergrep.config import Config
    from supergrep.errors import UsageError
    from supergrep.index.indexer import update_index
    from supergrep.index.project import Index
    from supergrep.index.search import Searcher

    cfg = Config()
    cfg.index.compress_above = 10**9  # auto, below the threshold: exact
    index = Index(sample_project)
    update_index(index, tiny_encoder, cfg)
    assert index.store_kind == "exact"
    exact_hits = Searcher(index, tiny_encoder).search("expire old sessions", mode="semantic")

    cfg.index.compress_above = 1  # past it: converted at the end of the run
    cfg.index.centroids = 16
    update_index(index, tiny_encoder, cfg)
    assert index.store_kind == "compressed" and isinstance(index.store, CompressedStore)
    assert index.stats()["store"] == "compressed"
    assert index.stats()["vector_dtype"] == "4-bit residuals, 16 centroids"  # what `status` prints
    n_tokens = index.conn.execute("SELECT SUM(n_tokens) FROM chunks").fetchone()[0]
    assert index.store.stats(index.conn)["vectors"] == n_tokens
    # 4-bit codes: the same top result; --exact (every chunk) agrees with the pipeline here
    hits = Searcher(index, tiny_encoder).search("expire old sessions", mode="semantic")
    assert hits[0].chunk_id == exact_hits[0].chunk_id
    cfg.search.exact = True
    assert [h.chunk_id for h in Searcher(index, tiny_encoder, cfg.search).search("expire old sessions")] == \
           [h.chunk_id for h in Searcher(index, tiny_encoder).search("expire old sessions")]

    # An edit: incremental, into the compressed store (no rebuild, no re-conversion).
    f = sample_project / "app" / "models.py"
    f.write_text(f.read_text() + "\n\ndef purge_cache(cache):\n    \"\"\"Empty the cache.\"\"\"\n    cache.clear()\n")
    rep = update_index(index, tiny_encoder, cfg)
    assert rep.files_indexed == 1 and index.store_kind == "compressed"
    assert index.store.stats(index.conn)["vectors"] == index.conn.execute("SELECT SUM(n_tokens) FROM chunks").fetchone()[0]
    top = Searcher(index, tiny_encoder).search("purge_cache Empty the cache", mode="hybrid")[0]
    assert top.symbol == "purge_cache"

    cfg.index.store = "exact"
    with pytest.raises(UsageError, match="--force"):
        update_index(index, tiny_encoder, cfg)
    update_index(index, tiny_encoder, cfg, force=True)
    assert index.store_kind == "exact"


def test_handles_of_a_long_lived_process_follow_a_conversion(sample_project, tiny_encoder):
    """The daemon keeps one primary handle and gives each thread another (``Index.handle``);
    when a writer handle converts the index, new handles must open the compressed store, not
    share the primary's exact one (whose segment files the conversion deleted)."""
    from supergrep.config import Config
    from supergrep.index.indexer import update_index
    from supergrep.index.project import Index
    from supergrep.index.search import Searcher

    cfg = Config()
    cfg.index.compress_above = 10**9
    primary = Index(sample_project)
    update_index(primary, tiny_encoder, cfg)
    assert isinstance(primary.store, SegmentStore)
    before = Searcher(primary.handle(), tiny_encoder).search("expire old sessions", mode="semantic")[0]

    writer = primary.handle()
    cfg.index.store, cfg.index.centroids = "compressed", 16
    update_index(writer, tiny_encoder, cfg)
    reader = primary.handle()
    assert isinstance(reader.store, CompressedStore) and reader.store is primary.store
    assert Searcher(reader, tiny_encoder).search("expire old sessions", mode="semantic")[0].chunk_id == before.chunk_id


def test_an_int8_index_converts_to_the_compressed_store(sample_project, tiny_encoder):
    """Conversion reads the exact segments dequantized (int8 x scale), not the raw int8 codes."""
    from supergrep.config import Config
    from supergrep.index.indexer import update_index
    from supergrep.index.project import Index
    from supergrep.index.search import Searcher

    cfg = Config()
    cfg.encode.vector_dtype, cfg.index.compress_above = "int8", 10**9
    index = Index(sample_project)
    update_index(index, tiny_encoder, cfg)
    exact_top = Searcher(index, tiny_encoder).search("expire old sessions", mode="semantic")[0].chunk_id
    cfg.index.store, cfg.index.centroids = "compressed", 16
    update_index(index, tiny_encoder, cfg)
    assert index.store_kind == "compressed"
    assert Searcher(index, tiny_encoder).search("expire old sessions", mode="semantic")[0].chunk_id == exact_top


# ------------------------------------------------------------------- fast search paths
def reference_candidates(s, conn, q):
    """Stage 2 written the obvious way (per query token, per probed centroid, per doc)."""
    view, codec = s._view_for(conn)
    sc = q @ codec.centroids.T
    nprobe = min(s.settings.nprobe, sc.shape[1])
    out: dict[int, float] = {}
    impute_total = 0.0
    for row in sc:
        probes = np.argsort(-row, kind="stable")[:nprobe]
        impute = row[probes].min()
        impute_total += impute
        best: dict[int, float] = {}
        for c in probes:
            for si, seg in enumerate(view.segs):
                if c >= len(seg.ivf_off) - 1:  # a centroid added after this segment was written
                    continue
                for d in seg.ivf[seg.ivf_off[c] : seg.ivf_off[c + 1]]:
                    g = int(d) + int(view.base[si])
                    best[g] = max(best.get(g, 0.0), float(row[c] - impute))
        for g, v in best.items():
            out[g] = out.get(g, 0.0) + v
    return {g: v + impute_total for g, v in out.items()}


@pytest.mark.parametrize("dense", [True, False], ids=["dense", "sparse"])
@pytest.mark.parametrize("cuts", [[], [150], [100, 101, 250]])  # one to four segments
def test_candidate_generation_equals_the_reference(tmp_path, data, cuts, dense, monkeypatch):
    """Both ways of summing (every doc at once, or only the touched ones) give the reference's
    candidates and scores; docs under several probed centroids of one token get their best."""
    monkeypatch.setenv("SUPERGREP_NATIVE", "0")  # the NumPy path (the C kernel: test_native_kernels.py)
    monkeypatch.setattr(CompressedStore, "DENSE_DOCS_PER_ENTRY", 10**9 if dense else 0)
    docs, _, codec = data
    s, conn = new_store(tmp_path, codec, nprobe=3)
    ids = list(docs)
    for a, b in zip([0, *cuts], [*cuts, len(ids)], strict=True):
        tx(conn, s.add, ids[a:b], [docs[i] for i in ids[a:b]])
    for q in queries_from(docs, np.random.default_rng(8), n=5):
        view, _ = s._view_for(conn)
        got, approx, _ = s._candidates(view, codec, q, view.live)
        want = reference_candidates(s, conn, q)
        assert sorted(got.tolist()) == sorted(want)
        np.testing.assert_allclose(approx, [want[int(g)] for g in got], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dense", [True, False], ids=["dense", "sparse"])
def test_an_interrupted_candidate_merge_leaves_no_dirty_scratch(tmp_path, data, monkeypatch, dense):
    """The merge's doc-sized buffers are reused zeroed across queries; an interrupt in the middle
    (Ctrl-C, a daemon thread cancelled) must not leak its partial sums into the next query."""
    from supergrep.index import compressed as C

    monkeypatch.setenv("SUPERGREP_NATIVE", "0")  # the NumPy path (the C kernel: test_native_kernels.py)
    monkeypatch.setattr(CompressedStore, "DENSE_DOCS_PER_ENTRY", 10**9 if dense else 0)
    docs, _, codec = data
    s, conn = new_store(tmp_path, codec, nprobe=3)
    tx(conn, s.add, list(docs), list(docs.values()))
    q, other = queries_from(docs, np.random.default_rng(9), n=2)
    view, _ = s._view_for(conn)
    want = s._candidates(view, codec, q, view.live)

    calls = []

    def interrupting_add(*a, **kw):  # the dense sum of the first token lands in the scratch, then:
        np.add(*a, **kw)
        raise KeyboardInterrupt

    class NumPy:
        add = staticmethod(interrupting_add)

        def __getattr__(self, name):
            return getattr(np, name)

    if not dense:  # the sparse sums: the first token's take, add and put land, then the interrupt
        real_put = np.ndarray.put

        def put_then_interrupt(buf, idx, vals):
            real_put(buf, idx, vals)
            calls.append(1)
            if len(calls) == 2:  # cur's best values, then acc's sums
                raise KeyboardInterrupt

        class NumPy:  # noqa: F811 - the sparse variant of the patched module
            def __getattr__(self, name):
                return getattr(np, name)

        class Buf(np.ndarray):
            put = put_then_interrupt

        real_scratch = CompressedStore._scratch
        monkeypatch.setattr(CompressedStore, "_scratch", lambda self, *a: real_scratch(self, *a).view(Buf))

    monkeypatch.setattr(C, "np", NumPy())
    with pytest.raises(KeyboardInterrupt):
        s._candidates(view, codec, other * 4, view.live)  # larger values than q's
    monkeypatch.setattr(C, "np", np)
    monkeypatch.undo()
    monkeypatch.setenv("SUPERGREP_NATIVE", "0")  # the NumPy path (the C kernel: test_native_kernels.py)
    monkeypatch.setattr(CompressedStore, "DENSE_DOCS_PER_ENTRY", 10**9 if dense else 0)
    got = s._candidates(view, codec, q, view.live)
    assert got[0].tolist() == want[0].tolist()
    np.testing.assert_array_equal(got[1], want[1])


def test_candidate_generation_equals_the_reference_after_drift(tmp_path, data):
    """Segments written before the codebook grew have shorter inverted-list offsets: a probe of
    a new centroid finds nothing there and everything in the newer segment."""
    docs, _, codec = data
    s, conn = new_store(tmp_path, codec, nprobe=4)
    tx(conn, s.add, list(docs), list(docs.values()))
    far, _ = clustered(np.random.default_rng(8), 60, n_topics=6)  # topics the codebook never saw
    far = {i + 1000: v for i, v in far.items()}
    tx(conn, s.add, list(far), list(far.values()))
    view, codec = s._view_for(conn)
    assert len(view.segs) == 2 and len(view.segs[0].ivf_off) - 1 < codec.n_centroids
    for q in queries_from(far, np.random.default_rng(9), n=3) + queries_from(docs, np.random.default_rng(9), n=2):
        got, approx, _ = s._candidates(view, codec, q, view.live)
        want = reference_candidates(s, conn, q)
        assert sorted(got.tolist()) == sorted(want)
        np.testing.assert_allclose(approx, [want[int(g)] for g in got], rtol=1e-5, atol=1e-5)


def test_blocked_exact_scores_equal_maxsim_over_the_decoded_vectors(tmp_path, data, monkeypatch):
    docs, _, codec = data
    s, conn = new_store(tmp_path, codec)
    tx(conn, s.add, list(docs), list(docs.values()))
    monkeypatch.setattr(CompressedStore, "EXACT_BLOCK_TOKENS", 16)  # many blocks, docs straddling none
    dec = dict(zip(list(docs), s.get(conn, list(docs)), strict=True))
    q = queries_from(docs, np.random.default_rng(9), n=1)[0]
    pick = [5, 1, 399, 42, 17, 300]
    np.testing.assert_allclose(s.score(conn, q, pick), [maxsim(q, dec[i]) for i in pick], rtol=1e-5)
    # the same with every other block on the re-rank helper thread (the default for >= 4,096 tokens)
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from supergrep.index import compressed

    seen = set()
    real = CompressedStore._score_blocks

    def spy(self, blocks, *rest):
        seen.add(threading.current_thread().name)
        return real(self, blocks, *rest)

    monkeypatch.setattr(CompressedStore, "_score_blocks", spy)
    monkeypatch.setattr(CompressedStore, "PARALLEL_MIN_TOKENS", 0)
    with ThreadPoolExecutor(1) as pool:
        monkeypatch.setattr(compressed, "helper_pool", lambda: pool)
        np.testing.assert_allclose(s.score(conn, q, pick), [maxsim(q, dec[i]) for i in pick], rtol=1e-5)
    assert len(seen) == 2  # this thread and the helper


def test_exact_scores_with_more_than_256_residual_bytes(tmp_path):
    """Up to 256 residual bytes the decode indices are uint16; wider vectors (here 544-d at 4
    bits: 272 bytes) take the intp path. Both equal MaxSim over the decoded vectors."""
    rng = np.random.default_rng(3)
    dim = 544
    docs = {i + 1: unit(rng.standard_normal((int(rng.integers(3, 12)), dim))) for i in range(40)}
    codec = ResidualCodec.train(np.concatenate(list(docs.values())), nbits=4, n_centroids=8)
    assert codec.residual_bytes > 256
    conn = connect(tmp_path)
    s = CompressedStore(tmp_path, dim, CompressSettings(pool_factor=1.0, nbits=4, integer_scores=False))
    tx(conn, s.write_codec, codec)
    tx(conn, s.add, list(docs), list(docs.values()))
    dec = dict(zip(list(docs), s.get(conn, list(docs)), strict=True))
    q = unit(rng.standard_normal((6, dim)))
    pick = [3, 1, 40, 17]
    np.testing.assert_allclose(s.score(conn, q, pick), [maxsim(q, dec[i]) for i in pick], rtol=1e-5)
    assert s._byte_offsets(codec.residual_bytes).dtype == np.intp
    assert s._byte_offsets(192).dtype == np.uint16


def test_remembered_centroid_scores_follow_the_query(tmp_path, data):
    docs, _, codec = data
    s, conn = new_store(tmp_path, codec)
    tx(conn, s.add, list(docs), list(docs.values()))
    dec = dict(zip(list(docs), s.get(conn, list(docs)), strict=True))
    q1, q2 = queries_from(docs, np.random.default_rng(10), n=2)
    pick = [5, 1, 399, 42]
    for q in (q1, q2, q1):  # a new query, then the first one again
        np.testing.assert_allclose(s.score(conn, q, pick), [maxsim(q, dec[i]) for i in pick], rtol=1e-5)
    q1 = q1.copy()
    s.score(conn, q1, pick)
    q1[0] = -q1[0]  # the same array, changed in place: not the remembered query any more
    np.testing.assert_allclose(s.score(conn, q1, pick), [maxsim(q1, dec[i]) for i in pick], rtol=1e-5)


def test_search_deep_scores_the_head_exactly_and_estimates_the_rest(tmp_path, data):
    docs, _, codec = data
    s, conn = new_store(tmp_path, codec, nprobe=4, rerank=16)
    tx(conn, s.add, list(docs), list(docs.values()))
    dec = dict(zip(list(docs), s.get(conn, list(docs)), strict=True))
    gaps = []
    for q in queries_from(docs, np.random.default_rng(10), n=10):
        also = [7, 123, 10**6]  # BM25 candidates; one is not in the index
        ids, scores, exact, margin = s.search_deep(conn, q, 60, also=also)
        assert exact.sum() == 16 and len(set(ids.tolist())) == len(ids)
        assert {7, 123} <= set(ids.tolist()) and 10**6 not in ids.tolist()
        truth = np.array([maxsim(q, dec[int(i)]) for i in ids])
        np.testing.assert_allclose(scores[exact], truth[exact], rtol=1e-4)
        gaps.append(np.corrcoef(scores[~exact], truth[~exact])[0, 1])
        assert margin > 0
        # the exactly scored ones are the candidates `search` re-ranks
        assert sorted(ids[exact].tolist()) == sorted(s.search(conn, q, 16)[0].tolist())
        ids_x, _, exact_x, margin_x = s.search_deep(conn, q, 60, also=also, exact=True)
        assert margin_x == 0.0 and exact_x.all() and ids_x[:10].tolist() == s.search(conn, q, 10, exact=True)[0].tolist()
    # the estimates follow MaxSim (coarsely on this 32-centroid, 2-bit codec: .67 measured)
    assert np.mean(gaps) > 0.5, np.mean(gaps)


def test_hybrid_results_carry_exact_semantic_scores_on_a_compressed_index(sample_project, tiny_encoder):
    """Hybrid fusion estimates deep candidates on the compressed store, but every result it
    returns has its exact MaxSim, and the ranking equals exact re-scoring of all candidates
    whenever the estimates do not matter (here: probing every centroid)."""
    from supergrep.config import Config
    from supergrep.index.indexer import update_index
    from supergrep.index.project import Index
    from supergrep.index.search import Searcher

    cfg = Config()
    cfg.index.store, cfg.index.centroids = "compressed", 16
    index = Index(sample_project)
    update_index(index, tiny_encoder, cfg)
    cfg.search.rerank = 2
    searcher = Searcher(index, tiny_encoder, cfg.search)
    for query in ("expire old sessions", "retry a request", "parse the config file"):
        hits = searcher.search(query, mode="hybrid", limit=5)
        assert hits
        exact = index.store.score(index.conn, tiny_encoder.encode_queries([query])[0], [h.chunk_id for h in hits])
        np.testing.assert_allclose([h.semantic_score for h in hits], exact, rtol=1e-5)


@pytest.mark.parametrize("cols,n", [(16384, 8), (1024, 1), (2048, 16), (1000, 8), (8, 8), (256, 3)])
def test_top_per_column_finds_each_columns_largest_values(cols, n):
    """The probed centroids: the same values as a full argpartition, also with many ties (the
    scores are passed as (centroids, query tokens), the layout the store computes)."""
    from supergrep.index.compressed import top_per_column

    rng = np.random.default_rng(cols + n)
    for s in (rng.standard_normal((33, cols)).astype(np.float32),
              np.round(rng.standard_normal((33, cols)), 1).astype(np.float32)):  # ties at the cut
        got = top_per_column(np.ascontiguousarray(s.T), n)
        assert got.shape == (33, min(n, cols))
        assert all(len(set(row)) == len(row) for row in got.tolist())
        want = np.sort(s, axis=1)[:, ::-1][:, :n]
        np.testing.assert_array_equal(np.sort(np.take_along_axis(s, got, 1), axis=1)[:, ::-1], want)


@pytest.mark.parametrize("size,n", [(57000, 64), (1000, 64), (128 * 128, 64), (300, 1), (10, 10)])
def test_nth_largest_and_top_stable_match_a_full_sort(size, n):
    """The candidate cut (``_top_stable``'s threshold) from block maxima: the same value as a
    full sort, also with ties and with a tail shorter than a block."""
    from supergrep.index.compressed import _nth_largest, _top_stable

    rng = np.random.default_rng(size + n)
    for x in (rng.standard_normal(size).astype(np.float32),
              np.round(rng.standard_normal(size), 1).astype(np.float32)):  # many ties
        assert _nth_largest(x, n) == np.sort(x)[::-1][n - 1]
        ids = rng.permutation(size) + 1
        got = _top_stable(x, ids, n)
        want = np.lexsort((ids, -x))[:n]  # best first, ties by chunk id
        assert sorted(got.tolist()) == sorted(want.tolist())


def test_training_on_few_points_per_centroid_prints_nothing(capfd):
    """faiss warns on stderr below 39 points per centroid; the codec trains with 32 by design,
    and `supergrep index` must not print a library warning on every large conversion."""
    rng = np.random.default_rng(5)
    x = unit(rng.standard_normal((640, DIM)))
    codec = ResidualCodec.train(x, nbits=2, n_centroids=32)  # 20 points per centroid
    codec.extend(x[:200], 16)
    out, err = capfd.readouterr()
    assert codec.n_centroids == 32 and "WARNING" not in err + out


@pytest.mark.parametrize("kind", ["lloyd", "uniform"])
def test_buckets_are_fitted_quantisers_of_heavy_tailed_residuals(monkeypatch, kind):
    """Token-state residuals are heavy-tailed; equal-probability buckets (ColBERTv2's, a bucket's
    median as its level) leave the outer buckets wide. The codec refines them into each
    dimension's Lloyd-Max quantiser, or the best equally spaced one (the default, scored from the
    nibbles): cutoffs halfway between levels, far less error either way."""
    from supergrep.index.codec import assign

    monkeypatch.setattr(ResidualCodec, "LEVELS", kind)
    rng = np.random.default_rng(3)
    centers = unit(rng.standard_normal((8, DIM)))
    x = unit(centers[rng.integers(0, 8, 6000)] + 0.05 * rng.standard_t(3, (6000, DIM)).astype(np.float32))
    codec = ResidualCodec.train(x, nbits=4, n_centroids=8)
    np.testing.assert_allclose(codec.cutoffs, (codec.weights[:, 1:] + codec.weights[:, :-1]) / 2, atol=1e-7)
    assert (np.diff(codec.weights, axis=1) >= 0).all()
    resid = x - codec.centroids[assign(x, codec.centroids)]
    levels = np.arange(16)
    equal = ResidualCodec(codec.centroids, np.quantile(resid, (levels[1:]) / 16, axis=0).T.astype(np.float32),
                          np.quantile(resid, (levels + 0.5) / 16, axis=0).T.astype(np.float32), 4)
    assert codec.error(x) < equal.error(x) / 1.5
    assert codec.nibble_levels == (kind == "uniform") and not equal.nibble_levels
    # the same bytes and the same decoding: only the bucket tables differ
    assert codec.encode(x)[1].shape == equal.encode(x)[1].shape


def test_decoded_tokens_are_scored_at_unit_length(tmp_path, data):
    """A decoded vector's quantised residual leaves it off unit length; each token's stored
    scale brings it back, in the vectors ``get`` returns and in the scores (the same numbers)."""
    docs, _, codec = data
    s, conn = new_store(tmp_path, codec)
    tx(conn, s.add, list(docs), list(docs.values()))
    ids = list(docs)[:50]
    got = np.concatenate(s.get(conn, ids))
    raw = np.linalg.norm(codec.decode(*codec.encode(np.concatenate([docs[i] for i in ids]))), axis=1)
    assert np.abs(raw - 1).max() > 0.01  # 2-bit residuals: the decoded norms really are off
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=2e-3)  # float16 scales
    q = queries_from(docs, np.random.default_rng(9), n=1)[0]
    dec = dict(zip(ids, s.get(conn, ids), strict=True))
    np.testing.assert_allclose(s.score(conn, q, ids), [maxsim(q, dec[i]) for i in ids], rtol=1e-5)


def test_a_version_1_segment_without_scales_is_read_and_merged_into_one_with_them(tmp_path, data):
    """Indexes written before the scales keep working (their tokens scored as decoded), and a
    merge that rewrites their segments gives the tokens their scales."""
    docs, _, codec = data
    ids = list(docs)
    s, conn = new_store(tmp_path, codec)
    tx(conn, s.add, ids[:200], [docs[i] for i in ids[:200]])
    seg = conn.execute("SELECT id FROM segments").fetchone()[0]
    path = s._cpath(seg)
    _, arrays = read_container(path, "compressed-segment", 2)
    old = {k: np.array(v) for k, v in arrays.items() if k != "scale"}
    write_container(path, "compressed-segment", 1, old)
    fresh = CompressedStore(tmp_path, DIM, CompressSettings(pool_factor=1.0))
    unscaled = fresh.get(conn, ids[:5])
    for v, i in zip(unscaled, ids[:5], strict=True):
        np.testing.assert_allclose(v, codec.decode(*codec.encode(docs[i])), atol=1e-6)
    fresh.MERGE_MAX_SEGMENTS = 1
    tx(conn, fresh.add, ids[200:], [docs[i] for i in ids[200:]])  # a second segment, with scales
    fresh.maintain(conn)  # two segments > 1: merged, every token rewritten with its scale
    merged = conn.execute("SELECT id FROM segments").fetchall()
    assert len(merged) == 1
    _, arrays = read_container(fresh._cpath(merged[0][0]), "compressed-segment", 2)
    assert "scale" in arrays and len(arrays["scale"]) == len(arrays["codes"])
    np.testing.assert_allclose(np.linalg.norm(np.concatenate(fresh.get(conn, ids[:5])), axis=1), 1.0, atol=2e-3)
