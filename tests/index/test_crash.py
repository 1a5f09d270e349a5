"""kill -9 at any moment leaves an index the next command opens, and the next `index`
completes it: no chunk lost, none duplicated. Real `supergrep index` subprocesses are killed
at named fault-injection points (SUPERGREP_TEST_KILL_AT) and at random moments."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from supergrep.index.project import Index

N_FILES = 24


def make_project(root, version=0):
    for i in range(N_FILES):
        p = root / f"pkg{i % 3}" / f"mod_{i}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        body = "\n\n".join(
            f"def func_{i}_{j}(x):\n    \"\"\"Step {j} of module {i}, version {version}.\"\"\"\n    return x * {j} + {i}"
            for j in range(4)
        )
        p.write_text(f'"""Module {i}."""\n\nimport math\n\n{body}\n')


def run_cli(args, env, kill_at=None, timeout=300):
    env = dict(env)
    if kill_at:
        env["SUPERGREP_TEST_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-m", "supergrep", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def setup(tmp_path, tiny_model, _isolated_home):
    root = tmp_path / "proj"
    make_project(root)
    cfg = tmp_path / "small-batches.toml"
    # a commit per file: many segments, compactions; the batches prepared in a background thread
    # (the GPU's default; test_kill_at_random_moments also runs the one-thread loop, the CPU's)
    cfg.write_text("[encode]\ncommit_chunks = 4\nprepare_ahead = 1\n")
    env = {**os.environ, "SUPERGREP_HOME": str(_isolated_home), "PYTHONUNBUFFERED": "1"}
    common = ["--model-path", str(tiny_model), "--config", str(cfg)]
    return root, env, common


def contents(index):
    rows = index.conn.execute(
        "SELECT f.path, c.symbol, c.start_line, c.end_line, c.part, c.n_tokens FROM chunks c "
        "JOIN files f ON f.id = c.file_id ORDER BY 1, 3, 5"
    ).fetchall()
    return rows, index.store.stats(index.conn)["vectors"]


def check_complete(root, env, common, tiny_encoder, reference_dir):
    """The next `index` opens the crashed index and completes it; the result equals a fresh build."""
    from supergrep.index.indexer import update_index
    from supergrep.index.search import Searcher

    done = run_cli(["index", str(root), *common], env)
    assert done.returncode == 0, done.stderr
    index = Index(root)
    rows, n_live = contents(index)
    assert len(rows) == len(set(rows)), "duplicate chunks"
    assert n_live == sum(r[5] for r in rows), "vectors out of step with chunk rows"
    ref = Index(root, reference_dir)
    update_index(ref, tiny_encoder)
    assert (rows, n_live) == contents(ref), "the resumed index differs from a fresh build"
    for mode in ("semantic", "lexical"):
        got = Searcher(index, tiny_encoder).search("module 7 step 2", mode=mode)
        want = Searcher(ref, tiny_encoder).search("module 7 step 2", mode=mode)
        assert [(h.path, h.start_line, round(h.score, 4)) for h in got] == \
               [(h.path, h.start_line, round(h.score, 4)) for h in want]


POINTS = [
    "between_segment_files:2",
    "segment_written:3",
    "batch_before_commit:2",
    "batch_committed:4",
    "compaction_before_commit:1",
    "compaction_committed:1",
]


@pytest.mark.parametrize("point", POINTS)
def test_kill_at_fault_points_then_resume(setup, tmp_path, tiny_encoder, point):
    root, env, common = setup
    killed = run_cli(["index", str(root), *common], env, kill_at=point)
    assert killed.returncode == -signal.SIGKILL, (point, killed.returncode, killed.stderr[-2000:])
    check_complete(root, env, common, tiny_encoder, tmp_path / "reference")


def test_kill_during_incremental_update(setup, tmp_path, tiny_encoder):
    root, env, common = setup
    assert run_cli(["index", str(root), *common], env).returncode == 0
    make_project(root, version=1)  # every file changes
    for f in sorted(root.rglob("mod_1*.py")):
        f.unlink()  # and some leave
    killed = run_cli(["index", str(root), *common], env, kill_at="batch_before_commit:3")
    assert killed.returncode == -signal.SIGKILL
    # The half-updated index is usable: it opens and answers, through the CLI.
    mid = run_cli(["search", "module step", str(root), "--mode", "lexical", "--json", *common], env)
    assert mid.returncode == 0, mid.stderr
    check_complete(root, env, common, tiny_encoder, tmp_path / "reference")


@pytest.mark.parametrize("ahead", [0, 1])
def test_kill_at_random_moments(ahead, setup, tmp_path, tiny_encoder):
    root, env, common = setup
    (tmp_path / "small-batches.toml").write_text(f"[encode]\ncommit_chunks = 4\nprepare_ahead = {ahead}\n")
    rng = random.Random(1234)
    for round_ in range(4):
        if round_ == 2:
            make_project(root, version=2)
        proc = subprocess.Popen([sys.executable, "-m", "supergrep", "index", str(root), *common], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(1.0, 4.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # Whatever moment it died at, the index opens (or was never created).
        index = Index(root)
        if index.exists():
            rows, n_live = contents(index)
            assert n_live == sum(r[5] for r in rows)
        index.close()
    check_complete(root, env, common, tiny_encoder, tmp_path / "reference")
