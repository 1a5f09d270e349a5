"""`source_at` (the watcher's one-file walk) agrees with `walk` on every path of a tricky tree."""

from __future__ import annotations

import os

import pytest

from supergrep.config import WalkConfig
from supergrep.corpus.walk import WalkRequired, source_at, walk


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "repo"
    files = {
        "a.py": "x = 1\n",
        "README.md": "# hi\n",
        "notes.unknownext": "?\n",
        ".hidden.py": "x = 1\n",
        ".config/tool.py": "x = 1\n",
        "node_modules/pkg/index.js": "x\n",
        "src/keep.py": "x = 1\n",
        "src/gen/out.py": "x = 1\n",
        "src/gen/.gitignore": "!keep_me.py\n",
        "src/gen/keep_me.py": "x = 1\n",
        "src/.gitignore": "gen/\n*.tmp.py\n",
        "src/scratch.tmp.py": "x = 1\n",
        "docs/.ignore": "draft*\n",
        "docs/draft_1.md": "# d\n",
        "docs/final.md": "# f\n",
        "big/huge.py": "x = 1\n" * 200,
        "excluded_by_user/z.py": "x = 1\n",
        ".gitignore": "*.log.py\n",
        "debug.log.py": "x = 1\n",
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (root / ".git" / "info").mkdir(parents=True)
    (root / ".git" / "info" / "exclude").write_text("secret.py\n")
    (root / "secret.py").write_text("x = 1\n")
    os.mkfifo(root / "src" / "fifo.py")
    return root


@pytest.mark.parametrize("cfg", [
    WalkConfig(max_file_bytes=1000, exclude_globs=["excluded_by_user/"]),
    WalkConfig(include_hidden=True, respect_ignore_files=False),
])
def test_source_at_agrees_with_walk(tree, cfg):
    walked = {s.path: s for s in walk(tree, cfg)}
    every = set()
    for dirpath, _dirnames, filenames in os.walk(tree):
        for name in filenames:
            every.add(os.path.relpath(os.path.join(dirpath, name), tree).replace(os.sep, "/"))
    assert walked and set(walked) < every
    for rel in sorted(every | {"missing.py", "src/missing/x.py"}):
        got = source_at(tree, rel, cfg)
        if rel in walked:
            assert got == walked[rel], rel
        else:
            assert got is None, rel


def test_a_symlinked_directory_needs_a_walk(tree):
    (tree / "linked").symlink_to(tree / "src", target_is_directory=True)
    with pytest.raises(WalkRequired):
        source_at(tree, "linked/keep.py")
    assert source_at(tree, "src/keep.py") is not None
