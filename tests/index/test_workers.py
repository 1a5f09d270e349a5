"""`supergrep index --workers 2`: encoding over two torchrun processes (gloo), one writer.

The index equals a one-process build (same chunks, same vectors within float16 rounding), and a
writer killed mid-run (kill -9 at a fault-injection point) leaves an index that the next
one-process `index` completes to exactly what a fresh build holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from supergrep.index.indexer import update_index
from supergrep.index.project import Index

SRC = Path(__file__).resolve().parents[2] / "src"
N_FILES = 12


def make_project(root: Path) -> None:
    for i in range(N_FILES):
        p = root / f"pkg{i % 3}" / f"mod_{i}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        body = "\n\n".join(
            f"def func_{i}_{j}(x):\n    \"\"\"Step {j} of module {i}.\"\"\"\n    return x * {j} + {i}" * (1 + j % 3)
            for j in range(4)
        )
        p.write_text(f'"""Module {i}."""\n\nimport math\n\n{body}\n')


def index_with_workers(root: Path, index_dir: Path, model: Path, config: Path, home: Path, kill_at: str | None = None):
    env = {**os.environ, "SUPERGREP_HOME": str(home), "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    env.pop("SUPERGREP_TEST_KILL_AT", None)
    if kill_at:
        env["SUPERGREP_TEST_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-m", "supergrep", "index", str(root), "--workers", "2", "--index-dir",
                           str(index_dir), "--model-path", str(model), "--config", str(config), "--json"],
                          env=env, capture_output=True, text=True, timeout=400)


def chunks(index: Index) -> list[tuple]:
    return index.conn.execute(
        "SELECT f.path, c.symbol, c.start_line, c.end_line, c.part, c.n_tokens, c.text_hash, c.id FROM chunks c "
        "JOIN files f ON f.id = c.file_id ORDER BY 1, 3, 5"
    ).fetchall()


def vectors(index: Index) -> list[np.ndarray]:
    return index.store.get(index.conn, [r[-1] for r in chunks(index)])


def test_two_workers_build_the_one_process_index_and_survive_a_killed_writer(
        tmp_path, tiny_model, tiny_encoder, _isolated_home):
    root = tmp_path / "proj"
    make_project(root)
    config = tmp_path / "small.toml"
    config.write_text("[encode]\ncommit_chunks = 8\n")  # several batches, so several rounds of sharding
    from supergrep.config import load_config

    ref = Index(root, tmp_path / "one")
    update_index(ref, tiny_encoder, load_config(root, config))
    want = chunks(ref)
    assert len(want) > 3 * 8

    two = Index(root, tmp_path / "two")
    r = index_with_workers(root, two.dir, tiny_model, config, _isolated_home)
    assert r.returncode == 0, r.stderr[-4000:]
    assert '"workers": 2' in r.stdout and f'"chunks": {len(want)}' in r.stdout
    assert [c[:-1] for c in chunks(two)] == [c[:-1] for c in want]  # same chunks, same token counts
    for got, exp in zip(vectors(two), vectors(ref), strict=True):
        assert got.shape == exp.shape
        np.testing.assert_allclose(got, exp, atol=2e-3)  # float16 storage of the same fp32 vectors

    # kill -9 of the writer (rank 0) after its second commit: torchrun stops the other worker.
    crashed = Index(root, tmp_path / "crashed")
    r = index_with_workers(root, crashed.dir, tiny_model, config, _isolated_home, kill_at="batch_committed:2")
    assert r.returncode == 1 and "exitcode  : -9" in r.stderr, r.stderr[-3000:]  # torchrun's report
    partial = Index(root, crashed.dir)
    n_partial = len(chunks(partial))
    assert 0 < n_partial < len(want)  # the two committed batches, readable
    update_index(partial, tiny_encoder, load_config(root, config))  # the next run completes it
    assert [c[:-1] for c in chunks(partial)] == [c[:-1] for c in want]
    assert partial.store.stats(partial.conn)["vectors"] == ref.store.stats(ref.conn)["vectors"]
