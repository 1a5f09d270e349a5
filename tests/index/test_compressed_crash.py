"""kill -9 while the compressed store changes leaves a usable index: the conversion from the
exact store and a compressed update (add + remove, with a drift-triggered codec generation)
die at every fault-injection point in a child process; the parent then opens the index, finds
either the old state or the new one (never a mix), and the next writer's housekeeping removes
the orphaned files. The child only imports NumPy, faiss and supergrep.index (no model), so
each kill costs well under a second."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from supergrep.index.compressed import CompressedStore, store_kind
from supergrep.index.format import connect
from supergrep.index.store import SegmentStore

DIM = 16

CHILD = textwrap.dedent("""
    import sys, json, numpy as np
    from pathlib import Path
    from supergrep.index.format import connect
    from supergrep.index.store import SegmentStore
    from supergrep.index.compressed import CompressedStore, CompressSettings, convert

    root, step = Path(sys.argv[1]), sys.argv[2]
    rng = np.random.default_rng(0)
    def docs(lo, hi, centers):
        out = {}
        for i in range(lo, hi):
            c = centers[rng.integers(0, len(centers), int(rng.integers(3, 12)))]
            v = c + 0.15 * rng.standard_normal(c.shape).astype(np.float32)
            out[i] = v / np.linalg.norm(v, axis=1, keepdims=True)
        return out
    base = docs(1, 301, rng.standard_normal((24, 16)).astype(np.float32))
    extra = docs(1000, 1100, rng.standard_normal((12, 16)).astype(np.float32))  # unseen topics: drift
    conn = connect(root)
    settings = CompressSettings(nbits=2, pool_factor=1.0, n_centroids=16)
    if step == "build":
        s = SegmentStore(root, 16)
        for lo in (1, 151):
            conn.execute("BEGIN IMMEDIATE"); s.add(conn, list(range(lo, lo + 150)), [base[i] for i in range(lo, lo + 150)]); conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE"); s.remove(conn, [5, 6, 7]); conn.execute("COMMIT")
    elif step == "convert":
        from supergrep.index.compressed import store_kind
        if store_kind(conn) != "compressed":  # as the indexer decides
            convert(conn, root, 16, settings)
    elif step == "update":
        s = CompressedStore(root, 16, settings)
        s.maintain(conn)
        conn.execute("BEGIN IMMEDIATE")
        s.add(conn, list(extra), list(extra.values()))
        s.remove(conn, [10, 11, 12])
        from supergrep.faults import crashpoint
        crashpoint("batch_before_commit")
        conn.execute("COMMIT")
        s.MERGE_MAX_SEGMENTS = 1
        s.maintain(conn)
    print(json.dumps({"ok": True}))
""")


def run_step(root, step):
    """The same steps in this process (no kill): set-up and the 'next run'."""
    code = CHILD.replace("root, step = Path(sys.argv[1]), sys.argv[2]", f"root, step = Path({str(root)!r}), {step!r}")
    exec(compile(code, "<child>", "exec"), {"__name__": "child"})  # noqa: S102 - the test's own script


def child(root, step, kill_at=None):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("SUPERGREP_TEST_KILL_AT", None)
    if kill_at:
        env["SUPERGREP_TEST_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-c", CHILD, str(root), step], env=env, capture_output=True,
                          text=True, timeout=120)


def state(root):
    """(store kind, live chunk ids, ids whose vectors read back) after the next writer's housekeeping."""
    conn = connect(root)
    kind = store_kind(conn)
    s = CompressedStore(root, DIM) if kind == "compressed" else SegmentStore(root, DIM)
    s.maintain(conn)  # what the next `supergrep index` does first: orphans go
    ids = sorted(r[0] for r in conn.execute("SELECT chunk_id FROM vec_chunks"))
    vecs = s.get(conn, ids)
    assert s.stats(conn)["vectors"] == sum(len(v) for v in vecs)
    q = vecs[0][:2]
    got = s.search(conn, q, 5)[0].tolist()
    assert got and got[0] in ids
    names = sorted(os.listdir(root / "vectors"))
    conn.close()
    return kind, ids, names


BASE_IDS = [i for i in range(1, 301) if i not in (5, 6, 7)]
UPDATED_IDS = sorted([i for i in BASE_IDS if i not in (10, 11, 12)] + list(range(1000, 1100)))


@pytest.mark.parametrize("point", ["codec_written:1", "segment_written:2", "convert_before_commit:1",
                                   "convert_committed:1"])
def test_kill_during_conversion(tmp_path, point):
    run_step(tmp_path, "build")
    killed = child(tmp_path, "convert", point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    kind, ids, names = state(tmp_path)
    assert ids == BASE_IDS
    if kind == "exact":
        assert not [n for n in names if not n.startswith("seg-")], names  # orphans removed
        assert point != "convert_committed:1"
    else:
        assert point == "convert_committed:1"
        assert all(n.startswith(("cseg-", "codec-")) for n in names), names
    # The next run completes the conversion.
    run_step(tmp_path, "convert")
    kind, ids, _ = state(tmp_path)
    assert kind == "compressed" and ids == BASE_IDS


@pytest.mark.parametrize("point", ["codec_written:1", "batch_before_commit:1", "compaction_before_commit:1",
                                   "compaction_committed:1"])
def test_kill_during_compressed_update(tmp_path, point):
    run_step(tmp_path, "build")
    run_step(tmp_path, "convert")
    killed = child(tmp_path, "update", point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    kind, ids, names = state(tmp_path)
    assert kind == "compressed"
    committed = point.startswith("compaction")
    assert ids == (UPDATED_IDS if committed else BASE_IDS)
    codecs = [n for n in names if n.startswith("codec-")]
    assert len(codecs) == 1  # an uncommitted codec generation is an orphan, and goes
    if not committed:
        assert codecs == ["codec-00000001.sgc"]
    else:
        assert codecs == ["codec-00000002.sgc"]  # the drifted batch brought new centroids
