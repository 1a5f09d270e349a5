"""Incremental indexing: what gets re-embedded, what leaves, model checks, concurrent readers."""

from __future__ import annotations

import os
import threading
import time

import pytest

from supergrep.config import Config
from supergrep.errors import IndexBusyError, ModelMismatchError
from supergrep.index.indexer import update_index
from supergrep.index.project import Index
from supergrep.index.search import Searcher, SearchFilters


def chunk_rows(index):
    return index.conn.execute(
        "SELECT f.path, c.symbol, c.start_line, c.end_line FROM chunks c JOIN files f ON f.id = c.file_id ORDER BY 1, 3"
    ).fetchall()


def test_first_index_then_nothing_to_do(sample_project, tiny_encoder):
    index = Index(sample_project)
    rep = update_index(index, tiny_encoder)
    assert rep.files == 3 and rep.files_indexed == 3 and rep.chunks == rep.chunks_embedded > 5
    assert rep.lines_indexed == sum(len(p.read_text().splitlines()) for p in sample_project.rglob("*.*"))
    symbols = {r[1] for r in chunk_rows(index)}
    assert {"User", "User.check_password", "expire_sessions", "retry_with_backoff"} <= symbols
    # vectors: one per token, for every chunk
    n_tokens = index.conn.execute("SELECT SUM(n_tokens) FROM chunks").fetchone()[0]
    assert index.store.stats(index.conn)["vectors"] == n_tokens

    rep2 = update_index(index, tiny_encoder)
    assert (rep2.files_indexed, rep2.chunks_embedded, rep2.files_unchanged) == (0, 0, 3)


def test_edit_reembeds_only_changed_chunks(sample_project, tiny_encoder):
    index = Index(sample_project)
    update_index(index, tiny_encoder)
    before = chunk_rows(index)
    p = sample_project / "app/models.py"
    p.write_text(p.read_text().replace("older than its time to live", "past its expiry time"))
    rep = update_index(index, tiny_encoder)
    assert rep.files_indexed == 1
    assert rep.chunks_embedded == 1  # only expire_sessions changed text
    assert rep.chunks_reused >= 3
    assert len(chunk_rows(index)) == len(before)

    os.utime(sample_project / "app/retry.py", ns=(1, 1))  # new mtime, same bytes
    rep = update_index(index, tiny_encoder)
    assert rep.files_indexed == 0 and rep.chunks_embedded == 0
    mtime = index.conn.execute("SELECT mtime_ns FROM files WHERE path = 'app/retry.py'").fetchone()[0]
    assert mtime == 1


def test_deleted_renamed_and_binary_files_leave_the_index(sample_project, tiny_encoder):
    index = Index(sample_project)
    update_index(index, tiny_encoder)
    (sample_project / "app/retry.py").rename(sample_project / "app/backoff.py")
    (sample_project / "docs/guide.md").write_bytes(b"\x00\x01binary now")
    rep = update_index(index, tiny_encoder)
    paths = {r[0] for r in chunk_rows(index)}
    assert paths == {"app/models.py", "app/backoff.py"}
    assert rep.files_removed == 2 and rep.skipped == {"binary": 1}
    searcher = Searcher(index, tiny_encoder)
    for mode in ("lexical", "semantic", "hybrid"):
        hits = searcher.search("retry backoff guide sessions", mode=mode, limit=50)
        assert {h.path for h in hits} <= {"app/models.py", "app/backoff.py"}, mode
    # tombstoned vectors are not searchable, and the store's live count matches the rows
    n_tokens = index.conn.execute("SELECT SUM(n_tokens) FROM chunks").fetchone()[0]
    assert index.store.stats(index.conn)["vectors"] == n_tokens


def test_search_modes_and_filters(sample_project, tiny_encoder):
    index = Index(sample_project)
    update_index(index, tiny_encoder)
    s = Searcher(index, tiny_encoder)
    lex = s.search("retry_with_backoff", mode="lexical")
    assert lex[0].symbol == "retry_with_backoff"
    assert s.search("checkPassword", mode="lexical")[0].symbol == "User.check_password"  # camelCase split
    only_md = s.search("sessions", filters=SearchFilters(languages=["markdown"]))
    assert only_md and {h.language for h in only_md} == {"markdown"}
    under_docs = s.search("sessions", filters=SearchFilters(path_prefix="docs"))
    assert {h.path for h in under_docs} == {"docs/guide.md"}
    excluded = s.search("sessions", limit=50, filters=SearchFilters(exclude_globs=["*.md"]))
    assert excluded and all(not h.path.endswith(".md") for h in excluded)
    assert s.search("sessions", filters=SearchFilters(languages=["rust"])) == []


def test_model_mismatch_is_an_error_until_forced(sample_project, tiny_encoder, tmp_path, tiny_bert_factory):
    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.spec import resolve_model

    index = Index(sample_project)
    update_index(index, tiny_encoder)
    other = Encoder(resolve_model(tiny_bert_factory(tmp_path / "other", hidden=16, seed=1)))
    with pytest.raises(ModelMismatchError, match="--force"):
        update_index(index, other)
    with pytest.raises(ModelMismatchError):
        Searcher(index, other).search("retry", mode="semantic")
    rep = update_index(index, other, force=True)
    assert rep.files_indexed == 3 and index.manifest.model["dim"] == 16
    assert Searcher(index, other).search("retry", mode="semantic")


def test_readers_never_see_a_half_written_update(sample_project, tiny_encoder):
    index = Index(sample_project)
    update_index(index, tiny_encoder)
    errors: list[BaseException] = []
    counts: list[int] = []
    stop = threading.Event()

    def reader():
        r = Index(sample_project)
        s = Searcher(r, tiny_encoder)
        while not stop.is_set():
            try:
                hits = s.search("retry sessions password", mode="hybrid", limit=100)
                counts.append(len(hits))
                for h in hits:  # every hit's chunk row and vectors were committed together
                    assert h.text
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    t = threading.Thread(target=reader)
    t.start()
    try:
        target = sample_project / "app/models.py"
        for i in range(6):
            target.write_text(target.read_text() + f"\n\ndef extra_{i}(x):\n    return x + {i}\n")
            update_index(index, tiny_encoder)
    finally:
        time.sleep(0.2)
        stop.set()
        t.join()
    assert not errors, errors
    assert counts


def test_a_new_reader_opens_and_searches_while_a_write_is_in_progress(sample_project, tiny_encoder):
    """A compaction holds SQLite's write lock for its whole length; a search that opens a new
    connection meanwhile (a daemon thread, the CLI) must not wait for it."""
    index = Index(sample_project)
    update_index(index, tiny_encoder)
    index.conn.execute("BEGIN IMMEDIATE")  # what store._rewrite holds while it copies vectors
    got: list = []

    def search():
        got.append(Searcher(Index(sample_project), tiny_encoder).search("retry_with_backoff", mode="lexical"))

    t = threading.Thread(target=search)
    try:
        t.start()
        t.join(5)
        assert got and got[0][0].symbol == "retry_with_backoff", "the reader waited for the writer"
    finally:
        index.conn.execute("COMMIT")
        t.join()


def test_second_writer_waits_then_gives_up(sample_project, tiny_encoder):
    index = Index(sample_project)
    update_index(index, tiny_encoder)
    other = Index(sample_project)
    with index.write_lock(), pytest.raises(IndexBusyError), other.write_lock(wait_s=0.3):
        pass


def test_language_restriction_in_config(sample_project, tiny_encoder):
    cfg = Config()
    cfg.walk.languages = ["python"]
    index = Index(sample_project)
    rep = update_index(index, tiny_encoder, cfg)
    assert rep.files == 2
