"""One result per definition: a function split into parts is shown once (search.group_parts)."""

from __future__ import annotations

import dataclasses

import numpy as np

from supergrep.config import Config, SearchConfig
from supergrep.index.indexer import update_index
from supergrep.index.project import Index
from supergrep.index.search import Searcher

# 150 lines: the chunker splits it into parts (60 lines at most each), all named `reconcile_ledger`.
LONG = "def reconcile_ledger(entries, balance):\n" + "".join(
    f"    balance = balance + entries[{i}] * {i % 7}  # reconcile ledger entry {i}\n" for i in range(150)
) + "    return balance\n"
SMALL = "".join(f"def ledger_helper_{i}(entries):\n    return sum(entries) + {i}  # ledger\n\n\n" for i in range(8))


def _index(tmp_path, tiny_encoder, cfg: Config | None = None) -> Index:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "ledger.py").write_text(LONG)
    (root / "helpers.py").write_text(SMALL)
    (root / "notes.py").write_text("# reconcile ledger entries\nLEDGER = 1\n")
    index = Index(root)
    update_index(index, tiny_encoder, cfg)
    return index


def test_a_split_definition_is_one_result_in_every_mode(tmp_path, tiny_encoder):
    index = _index(tmp_path, tiny_encoder)
    parts = index.conn.execute("SELECT COUNT(*) FROM chunks WHERE symbol = 'reconcile_ledger'").fetchone()[0]
    assert parts >= 3
    grouped = Searcher(index, tiny_encoder, SearchConfig())
    plain = Searcher(index, tiny_encoder, dataclasses.replace(SearchConfig(), group_parts=False))
    assert SearchConfig().group_parts
    for mode in ("semantic", "lexical", "hybrid"):
        before = plain.search("reconcile ledger entries balance", mode=mode, limit=6)
        after = grouped.search("reconcile ledger entries balance", mode=mode, limit=6)
        assert sum(h.symbol == "reconcile_ledger" for h in before) >= 2, mode  # the parts crowd the list
        assert sum(h.symbol == "reconcile_ledger" for h in after) == 1, mode
        assert len(after) == 6, mode  # the freed places go to other definitions
        # The kept part is the best-scoring one, and the order is the ungrouped order minus repeats.
        assert (after[0].chunk_id, after[0].score) == (before[0].chunk_id, before[0].score), mode
        seen, expected = set(), []
        for h in plain.search("reconcile ledger entries balance", mode=mode, limit=30):
            key = (h.path, h.symbol) if h.symbol else h.chunk_id
            if key not in seen:
                seen.add(key)
                expected.append(h.chunk_id)
        assert [h.chunk_id for h in after] == expected[:6], mode
    # Unsplit chunks are never grouped: two definitions sharing a name (overloads, a property's
    # getter and setter) both stay, as do module-level chunks (no symbol).
    for where in ("symbol = ''", "part = 0"):
        ids = [(d, 1.0) for d, in index.conn.execute(f"SELECT id FROM chunks WHERE {where} ORDER BY id")]
        assert ids and grouped._one_per_definition(ids, 50, index.chunk_meta([d for d, _ in ids]))[0] == ids


def test_definitions_that_share_a_name_are_not_merged(tmp_path, tiny_encoder):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "shapes.py").write_text(
        "class Box:\n"
        "    @property\n    def width(self):\n        return self._width\n\n"
        "    @width.setter\n    def width(self, value):\n        self._width = max(0, value)\n")
    index = Index(root)
    update_index(index, tiny_encoder)
    assert index.conn.execute("SELECT COUNT(*) FROM chunks WHERE symbol = 'Box.width'").fetchone()[0] == 2
    hits = Searcher(index, tiny_encoder).search("box width", mode="lexical", limit=10)
    assert sum(h.symbol == "Box.width" for h in hits) == 2


def test_grouped_hybrid_results_are_scored_exactly_on_a_compressed_index(tmp_path, tiny_encoder):
    """Grouping reaches below the top ``limit`` of the fused list; what it reaches must carry exact
    MaxSim like every hybrid result on the compressed store."""
    cfg = Config()
    cfg.index.store, cfg.index.centroids = "compressed", 8
    root = tmp_path / "proj"
    root.mkdir()
    (root / "ledger.py").write_text(LONG)
    for i in range(60):  # deep candidate lists, so most semantic scores start as estimates
        (root / f"m{i}.py").write_text(f"def ledger_{i}(entries):\n    return entries[{i}] + {i}  # balance\n")
    index = Index(root)
    update_index(index, tiny_encoder, cfg)
    assert index.store_kind == "compressed"
    cfg.search.rerank = 2
    searcher = Searcher(index, tiny_encoder, cfg.search)
    depths, used = [], []
    fuse, group = searcher._fuse_exactly, searcher._one_per_definition
    searcher._fuse_exactly = lambda *a: (depths.append(a[7]), fuse(*a))[1]  # a[7]: the depth scored exactly
    searcher._one_per_definition = lambda ranked, limit, meta: (lambda r: (used.append(r[1]), r)[1])(group(ranked, limit, meta))
    query = "reconcile ledger entries balance"
    hits = searcher.search(query, mode="hybrid", limit=3)
    assert used[-1] > 3 and depths[-1] >= used[-1]  # the parts pushed the third result deeper; scored that deep
    assert len(hits) == 3 and sum(h.symbol == "reconcile_ledger" for h in hits) == 1
    exact = index.store.score(index.conn, tiny_encoder.encode_queries([query])[0], [h.chunk_id for h in hits])
    np.testing.assert_allclose([h.semantic_score for h in hits], exact, rtol=1e-5)
