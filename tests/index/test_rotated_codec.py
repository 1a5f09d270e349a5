"""A codec that codes each residual on its principal axes (``ResidualCodec(rotation=...)``,
``[index] components``): the axes, the error at equal bytes, every scoring path against float
MaxSim over the decoded vectors, the codec file's versions, and an index built with it."""

from __future__ import annotations

import numpy as np
import pytest

import supergrep.index.compressed as compressed
from supergrep.errors import IndexCorruptError
from supergrep.index.codec import ResidualCodec, principal_axes
from supergrep.index.compressed import CompressedStore, CompressSettings
from supergrep.index.format import connect
from supergrep.scoring.maxsim import maxsim

DIM = 64


def unit(x):
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def anisotropic(rng, n, dim=DIM, rank=12):
    """Token states around a few centres whose spread lies mostly in a low-rank subspace, as the
    residuals of transformer token states do (a handful of axes hold most of their variance)."""
    centers = rng.standard_normal((16, dim))
    mix = rng.standard_normal((rank, dim))
    x = centers[rng.integers(0, 16, n)] + 0.5 * rng.standard_normal((n, rank)) @ mix / np.sqrt(rank) \
        + 0.05 * rng.standard_normal((n, dim))
    return unit(x)


def test_principal_axes_are_orthonormal_sorted_and_signed():
    rng = np.random.default_rng(0)
    r = rng.standard_normal((4000, 16)) * np.linspace(3, 0.1, 16)  # variance falls with the index
    r = r @ np.linalg.qr(rng.standard_normal((16, 16)))[0]  # ... on axes that are not the coordinates
    v = principal_axes(r, 6)
    assert v.shape == (16, 6) and v.dtype == np.float32
    np.testing.assert_allclose(v.T @ v, np.eye(6), atol=1e-5)
    var = ((r @ v) ** 2).mean(0)
    assert (np.diff(var) < 0).all()
    assert (v[np.abs(v).argmax(0), np.arange(6)] > 0).all()
    np.testing.assert_array_equal(principal_axes(r, 6), v)


def test_rotation_buys_less_error_at_equal_bytes():
    """16 of 64 axes at 4 bits take the bytes of 64 dimensions at 1 bit and, on anisotropic
    residuals, keep far more of each vector; every axis rotated at 4 bits is no worse than the
    unrotated 4-bit code."""
    rng = np.random.default_rng(1)
    x = anisotropic(rng, 6000)
    flat1 = ResidualCodec.train(x, nbits=1, n_centroids=16)
    rot = ResidualCodec.train(x, nbits=4, n_centroids=16, components=16)
    assert rot.residual_bytes == flat1.residual_bytes == 8 and rot.rdim == 16 and rot.rotation.shape == (DIM, 16)
    assert rot.error(x) < 0.5 * flat1.error(x), (rot.error(x), flat1.error(x))
    full = ResidualCodec.train(x, nbits=4, n_centroids=16, components=DIM)
    assert full.error(x) <= 1.05 * ResidualCodec.train(x, nbits=4, n_centroids=16).error(x)
    # decode = centroid + rotated coordinates; extend keeps the rotation
    codes, packed = rot.encode(x[:50])
    z = rot.decode_residuals(packed) @ rot.rotation
    np.testing.assert_allclose(rot.decode(codes, packed), rot.centroids[codes] + z @ rot.rotation.T, atol=1e-6)
    # each token's scale (1 / |decoded|) computed in the coded coordinates equals the decoded norm's
    want = 1 / np.linalg.norm(rot.decode(codes, packed), axis=1)
    np.testing.assert_allclose(rot.scales(codes, packed).astype(np.float64), want, rtol=1e-3)
    more = rot.extend(x[:500], 4)
    assert more.rotation is rot.rotation and more.n_centroids == 20


def test_bad_components_are_refused():
    x = anisotropic(np.random.default_rng(2), 500)
    with pytest.raises(ValueError, match="multiple of 8 bits"):
        ResidualCodec.train(x, nbits=1, n_centroids=8, components=12)
    with pytest.raises(ValueError):
        ResidualCodec.train(x, nbits=4, n_centroids=8, components=DIM + 8)


def _store(path, codec, integer):
    conn = connect(path)
    s = CompressedStore(path, DIM, CompressSettings(pool_factor=1.0, nbits=codec.nbits, integer_scores=integer))
    conn.execute("BEGIN IMMEDIATE")
    s.write_codec(conn, codec)
    conn.execute("COMMIT")
    return s, conn


@pytest.mark.parametrize("nbits,integer", [(4, True), (2, True), (4, False)], ids=["nibbles", "table", "float"])
def test_rotated_scores_follow_float_maxsim(tmp_path, nbits, integer, monkeypatch):
    """Every re-rank path (nibbles, the integer decode table, float32) scores a rotated codec's
    tokens as float MaxSim over the decoded vectors does: the query is rotated into the coded
    coordinates (``residual_query``), which a path that forgot it would not survive."""
    monkeypatch.setattr(ResidualCodec, "LEVELS", "uniform" if nbits == 4 else "lloyd")
    rng = np.random.default_rng(3)
    x = anisotropic(rng, 4000)
    codec = ResidualCodec.train(x, nbits=nbits, n_centroids=16, components=32)
    assert codec.nibble_levels == (nbits == 4)
    lengths = rng.integers(3, 30, 200)
    pos = np.concatenate([[0], np.cumsum(lengths)])
    docs = {i + 1: x[pos[i] : pos[i + 1]] for i in range(200)}
    s, conn = _store(tmp_path, codec, integer)
    conn.execute("BEGIN IMMEDIATE")
    s.add(conn, list(docs), list(docs.values()))
    conn.execute("COMMIT")
    # a fresh store reads the codec back from its file, rotation included
    s = CompressedStore(tmp_path, DIM, s.settings)
    back = s.codec(conn)
    np.testing.assert_array_equal(back.rotation, codec.rotation)
    ids = list(docs)
    dec = dict(zip(ids, s.get(conn, ids), strict=True))
    q = unit(x[rng.integers(0, len(x), 8)] + 0.3 * rng.standard_normal((8, DIM)))
    got = s.score(conn, q, ids)
    want = np.array([maxsim(q, dec[i]) for i in ids])
    tol = 0.02 * np.abs(want).max() if integer else 1e-4
    assert np.abs(got - want).max() < tol
    assert set(np.argsort(-got)[:10].tolist()) == set(np.argsort(-want)[:10].tolist())
    a = s.search(conn, q, 10, exact=True)[0]
    assert set(a.tolist()) == set(np.array(ids)[np.argsort(-want)[:10]].tolist())
    # and the decoded vectors are the documents, to the codec's precision
    cos = np.mean([(dec[i] * docs[i]).sum(1).mean() for i in ids])
    assert cos > 0.98


def test_codec_file_versions(tmp_path, monkeypatch):
    """An unrotated codec is still written as version 1 (readable by every earlier supergrep);
    a rotated one is version 2, which a reader of version 1 refuses with an upgrade message
    instead of scoring residuals on the wrong axes."""
    from supergrep.index.container import read_container

    x = anisotropic(np.random.default_rng(4), 1000)
    for components, version in ((0, 1), (16, 2)):
        d = tmp_path / str(components)
        d.mkdir()
        s, conn = _store(d, ResidualCodec.train(x, nbits=4, n_centroids=8, components=components), True)
        path = s._codec_path(s.codec_generation(conn))
        meta, arrays = read_container(path, compressed.CODEC_KIND, compressed.CODEC_VERSION)
        assert ("rotation" in arrays) == bool(components)
        monkeypatch.setattr(compressed, "CODEC_VERSION", 1)
        fresh = CompressedStore(d, DIM)
        if version == 1:
            assert fresh.codec(conn).rotation is None
        else:
            with pytest.raises(IndexCorruptError, match="newer than this supergrep"):
                fresh.codec(conn)
        monkeypatch.undo()


def test_index_with_components_from_the_config(sample_project, tiny_encoder, tmp_path):
    """``[index] components`` reaches the codec through a real index build, the index searches,
    status says what it holds, and a value that is not a multiple of 8 is a config error."""
    from supergrep.config import Config, load_config
    from supergrep.errors import ConfigError
    from supergrep.index.indexer import update_index
    from supergrep.index.project import Index
    from supergrep.index.search import Searcher

    cfg = Config()
    cfg.index.store, cfg.index.centroids, cfg.index.components = "compressed", 16, 16
    index = Index(sample_project)
    update_index(index, tiny_encoder, cfg)
    assert index.store_kind == "compressed"
    codec = index.store.codec(index.conn)
    assert codec.rdim == 16 and codec.rotation.shape == (codec.dim, 16)
    assert "4-bit residuals on 16 principal axes" in index._vector_encoding()
    hits = Searcher(index, tiny_encoder).search("expire old sessions", mode="semantic")
    assert hits and hits[0].chunk_id
    bad = tmp_path / "bad.toml"
    bad.write_text("[index]\ncomponents = 12\n")
    with pytest.raises(ConfigError, match=r"components must be 0 or a positive multiple of 8, got 12"):
        load_config(None, bad)
    bad.write_text("[index]\nnbits = 3\n")
    with pytest.raises(ConfigError, match=r"nbits must be 1, 2 or 4"):
        load_config(None, bad)
