"""Hybrid search encodes the query on the helper thread while BM25 runs: same results as
encoding in line, and the encoder's errors still reach the caller."""

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


def test_hybrid_encodes_beside_bm25_with_the_same_results(sample_project, tiny_encoder):
    index = Index(sample_project)
    update_index(index, tiny_encoder)
    s = Searcher(index, tiny_encoder)
    if (os.cpu_count() or 1) > 1:
        assert s._encode_beside("retry") is not None  # the helper thread exists
    queries = ["retry the request", "parse the config file", "session"]
    beside = [[(h.chunk_id, h.score) for h in s.search(q, mode="hybrid")] for q in queries]
    s._encode_beside = lambda q: None  # in line, as on one core
    inline = [[(h.chunk_id, h.score) for h in s.search(q, mode="hybrid")] for q in queries]
    assert beside == inline and any(beside)
    index.close()


def test_an_encoding_error_on_the_helper_thread_reaches_the_caller(sample_project, tiny_encoder):
    index = Index(sample_project)
    update_index(index, tiny_encoder)
    s = Searcher(index, Failing(tiny_encoder))
    with pytest.raises(RuntimeError, match="the model broke"):
        s.search("retry the request", mode="hybrid")
    assert s.search("retry the request", mode="lexical")  # BM25 alone is unaffected
    index.close()
