"""The in-memory catalog (``index/mirror.py``) answers exactly as SQLite does: BM25 as FTS5: the same chunk
ids in the same order with the same float32 scores, ties included, with and without filters,
after incremental updates; where it can't (stale, too big, rows it does not understand) it
returns None and FTS5 answers."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from supergrep.index.indexer import update_index
from supergrep.index.mirror import Mirror, _varints, read_key
from supergrep.index.project import BM25_WEIGHTS, Index
from supergrep.scoring.bm25 import query_terms

WORDS = ("parse config retry session token cache user password hash request response stream "
         "buffer socket timeout backoff render template query index merge split encode decode "
         "lock queue worker schedule").split()


def _write_project(root, n_files=24, seed=0):
    rng = random.Random(seed)
    for i in range(n_files):
        funcs = []
        for j in range(rng.randint(2, 5)):
            a, b, c = rng.sample(WORDS, 3)
            body = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 30)))
            funcs.append(f"def {a}_{b}{c.title()}_{j}(x):\n    \"\"\"{body}\"\"\"\n    return x\n")
        p = root / f"pkg{i % 3}" / f"mod_{WORDS[i % len(WORDS)]}_{i}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("\n\n".join(funcs))
    # identical files: identical BM25 scores, so the tie order is tested too
    for name in ("dup_a.py", "dup_b.py", "dup_c.py"):
        (root / name).write_text("def retry_session(x):\n    \"\"\"retry the session token\"\"\"\n    return x\n")


def _queries(seed=1, n=40):
    rng = random.Random(seed)
    qs = ["retry session", "parse", "token cache user", "no_such_word", "retrySession", "dup"]
    qs += [" ".join(rng.sample(WORDS + ["missing", "absent"], rng.randint(1, 8))) for _ in range(n)]
    return qs


def _fts(index, query, k, allowed=None):
    """The FTS5 answer (the mirror bypassed)."""
    saved, index._mirror = index._mirror, None
    try:
        return index.lexical(query, k, allowed)
    finally:
        index._mirror = saved


def _sql_meta(index, ids):
    saved, index._mirror = index._mirror, None
    try:
        return index.chunk_meta(ids)
    finally:
        index._mirror = saved


def _assert_same(index, lx, queries, ks=(1, 3, 10, 500), allowed=None):
    every = [r[0] for r in index.conn.execute("SELECT id FROM chunks")]
    meta = lx.chunk_meta(index.conn, every + [10**9])
    assert meta == _sql_meta(index, every) and len(meta) == len(every)
    for q in queries:
        for k in ks:
            want = _fts(index, q, k, allowed)
            got = lx.search(index.conn, query_terms(q), k, allowed)
            assert got is not None, q
            assert got[0].tolist() == want[0].tolist(), (q, k)
            assert got[1].dtype == np.float32 and np.array_equal(got[1], want[1]), (q, k)


@pytest.fixture
def project(tmp_path, tiny_encoder):
    root = tmp_path / "proj"
    _write_project(root)
    index = Index(root)
    update_index(index, tiny_encoder)
    yield root, index
    index.close()


def test_varints_read_sqlite_varints():
    assert _varints(b"\x05") == [5]
    assert _varints(b"\xe2~\x81\xe1\x03") == [12670, 28803]
    assert _varints(b"\xff" * 8 + b"\x01") == [(1 << 64) - 256 + 1]  # the 9th byte keeps 8 bits


def test_the_mirror_ranks_and_scores_exactly_as_fts5(project):
    _, index = project
    lx = Mirror(index.dir, BM25_WEIGHTS)
    assert lx.search(index.conn, ["retry"], 10) is None  # off until a long-lived process turns it on
    lx.max_chunks = 10_000
    assert lx.refresh(index.conn) and lx.ready and lx.disabled is None
    _assert_same(index, lx, _queries())
    # ties: the three identical files score alike; FTS5 orders them by chunk id, and so does k=2
    ids, scores = lx.search(index.conn, query_terms("retry session token"), 500)
    tied = np.flatnonzero(scores == scores[0])
    assert len(tied) >= 3 and ids[tied].tolist() == sorted(ids[tied].tolist())


def test_filtered_searches_match_fts5_even_past_its_first_rows(project):
    _, index = project
    lx = Mirror(index.dir, BM25_WEIGHTS)
    lx.max_chunks = 10_000
    lx.refresh(index.conn)
    allowed = index.filter_ids(path_prefix="pkg1")
    assert allowed is not None and 0 < len(allowed)
    _assert_same(index, lx, _queries(n=15), allowed=allowed)
    every = index.conn.execute("SELECT id FROM chunks").fetchall()
    one = np.array([max(r[0] for r in every)], np.int64)  # a single allowed chunk: the rest filtered out
    _assert_same(index, lx, ["retry session", "parse"], ks=(1, 10), allowed=one)


def test_an_update_makes_it_stale_and_a_refresh_reads_only_the_new_rows(project, tiny_encoder, monkeypatch):
    root, index = project
    lx = index.mirror  # shared by the index's handles, as in the daemon
    lx.max_chunks = 10_000
    lx.refresh(index.conn)
    n_before = lx.refreshes
    (root / "pkg0" / "new_mod.py").write_text("def brand_newWord(x):\n    \"\"\"parse the retry queue\"\"\"\n    return x\n")
    (root / "dup_b.py").unlink()
    (root / "pkg1" / "mod_token_1.py").write_text("def token_refresh(x):\n    return x\n")
    update_index(index, tiny_encoder)
    # stale: None now (FTS5 answers) and a background refresh is on its way
    monkeypatch.setattr(lx, "request_refresh", lambda: None)
    assert lx.search(index.conn, ["brand"], 10) is None
    assert lx.chunk_meta(index.conn, [1]) is None
    assert index.lexical("brand", 10)[0].size == 1  # FTS5 answered
    read = []
    import supergrep.index.mirror as L

    real = L._select_rows
    monkeypatch.setattr(L, "_select_rows", lambda conn, sql, ids: read.append(len(ids)) or real(conn, sql, ids))
    assert lx.refresh(index.conn) and lx.refreshes == n_before + 1
    n_new = index.conn.execute("SELECT COUNT(*) FROM chunks c JOIN files f ON f.id = c.file_id"
                               " WHERE f.path IN ('pkg0/new_mod.py', 'pkg1/mod_token_1.py')").fetchone()[0]
    assert read == [n_new, n_new]  # the added chunks' FTS rows and metadata, not the tables
    _assert_same(index, lx, _queries(seed=3) + ["brand newWord", "token refresh"])
    handle = index.handle()
    assert handle.mirror is lx and handle.lexical("brand", 10)[0].tolist() == _fts(index, "brand", 10)[0].tolist()
    handle.close()


def test_a_stale_mirror_refreshes_itself_in_the_background(project, tiny_encoder):
    root, index = project
    lx = index.mirror
    lx.max_chunks = 10_000
    assert lx.search(index.conn, ["retry"], 10) is None  # not built: FTS5 now, a build started
    deadline = time.time() + 30
    while not lx.ready and time.time() < deadline:
        time.sleep(0.02)
    assert lx.ready and lx.search(index.conn, ["retry"], 10) is not None
    (root / "later.py").write_text("def later_thing(x):\n    return x\n")
    update_index(index, tiny_encoder)
    key = read_key(index.conn)
    assert lx.search(index.conn, ["later"], 10) is None
    while lx._snap.key != key and time.time() < deadline:
        time.sleep(0.02)
    got = lx.search(index.conn, ["later"], 10)
    assert got is not None and got[0].tolist() == _fts(index, "later", 10)[0].tolist()


def test_too_big_or_not_plain_terms_leaves_it_to_fts5(project):
    _, index = project
    n = index.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
    lx = Mirror(index.dir, BM25_WEIGHTS)
    lx.max_chunks = n - 1
    assert not lx.refresh(index.conn) and not lx.ready
    started = []
    lx.request_refresh = lambda: started.append(1)
    assert lx.search(index.conn, ["retry"], 10) is None and not started  # no refresh per search
    # rows this mirror can't split as FTS5 does (an index of an older layout): it turns itself off
    index.conn.execute("INSERT INTO chunks_fts (rowid, path, symbol, body) VALUES (999999, 'x', '', 'Foo-Bar baz')")
    lx2 = Mirror(index.dir, BM25_WEIGHTS)
    lx2.max_chunks = 10_000
    assert not lx2.refresh(index.conn) and lx2.disabled and "token totals" in lx2.disabled
    assert lx2.search(index.conn, ["baz"], 10) is None
    # a query term FTS5 would split is FTS5's too
    lx3 = Mirror(index.dir, BM25_WEIGHTS)
    lx3.max_chunks = 10_000
    index.conn.execute("DELETE FROM chunks_fts WHERE rowid = 999999")
    assert lx3.refresh(index.conn)
    assert lx3.search(index.conn, ["naïve"], 10) is None


def test_an_empty_index_then_its_first_files(tmp_path, tiny_encoder):
    root = tmp_path / "empty"
    root.mkdir()
    index = Index(root)
    update_index(index, tiny_encoder)
    lx = index.mirror
    lx.max_chunks = 10_000
    assert lx.refresh(index.conn) and lx.disabled is None
    ids, scores = lx.search(index.conn, ["retry"], 10)
    assert ids.size == 0 and scores.size == 0
    assert lx.chunk_meta(index.conn, [1, 2]) == {}
    _write_project(root, n_files=3)
    update_index(index, tiny_encoder)
    assert lx.refresh(index.conn)
    _assert_same(index, lx, _queries(n=5), allowed=None)
    index.close()


def test_a_refresh_from_an_older_state_rebuilds_and_stays_exact(project, tiny_encoder):
    """A connection still reading an older state (rows since deleted, with ids below the
    snapshot's newest) gets a snapshot of its own state, not a merge that would break the
    chunk-id order; the next refresh at the newest state is exact too."""
    root, index = project
    lx = index.mirror
    lx.max_chunks = 10_000
    old = index.handle()
    old.conn.execute("BEGIN")
    old.conn.execute("SELECT COUNT(*) FROM chunks_fts").fetchone()  # its read snapshot starts here
    (root / "pkg0" / "mod_parse_0.py").unlink()
    (root / "pkg2" / "late.py").write_text("def late_arrival(x):\n    return x\n")
    update_index(index, tiny_encoder)
    assert lx.refresh(index.conn)
    _assert_same(index, lx, _queries(n=10) + ["late arrival"])
    assert lx.refresh(old.conn)  # the older state: the deleted file's rows are back
    ids = lx._snap.ids
    assert np.all(np.diff(ids) > 0)
    _assert_same(old, lx, _queries(n=10) + ["late arrival"])
    old.conn.execute("COMMIT")
    assert lx.refresh(index.conn)
    _assert_same(index, lx, _queries(n=10) + ["late arrival"])
    old.close()


def test_a_failing_refresh_is_not_retried_for_the_same_state(project, tiny_encoder, monkeypatch):
    root, index = project
    lx = Mirror(index.dir, BM25_WEIGHTS)
    lx.max_chunks = 10_000

    def broken(*a):
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(lx, "_merged", broken)
    with pytest.raises(RuntimeError):
        lx.refresh(index.conn)
    started = []
    lx.request_refresh = lambda: started.append(1)
    assert lx.search(index.conn, ["retry"], 10) is None and not started  # FTS5 answers, no retry
    (root / "pkg1" / "more.py").write_text("def more_things(x):\n    return x\n")
    update_index(index, tiny_encoder)
    assert lx.search(index.conn, ["retry"], 10) is None and started == [1]  # a new state: tried again
