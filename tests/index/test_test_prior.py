"""Hybrid search demotes test code unless the query asks for tests (search.test_penalty)."""

from __future__ import annotations

import dataclasses

from supergrep.config import SearchConfig
from supergrep.index.indexer import update_index
from supergrep.index.project import Index
from supergrep.index.search import Searcher

IMPL = '''def parse_duration(text):
    """Turn '5m' or '2h' into seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    return int(text[:-1]) * units[text[-1]]
'''
# A test module with a copy of the function (as vendored fixtures are): the two score almost alike,
# so which one comes first is decided by the prior.
TEST = "import pytest\n\n\n" + IMPL + """

def test_minutes():
    assert parse_duration("5m") == 300
"""


def _project(tmp_path):
    root = tmp_path / "proj"
    (root / "tests").mkdir(parents=True)
    (root / "durations.py").write_text(IMPL)
    (root / "tests" / "test_durations.py").write_text(TEST)
    (root / "tests.py").write_text("def is_even(n):\n    return n % 2 == 0\n")  # a module, not test code
    return root


def test_test_code_is_demoted_in_hybrid_unless_the_query_asks_for_tests(tmp_path, tiny_encoder):
    index = Index(_project(tmp_path))
    update_index(index, tiny_encoder)
    query = "parse duration minutes hours seconds"
    off = Searcher(index, tiny_encoder, dataclasses.replace(SearchConfig(), test_penalty=0.0))
    on = Searcher(index, tiny_encoder, SearchConfig())
    assert SearchConfig().test_penalty > 0  # on by default

    plain = {(h.path, h.symbol): h.score for h in off.search(query, mode="hybrid", limit=20)}
    demoted = on.search(query, mode="hybrid", limit=20)
    key = ("tests/test_durations.py", "parse_duration")
    assert abs(plain[key] - plain[("durations.py", "parse_duration")]) < 0.2  # close without the prior
    assert (demoted[0].path, demoted[0].symbol) == ("durations.py", "parse_duration")
    for h in demoted:  # exactly the penalty off test code, nothing else moved
        want = plain[(h.path, h.symbol)] - (0.2 if h.path.startswith("tests/") else 0.0)
        assert abs(h.score - want) < 1e-9, h

    # A query about tests gets tests; other modes and a module merely named tests.py are untouched.
    asked = {(h.path, h.symbol): h.score for h in on.search("the test for " + query, mode="hybrid", limit=20)}
    assert asked == {(h.path, h.symbol): h.score for h in off.search("the test for " + query, mode="hybrid", limit=20)}
    assert [h.path for h in on.search(query, mode="lexical")] == [h.path for h in off.search(query, mode="lexical")]
    assert [h.path for h in on.search(query, mode="semantic")] == [h.path for h in off.search(query, mode="semantic")]
    even = {h.path: h.score for h in on.search("is even", mode="hybrid", limit=5)}
    assert even["tests.py"] == {h.path: h.score for h in off.search("is even", mode="hybrid", limit=5)}["tests.py"]


def test_demoted_candidates_are_scored_exactly_on_a_compressed_index(tmp_path, tiny_encoder):
    """The prior is applied inside the exact-rescoring loop: whatever rises when test code drops
    carries its exact MaxSim, as every hybrid result on the compressed store must."""
    import numpy as np

    from supergrep.config import Config

    root = _project(tmp_path)
    for i in range(12):  # more implementations and tests, so the candidate lists are deep
        (root / f"mod{i}.py").write_text(f"def handler_{i}(event):\n    return event.get('k{i}')\n")
        (root / "tests" / f"test_mod{i}.py").write_text(
            f"from mod{i} import handler_{i}\n\n\ndef test_handler_{i}():\n    assert handler_{i}({{}}) is None\n")
    cfg = Config()
    cfg.index.store, cfg.index.centroids = "compressed", 8
    index = Index(root)
    update_index(index, tiny_encoder, cfg)
    assert index.store_kind == "compressed"
    cfg.search.rerank = 2
    searcher = Searcher(index, tiny_encoder, cfg.search)
    for query in ("handle an event", "parse duration minutes"):
        hits = searcher.search(query, mode="hybrid", limit=5)
        assert hits and not any(h.path.startswith("tests/") for h in hits[:1])
        exact = index.store.score(index.conn, tiny_encoder.encode_queries([query])[0], [h.chunk_id for h in hits])
        np.testing.assert_allclose([h.semantic_score for h in hits], exact, rtol=1e-5)


CLASSY = '''class DurationParser:
    """Parses durations like '5m' or '2h' into seconds, for timeouts, retries and caches."""

    def __init__(self, units=None):
        self.units = units or {"s": 1, "m": 60, "h": 3600}

    def parse(self, text):
        """Turn '5m' or '2h' into seconds."""
        return int(text[:-1]) * self.units[text[-1]]
'''


def test_class_chunks_are_demoted_in_hybrid_by_exactly_the_class_penalty(tmp_path, tiny_encoder):
    root = tmp_path / "proj"
    (root / "tests").mkdir(parents=True)
    (root / "durations.py").write_text(CLASSY)
    (root / "tests" / "test_parser.py").write_text(CLASSY.replace("DurationParser", "FakeParser"))
    index = Index(root)
    update_index(index, tiny_encoder)
    kinds = dict(index.conn.execute("SELECT symbol, kind FROM chunks"))
    assert kinds["DurationParser"] == "class"  # the header is a chunk of its own
    assert kinds["DurationParser.parse"] == "method"
    assert SearchConfig().class_penalty > 0  # on by default

    query = "parse durations into seconds"
    off = Searcher(index, tiny_encoder, dataclasses.replace(SearchConfig(), class_penalty=0.0))
    on = Searcher(index, tiny_encoder, SearchConfig())
    plain = {(h.path, h.symbol): h.score for h in off.search(query, mode="hybrid", limit=20)}
    got = on.search(query, mode="hybrid", limit=20)
    assert len(got) == len(plain) >= 4
    for h in got:  # the class penalty off classes, added to the test penalty in test code
        want = plain[(h.path, h.symbol)] - (0.1 if h.kind == "class" else 0.0)
        assert abs(h.score - want) < 1e-9, h
    both = [h for h in got if h.kind == "class" and h.path.startswith("tests/")]
    none = {(h.path, h.symbol): h.score for h in Searcher(
        index, tiny_encoder, dataclasses.replace(SearchConfig(), class_penalty=0.0, test_penalty=0.0)).search(
        query, mode="hybrid", limit=20)}
    assert both and abs(both[0].score - (none[(both[0].path, both[0].symbol)] - 0.3)) < 1e-9
    # Semantic and lexical rankings are the model's and BM25's own.
    for mode in ("semantic", "lexical"):
        assert [(h.path, h.symbol, h.score) for h in on.search(query, mode=mode, limit=20)] == \
            [(h.path, h.symbol, h.score) for h in off.search(query, mode=mode, limit=20)]
