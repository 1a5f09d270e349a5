"""int8 index vectors (one float32 scale per vector) behind the VectorStore interface: error
bound, search against brute force, bytes per vector, compaction, manifest and CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from supergrep.errors import IndexCorruptError
from supergrep.index.format import connect
from supergrep.index.store import SegmentStore, quantize_rows
from supergrep.scoring.maxsim import maxsim

DIM = 64


def unit(rng, n):
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def add(store, conn, ids, vecs):
    conn.execute("BEGIN IMMEDIATE")
    store.add(conn, ids, vecs)
    conn.execute("COMMIT")


def test_quantize_rows_error_is_at_most_half_a_step():
    rng = np.random.default_rng(0)
    v = unit(rng, 200) * rng.uniform(0.1, 5, size=(200, 1)).astype(np.float32)
    v[7] = 0.0
    q, s = quantize_rows(v)
    assert q.dtype == np.int8 and s.dtype == np.float32 and s.shape == (200,)
    assert np.abs(q).max() == 127 and q[7].tolist() == [0] * DIM and s[7] == 0
    err = np.abs(q * s[:, None] - v)
    assert np.all(err <= s[:, None] / 2 + 1e-7)


@pytest.fixture
def pair(tmp_path):
    """The same 200 chunks in a float16 and an int8 store."""
    rng = np.random.default_rng(1)
    docs = {i: unit(rng, int(rng.integers(1, 30))) for i in range(1, 201)}
    stores = {}
    for dtype in ("float16", "int8"):
        d = tmp_path / dtype
        d.mkdir()
        conn = connect(d)
        s = SegmentStore(d, DIM, block_tokens=64, vector_dtype=dtype)
        ids = list(docs)
        for part in (ids[:120], ids[120:]):
            add(s, conn, part, [docs[i] for i in part])
        stores[dtype] = (s, conn, d)
    return docs, stores, rng


def test_int8_search_is_exact_over_its_own_vectors_and_close_to_float16(pair):
    docs, stores, rng = pair
    s, conn, _ = stores["int8"]
    q = unit(rng, 9)
    got_ids, got_scores = s.search(conn, q, 10)
    deq = {}
    for i, d in docs.items():
        qq, sc = quantize_rows(d)
        deq[i] = qq.astype(np.float32) * sc[:, None]
    brute = {i: maxsim(q, d) for i, d in deq.items()}
    want = sorted(brute, key=lambda i: (-brute[i], i))[:10]
    assert got_ids.tolist() == want
    np.testing.assert_allclose(got_scores, [brute[i] for i in want], rtol=1e-5)
    # against the float16 store: every MaxSim within a few thousandths (9 query tokens, each
    # cosine off by at most ~sqrt(dim) * step / 2)
    s16, conn16, _ = stores["float16"]
    ids = list(docs)
    diff = np.abs(s.score(conn, q, ids) - s16.score(conn16, q, ids))
    assert diff.max() < 0.05 and diff.mean() < 0.01
    back = s.get(conn, [42])[0]
    assert back.dtype == np.float32 and np.abs(back - docs[42]).max() < 0.01


def test_int8_takes_about_half_the_bytes_per_vector(pair):
    _, stores, _ = pair
    per = {}
    for dtype, (s, conn, d) in stores.items():
        st = s.stats(conn)
        per[dtype] = st["bytes"] / st["vectors"]
        files = sorted(p.name for p in (d / "vectors").iterdir())
        assert any(f.endswith(".scale.npy") for f in files) == (dtype == "int8")
    # float16: 2 * dim; int8: dim + 4 (the scale); plus npy headers and the layout per segment
    assert 2 * DIM <= per["float16"] < 2 * DIM + 60
    assert DIM + 4 <= per["int8"] < DIM + 4 + 60
    assert per["int8"] < 0.6 * per["float16"]


def test_compaction_keeps_int8_vectors_bit_identical(tmp_path):
    rng = np.random.default_rng(2)
    conn = connect(tmp_path)
    s = SegmentStore(tmp_path, DIM, vector_dtype="int8")
    docs = {}
    for seg in range(16):
        part = {seg * 5 + i + 1: unit(rng, 3) for i in range(5)}
        docs.update(part)
        add(s, conn, list(part), list(part.values()))
    before = {i: v for i, v in zip(docs, s.get(conn, list(docs)), strict=True)}
    conn.execute("BEGIN IMMEDIATE")
    s.remove(conn, list(range(1, 81, 2)))
    conn.execute("COMMIT")
    s.maintain(conn)
    s._cache.clear()
    live = [i for i in docs if i % 2 == 0]
    for i, v in zip(live, s.get(conn, live), strict=True):
        assert np.array_equal(v, before[i])  # dequantize -> requantize gives the same q and scale
    names = {p.name for p in (tmp_path / "vectors").iterdir()}
    segs = {r[0] for r in conn.execute("SELECT id FROM segments")}
    assert names == {f"seg-{i:08d}{sfx}.npy" for i in segs for sfx in ("", ".layout", ".scale")}


def test_a_segment_of_the_wrong_kind_is_an_index_error(tmp_path):
    rng = np.random.default_rng(3)
    conn = connect(tmp_path)
    add(SegmentStore(tmp_path, DIM), conn, [1], [unit(rng, 2)])  # written as float16
    reader = SegmentStore(tmp_path, DIM, vector_dtype="int8")
    with pytest.raises((IndexCorruptError, FileNotFoundError)):
        reader.search(conn, unit(rng, 2), 1)
    with pytest.raises(ValueError, match="vector_dtype"):
        SegmentStore(tmp_path, DIM, vector_dtype="int4")


def test_index_records_the_kind_and_the_cli_keeps_it(sample_project, tiny_model, tmp_path):
    from click.testing import CliRunner

    from supergrep.cli import main

    class _Main:
        name = "supergrep"

        def main(self, args=None, prog_name=None, **_):
            main(list(args or []))

    def run(*args):
        return CliRunner().invoke(_Main(), list(args), catch_exceptions=False)

    model = ["--model-path", str(tiny_model), "--index-dir", str(tmp_path / "idx")]
    r = run("index", str(sample_project), "--vector-dtype", "int8", *model)
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["store"] == {"vector_dtype": "int8"} and manifest["format_version"] == 2
    r = run("status", str(sample_project), "--json", *model)
    assert json.loads(r.stdout)["vector_dtype"] == "int8"
    r = run("search", "retry with backoff", str(sample_project), "--json", "--mode", "semantic", *model)
    assert r.exit_code == 0 and json.loads(r.stdout)["count"] > 0
    # asking for the other kind without --force: a one-line usage error, exit 2
    r = run("index", str(sample_project), "--vector-dtype", "float16", *model)
    assert r.exit_code == 2 and "--force" in r.output and len(r.output.strip().splitlines()) == 1
    r = run("index", str(sample_project), "--vector-dtype", "float16", "--force", *model)
    assert r.exit_code == 0
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert "store" not in manifest or not manifest["store"]
    assert manifest["format_version"] == 1  # float16 indexes stay readable by older versions
