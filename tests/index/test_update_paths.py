"""The watcher's per-path update ends exactly where a full walk would."""

from __future__ import annotations

import pytest

from supergrep.errors import IndexMissingError
from supergrep.index.indexer import update_index, update_paths
from supergrep.index.project import Index
from supergrep.index.search import Searcher


def contents(index):
    rows = index.conn.execute(
        "SELECT f.path, f.sha256, c.symbol, c.start_line, c.end_line, c.text FROM chunks c "
        "JOIN files f ON f.id = c.file_id ORDER BY 1, 4"
    ).fetchall()
    return rows, index.store.stats(index.conn)["vectors"]


def test_update_paths_matches_a_full_update(sample_project, tmp_path, tiny_encoder):
    index = Index(sample_project)
    with pytest.raises(IndexMissingError):
        update_paths(index, tiny_encoder, None, ["app/retry.py"])
    update_index(index, tiny_encoder)
    root = sample_project
    # create, modify, delete, rename, an ignored file, a now-ignored file, a directory path
    (root / "app/new_mod.py").write_text("def brand_new_function():\n    return 42\n")
    p = root / "app/models.py"
    p.write_text(p.read_text().replace("older than its time to live", "past its expiry"))
    (root / "docs/guide.md").unlink()
    (root / "app/retry.py").rename(root / "app/backoff.py")
    (root / ".gitignore").write_text("ignored.py\n")
    (root / "ignored.py").write_text("x = 1\n")
    changed = ["app/new_mod.py", "app/models.py", "docs/guide.md", "app/retry.py", "app/backoff.py",
               "ignored.py", "app", "nope/missing.py"]
    rep = update_paths(index, tiny_encoder, None, changed)
    assert rep.files_indexed == 3 and rep.files_removed == 2
    assert rep.chunks_reused >= 2  # the edited file's unchanged chunks kept their vectors

    ref = Index(root, tmp_path / "ref")
    update_index(ref, tiny_encoder)
    assert contents(index) == contents(ref)
    hits = Searcher(index, tiny_encoder).search("brand_new_function", mode="lexical")
    assert hits and hits[0].path == "app/new_mod.py"

    # nothing changed: a stat per path, no write
    before = index.meta("updated")
    rep = update_paths(index, tiny_encoder, None, changed)
    assert rep.files_indexed == rep.files_removed == 0 and index.meta("updated") == before
