"""Hybrid search runs BM25 on the lexical thread while it encodes the query and runs the semantic
stage: the same results as everything in line (a single core), and errors on either side still
reach the caller."""

from __future__ import annotations

import os

import pytest

from supergrep.index.indexer import update_index
from supergrep.index.project import Index
from supergrep.index.search import Searcher


class Failing:
    """The tiny encoder, except that encoding a query raises (as a broken model would)."""

    def __init__(self, enc):
        self._enc = enc

    def __getattr__(self, name):
        return getattr(self._enc, name)

    def encode_queries(self, texts):
        raise RuntimeError("the model broke")


def test_hybrid_runs_bm25_beside_with_the_same_results(sample_project, tiny_encoder):
    index = Index(sample_project)
    update_index(index, tiny_encoder)
    s = Searcher(index, tiny_encoder)
    if (os.cpu_count() or 1) > 1:
        assert s._lexical_beside("retry", 10, None) is not None  # the lexical thread exists
    queries = ["retry the request", "parse the config file", "session"]

    def run():
        return [[(h.chunk_id, h.score) for h in s.search(q, mode="hybrid")] for q in queries]

    bm25_beside = run()
    s._lexical_beside = lambda *a: None  # everything in line, as on one core
    inline = run()
    assert bm25_beside == inline and any(inline)
    index.close()


def test_a_bm25_error_on_the_lexical_thread_reaches_the_caller_after_it_ends(sample_project, tiny_encoder,
                                                                            monkeypatch):
    """The caller gets BM25's error, and the search returns only once the lexical thread is done
    with its connection (closing the index right after must be safe)."""
    import threading

    index = Index(sample_project)
    update_index(index, tiny_encoder)
    s = Searcher(index, tiny_encoder)
    if s._lexical_beside("retry", 10, None) is None:
        pytest.skip("one core: no lexical thread")
    side, done = index.side_handle(), threading.Event()

    def broken(*a):
        done.wait(5)  # still running when the semantic stage fails
        raise RuntimeError("the FTS index broke")

    monkeypatch.setattr(side, "lexical", broken)
    s2 = Searcher(index, Failing(tiny_encoder))
    t = threading.Timer(0.2, done.set)
    t.start()
    with pytest.raises(RuntimeError, match="the model broke"):  # the semantic side's error first
        s2.search("retry the request", mode="hybrid")
    assert done.is_set()  # it waited for the lexical thread
    with pytest.raises(RuntimeError, match="the FTS index broke"):
        s.search("retry the request", mode="hybrid")
    index.close()


def test_an_encoding_error_reaches_the_caller(sample_project, tiny_encoder):
    index = Index(sample_project)
    update_index(index, tiny_encoder)
    s = Searcher(index, Failing(tiny_encoder))
    with pytest.raises(RuntimeError, match="the model broke"):
        s.search("retry the request", mode="hybrid")
    assert s.search("retry the request", mode="lexical")  # BM25 alone is unaffected
    index.close()
