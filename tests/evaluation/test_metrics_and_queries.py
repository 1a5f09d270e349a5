"""The hit rule, the metrics and query-file validation."""

from __future__ import annotations

import json

import pytest

from supergrep.corpus.chunk import chunk_source, split_chunk
from supergrep.errors import InputError
from supergrep.evaluation.metrics import Target, first_hit_rank, is_hit, summarize
from supergrep.evaluation.queries import load_queries

SOURCE = '''class Cache:
    """A cache."""

    size = 3

    @property
    @cached
    def hits(self):
        return self._hits

    def get(self, key):
        return self.data[key]
'''


def test_hit_rule_on_real_chunks():
    chunks = {c.symbol: c for c in chunk_source("pkg/cache.py", SOURCE)}
    # ast-style targets: decorators excluded from the span
    hits_target = Target("pkg/cache.py", "Cache.hits", 8, 9)
    get_target = Target("pkg/cache.py", "Cache.get", 11, 12)
    # the enclosing class chunk is a miss for a method
    cls = chunks["Cache"]
    assert cls.start_line == 1 and not is_hit(cls.path, cls.start_line, get_target)
    # a decorator-inclusive chunk (starts 2 lines above the def) is a hit
    deco = chunks["Cache.hits"]
    assert deco.start_line == 6 and is_hit(deco.path, deco.start_line, hits_target)
    # every piece of a split target is a hit
    pieces = split_chunk(chunks["Cache.get"], 2, overlap_lines=0)
    assert len(pieces) == 2 and all(is_hit(p.path, p.start_line, get_target) for p in pieces)
    # same lines, other file: miss; starting 4 lines early: miss
    assert not is_hit("other/cache.py", 11, get_target)
    assert not is_hit("pkg/cache.py", 7, get_target)


def test_first_hit_rank_and_summary():
    t = [Target("a.py", "f", 10, 20), Target("b.py", "g", 5, 6)]
    assert first_hit_rank([("c.py", 1), ("b.py", 5), ("a.py", 10)], t) == 2
    assert first_hit_rank([("c.py", 1)], t) is None
    s = summarize([1, 2, None, 11])
    assert s["p@1"] == 0.25 and s["r@10"] == 0.5
    assert s["mrr@10"] == pytest.approx((1 + 0.5) / 4)


def write(tmp_path, lines):
    p = tmp_path / "q.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


GOOD = {"id": "q1", "corpus": "c", "query": "find x", "kind": "semantic",
        "targets": [{"path": "a.py", "symbol": "f", "start_line": 1, "end_line": 3}]}


def test_valid_file_loads(tmp_path):
    qs = load_queries(write(tmp_path, [json.dumps(GOOD), "", json.dumps({**GOOD, "id": "q2"})]))
    assert [q.id for q in qs] == ["q1", "q2"] and qs[0].targets[0].end_line == 3


@pytest.mark.parametrize(
    "bad, message",
    [
        ("{not json", "q.jsonl:2: invalid JSON"),
        (json.dumps([1, 2]), "q.jsonl:2: each line must be a JSON object"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "targets"}), "q.jsonl:2: missing field(s) targets"),
        (json.dumps({**GOOD, "id": "q9", "targets": []}), "q.jsonl:2: 'targets' must be a non-empty list"),
        (json.dumps({**GOOD, "id": "q9", "targets": [{"path": "a.py", "start_line": "x", "end_line": 2}]}),
         "q.jsonl:2: target start_line/end_line must be integers"),
        (json.dumps({**GOOD, "id": "q9", "targets": [{"path": "a.py", "start_line": 5, "end_line": 2}]}),
         "1 <= start_line <= end_line"),
        (json.dumps({**GOOD, "id": "q9", "query": "  "}), "'query' must be a non-empty string"),
        (json.dumps(GOOD), "q.jsonl:2: duplicate query id 'q1'"),
    ],
)
def test_bad_lines_name_the_line(tmp_path, bad, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_queries(write(tmp_path, [json.dumps(GOOD), bad]))


def test_missing_and_non_utf8_files(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_queries(tmp_path / "nope.jsonl")
    p = tmp_path / "latin.jsonl"
    p.write_bytes(b'{"id": "caf\xe9"}\n')
    with pytest.raises(InputError, match="not UTF-8"):
        load_queries(p)
