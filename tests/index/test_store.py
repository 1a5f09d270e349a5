"""SegmentStore: exact MaxSim over memory-mapped segments, tombstones, compaction, garbage."""

from __future__ import annotations

import numpy as np
import pytest

from supergrep.index.format import connect
from supergrep.index.store import SegmentStore
from supergrep.scoring.maxsim import maxsim

DIM = 16


def unit(rng, n):
    v = rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture
def store(tmp_path):
    conn = connect(tmp_path)
    return SegmentStore(tmp_path, DIM, block_tokens=64), conn


def add(store, conn, ids, vecs):
    conn.execute("BEGIN IMMEDIATE")
    store.add(conn, ids, vecs)
    conn.execute("COMMIT")


def remove(store, conn, ids):
    conn.execute("BEGIN IMMEDIATE")
    store.remove(conn, ids)
    conn.execute("COMMIT")


def brute(query, docs: dict[int, np.ndarray], k):
    # float16 storage: compare against the rounded vectors
    scores = {i: maxsim(query, d.astype(np.float16).astype(np.float32)) for i, d in docs.items()}
    return sorted(scores, key=lambda i: (-scores[i], i))[:k], scores


def test_search_matches_brute_force_across_segments_and_blocks(store):
    s, conn = store
    rng = np.random.default_rng(0)
    docs = {i: unit(rng, int(rng.integers(1, 40))) for i in range(1, 301)}
    ids = list(docs)
    for part in (ids[:100], ids[100:250], ids[250:]):  # three segments; blocks of 64 tokens
        add(s, conn, part, [docs[i] for i in part])
    q = unit(rng, 7)
    got_ids, got_scores = s.search(conn, q, 10)
    want, scores = brute(q, docs, 10)
    assert got_ids.tolist() == want
    np.testing.assert_allclose(got_scores, [scores[i] for i in want], rtol=1e-5)
    # exact re-scoring of given ids, and the stored vectors back
    np.testing.assert_allclose(s.score(conn, q, [5, 299, 12345])[:2], [scores[5], scores[299]], rtol=1e-5)
    assert np.isneginf(s.score(conn, q, [12345])[0])
    back = s.get(conn, [42])[0]
    np.testing.assert_allclose(back, docs[42], atol=2e-3)


def test_allowed_filter_and_tombstones(store):
    s, conn = store
    rng = np.random.default_rng(1)
    docs = {i: unit(rng, 5) for i in range(1, 51)}
    add(s, conn, list(docs), list(docs.values()))
    q = docs[7][:2]  # tokens of doc 7: it must rank first
    assert s.search(conn, q, 1)[0].tolist() == [7]
    remove(s, conn, [7])
    got = s.search(conn, q, 50)[0].tolist()
    assert 7 not in got and len(got) == 49
    allowed = np.array([3, 9, 11], dtype=np.int64)
    assert sorted(s.search(conn, q, 10, allowed)[0].tolist()) == [3, 9, 11]
    assert s.stats(conn)["vectors"] == 49 * 5


def test_compaction_keeps_results_and_reclaims_space(store, tmp_path):
    s, conn = store
    rng = np.random.default_rng(2)
    docs = {}
    for seg in range(20):  # many small segments, as incremental updates make
        part = {seg * 10 + i + 1: unit(rng, 3) for i in range(10)}
        docs.update(part)
        add(s, conn, list(part), list(part.values()))
    dead = list(range(1, 200, 3))
    remove(s, conn, dead)
    for d in dead:
        docs.pop(d)
    q = unit(rng, 4)
    before = s.search(conn, q, 15)[0].tolist()
    s.maintain(conn)
    n_segments = conn.execute("SELECT COUNT(*) FROM segments").fetchone()[0]
    assert n_segments <= SegmentStore.MERGE_MAX_SEGMENTS
    assert conn.execute("SELECT COUNT(*) FROM tombstones").fetchone()[0] < len(dead)
    assert s.search(conn, q, 15)[0].tolist() == before == brute(q, docs, 15)[0]
    files = {p.name for p in (tmp_path / "vectors").iterdir()}
    live = {r[0] for r in conn.execute("SELECT id FROM segments")}
    assert files == {f"seg-{i:08d}{sfx}.npy" for i in live for sfx in ("", ".layout")}


def test_uncommitted_segment_is_invisible_and_collected(store, tmp_path):
    s, conn = store
    rng = np.random.default_rng(3)
    add(s, conn, [1], [unit(rng, 3)])
    conn.execute("BEGIN IMMEDIATE")
    s.add(conn, [2], [unit(rng, 3)])
    conn.execute("ROLLBACK")  # as if the process died before COMMIT
    assert len(list((tmp_path / "vectors").glob("seg-*.layout.npy"))) == 2  # orphan on disk
    assert s.search(conn, unit(rng, 2), 10)[0].tolist() == [1]
    s.maintain(conn)
    assert len(list((tmp_path / "vectors").glob("seg-*.layout.npy"))) == 1


def test_reader_survives_compaction_by_another_connection(tmp_path):
    rng = np.random.default_rng(4)
    writer_conn = connect(tmp_path)
    writer = SegmentStore(tmp_path, DIM)
    docs = {i: unit(rng, 4) for i in range(1, 41)}
    for i in range(1, 41, 2):
        add(writer, writer_conn, [i, i + 1], [docs[i], docs[i + 1]])
    reader_conn = connect(tmp_path, readonly=True)
    reader = SegmentStore(tmp_path, DIM)
    q = unit(rng, 3)
    expected = reader.search(reader_conn, q, 5)[0].tolist()  # reader has mapped the old segments
    writer.maintain(writer_conn)  # merges and deletes the old files
    assert reader.search(reader_conn, q, 5)[0].tolist() == expected  # old maps still readable

    # A fresh reader whose first snapshot predates the compaction names files that are gone:
    # it must take a new snapshot and retry, not fail.
    fresh = SegmentStore(tmp_path, DIM)
    real = fresh._snapshot
    stale = [list(range(1, 21)), np.zeros(0, np.int64)]
    calls = []

    def snapshot(conn):
        calls.append(1)
        return stale if len(calls) == 1 else real(conn)

    fresh._snapshot = snapshot
    assert fresh.search(reader_conn, q, 5)[0].tolist() == expected
    assert len(calls) == 2


def test_a_compaction_racing_a_search_keeps_the_rest_of_the_float32_cache(tmp_path):
    """One store shared by a compacting writer and searching readers (the daemon's threads):
    a search whose snapshot names a segment compacted away meanwhile retries, and the float32
    copies of every other segment stay cached (not re-cast)."""
    rng = np.random.default_rng(5)
    conn = connect(tmp_path)
    shared = SegmentStore(tmp_path, DIM, cache_bytes=1 << 30)
    docs = {i: unit(rng, 4) for i in range(1, 31)}
    for part in ([*range(1, 11)], [*range(11, 21)], [*range(21, 31)]):
        add(shared, conn, part, [docs[i] for i in part])
    shared.warm(conn)
    before = dict(shared._f32)
    assert len(before) == 3
    stale = shared._snapshot(conn)  # a search takes its snapshot ...
    remove(shared, conn, [*range(21, 31)])  # ... an update empties the last segment ...
    shared.maintain(conn)  # ... and compaction deletes its file (and drops it from the cache)
    real, calls = shared._snapshot, []

    def snapshot(c):
        calls.append(1)
        return stale if len(calls) == 1 else real(c)

    shared._snapshot = snapshot
    q = unit(rng, 3)
    want, _ = brute(q, {i: docs[i] for i in range(1, 21)}, 5)
    assert shared.search(conn, q, 5)[0].tolist() == want and len(calls) == 2
    for sid, array in before.items():
        if sid in set(real(conn)[0]):
            assert id(shared._f32.get(sid)) == id(array), f"segment {sid} was dropped and re-cast"


def test_segment_ids_are_never_reused(store):
    """Compaction deleting the newest segment must not hand its id to the next one: readers
    cache by id (and a long-lived one would serve the old contents under the new id)."""
    s, conn = store
    rng = np.random.default_rng(6)
    add(s, conn, [1, 2], [unit(rng, 3), unit(rng, 3)])
    add(s, conn, [3], [unit(rng, 3)])
    newest = max(s._snapshot(conn)[0])
    remove(s, conn, [3])
    s.maintain(conn)  # the newest segment is all dead: deleted, files and all
    assert newest not in s._snapshot(conn)[0]
    add(s, conn, [4], [unit(rng, 3)])
    assert max(s._snapshot(conn)[0]) > newest
    reopened = SegmentStore(s.dir, DIM)  # the counter is in the index, not in this object
    conn.execute("BEGIN IMMEDIATE")
    assert reopened._new_segment_id(conn) > max(s._snapshot(conn)[0])
    conn.execute("ROLLBACK")


def test_a_search_maps_its_whole_snapshot_before_scanning(tmp_path):
    """A compaction that deletes a segment while a search is scoring an earlier one does not
    touch that search: it mapped every segment of its snapshot first."""
    rng = np.random.default_rng(7)
    conn = connect(tmp_path)
    shared = SegmentStore(tmp_path, DIM)
    docs = {i: unit(rng, 4) for i in range(1, 31)}
    for part in ([*range(1, 11)], [*range(11, 21)], [*range(21, 31)]):
        add(shared, conn, part, [docs[i] for i in part])
    q = unit(rng, 3)
    want = shared.search(conn, q, 5)[0].tolist()
    shared._cache.clear()  # nothing mapped yet, as in a fresh reader
    real_scores, compacted = shared._segment_scores, []

    def scores_then_compact(seg, query, keep):
        if not compacted:  # while the first segment is scored, the others go away
            compacted.append(1)
            other = SegmentStore(tmp_path, DIM)
            conn2 = connect(tmp_path)
            other._rewrite(conn2, [sid for sid in other._snapshot(conn2)[0] if sid != seg.id])
            other._collect_garbage(conn2)  # their files are deleted
        return real_scores(seg, query, keep)

    real_snapshot, snapshots = shared._snapshot, []

    def snapshot(c):
        snapshots.append(1)
        return real_snapshot(c)

    shared._segment_scores, shared._snapshot = scores_then_compact, snapshot
    assert shared.search(conn, q, 5)[0].tolist() == want
    assert compacted and len(snapshots) == 1  # no retry: nothing it needed had gone


def test_rejects_empty_chunk_and_wrong_dim(store):
    s, conn = store
    conn.execute("BEGIN IMMEDIATE")
    with pytest.raises(ValueError):
        s.add(conn, [1], [np.zeros((0, DIM), np.float32)])
    with pytest.raises(ValueError):
        s.add(conn, [1], [np.zeros((2, DIM + 1), np.float32)])
    conn.execute("ROLLBACK")


def test_segment_headers_are_parsed_one_thread_at_a_time(tmp_path, monkeypatch):
    """np.load parses .npy headers with ast, which CPython 3.11 cannot run in two threads at once
    ("AST constructor recursion depth mismatch"): every segment load holds the store's lock."""
    import threading

    from supergrep.index import store as store_mod

    s = SegmentStore(tmp_path, DIM, block_tokens=64)
    conn = connect(tmp_path)
    rng = np.random.default_rng(3)
    for part in ([1, 2], [3, 4]):  # two segments, loaded by two threads below
        add(s, conn, part, [unit(rng, 5) for _ in part])
    real, held = np.load, []

    def spy(*a, **kw):
        held.append(store_mod._NPY_LOCK.locked())
        return real(*a, **kw)

    monkeypatch.setattr(store_mod.np, "load", spy)
    fresh = [SegmentStore(tmp_path, DIM, block_tokens=64) for _ in range(2)]
    threads = [threading.Thread(target=lambda st=st: st.get(connect(tmp_path), [1, 3])) for st in fresh]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(held) >= 4 and all(held)
