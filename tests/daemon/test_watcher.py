"""The file watcher: what each event means, and how bursts are debounced (no model needed)."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import wait_for
from supergrep.config import WalkConfig
from supergrep.daemon.watcher import WALK, Watcher, classify


def test_classify():
    cfg, root = WalkConfig(), "/p"
    assert classify(root, "/p/src/a.py", False, cfg) == "src/a.py"
    assert classify(root, "/p/.git/index", False, cfg) is None
    assert classify(root, "/p/node_modules/x/y.js", False, cfg) is None
    assert classify(root, "/p/src/.a.py.swp", False, cfg) is None  # editors' temp files
    assert classify(root, "/p/src/.gitignore", False, cfg) is WALK
    assert classify(root, "/p/.supergrep.toml", False, cfg) is WALK
    assert classify(root, "/p/src/newdir", True, cfg) is WALK
    assert classify(root, "/p/node_modules", True, cfg) is None
    assert classify(root, "/p", True, cfg) is WALK  # the root itself went away
    assert classify(root, "/elsewhere/a.py", False, cfg) is None
    assert classify(root, "/p/.sg/index/x.npy", False, WalkConfig(include_hidden=True), skip_dir=".sg") is None
    assert classify(root, "/p/.hidden/a.py", False, WalkConfig(include_hidden=True)) == ".hidden/a.py"


@pytest.fixture
def watched(tmp_path):
    root = tmp_path / "w"
    (root / "src").mkdir(parents=True)
    batches, cv = [], threading.Condition()

    def on_batch(key, paths, walk):
        with cv:
            batches.append((key, sorted(paths), walk))

    w = Watcher(on_batch, debounce_s=0.1, max_delay_s=1.0, max_paths=5)
    w.start()
    w.watch("k", root, WalkConfig())
    yield root, batches, w
    w.stop()


def test_a_burst_is_one_batch(watched):
    root, batches, _ = watched
    for name in ("a.py", "b.py", "c.py"):
        (root / "src" / name).write_text("x = 1\n")
    (root / "src" / ".a.py.swp").write_text("junk")
    (root / "src" / "a.py").write_text("x = 2\n")
    wait_for(lambda: batches, what="a batch")
    assert batches == [("k", ["src/a.py", "src/b.py", "src/c.py"], False)]


def test_renames_deletes_and_walk_triggers(watched):
    root, batches, _ = watched
    (root / "src" / "a.py").write_text("x = 1\n")
    wait_for(lambda: batches, what="a batch")
    batches.clear()
    (root / "src" / "a.py").rename(root / "src" / "b.py")
    wait_for(lambda: batches, what="a rename")
    assert batches.pop() == ("k", ["src/a.py", "src/b.py"], False)
    (root / "src" / "b.py").unlink()
    wait_for(lambda: batches, what="a delete")
    assert batches.pop() == ("k", ["src/b.py"], False)
    (root / "lib").mkdir()
    wait_for(lambda: batches, what="a new directory")
    assert batches.pop() == ("k", [], True)
    (root / ".gitignore").write_text("*.log\n")
    wait_for(lambda: batches, what="an ignore file")
    assert batches.pop() == ("k", [], True)
    for i in range(8):  # more than max_paths: a walk is cheaper than 8 lookups
        (root / "src" / f"m{i}.py").write_text("x\n")
    wait_for(lambda: batches, what="a big burst")
    assert batches.pop() == ("k", [], True)


def test_unwatch_and_a_missing_root(watched, tmp_path):
    root, batches, w = watched
    w.unwatch("k")
    (root / "src" / "a.py").write_text("x = 1\n")
    with pytest.raises(OSError):
        w.watch("gone", tmp_path / "nope", WalkConfig())
    assert not w.watching("gone") and not w.watching("k")
    time.sleep(0.5)  # two debounce periods
    assert batches == []
