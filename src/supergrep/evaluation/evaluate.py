"""Run a query set against its corpora, per model and per mode, and summarise the ranks."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from supergrep.config import Config, supergrep_home
from supergrep.encoder.encoder import Encoder
from supergrep.errors import UsageError
from supergrep.evaluation.metrics import first_hit_rank, summarize
from supergrep.evaluation.queries import Query
from supergrep.index.indexer import update_index
from supergrep.index.project import Index
from supergrep.index.search import Searcher

log = logging.getLogger(__name__)

TOP_K = 10


@dataclass
class QueryResult:
    id: str
    corpus: str
    kind: str
    query: str
    model: str
    mode: str
    rank: int | None
    top: list[dict] = field(default_factory=list)  # the first 3 results: path, start_line, symbol


def eval_index_dir(corpus: str, root: Path, fingerprint: str, vector_dtype: str = "float16") -> Path:
    """One index per (corpus directory, model, vector kind), so comparing models never rebuilds
    the other's index and two copies of a corpus (two checkouts) never share one."""
    where = hashlib.sha1(str(Path(root).resolve()).encode()).hexdigest()[:8]
    kind = "" if vector_dtype == "float16" else f"-{vector_dtype}"
    return supergrep_home() / "eval-indexes" / f"{corpus}-{where}-{fingerprint[:12]}{kind}"


def run_eval(queries: list[Query], corpora: dict[str, Path], encoders: list[Callable[[], Encoder]],
             modes: list[str], cfg: Config | None = None,
             on_index: Callable[[str, str], None] | None = None, auto: bool = False,
             labels: list[str] | None = None) -> list[QueryResult]:
    """Index each corpus with each model (reusing unchanged indexes) and run every query.

    Args:
        queries: The query set; every query's ``corpus`` must be in ``corpora``.
        corpora: corpus name -> corpus root directory.
        encoders: Factories, one per model compared.
        modes: Search modes to run ("semantic", "lexical", "hybrid").
        cfg: Walk/chunk/search settings for indexing and searching.
        on_index: Called with (corpus, model name) before each corpus is (re)indexed.
        auto: Search with ``auto=True`` (query-style dependent fusion weights).
        labels: The name each model's results carry (default: the encoder's name); two models
            must not share one, or their results would be pooled into one row.
    """
    cfg = cfg or Config()
    missing = sorted({q.corpus for q in queries} - set(corpora))
    if missing:
        raise UsageError(f"queries refer to corpora with no --corpus NAME=DIR: {', '.join(missing)}")
    results: list[QueryResult] = []
    if labels is not None and len(labels) != len(encoders):
        raise ValueError("labels must name every encoder")
    for i, make in enumerate(encoders):
        encoder = make()
        label = labels[i] if labels else encoder.name
        for name, root in corpora.items():
            todo = [q for q in queries if q.corpus == name]
            if not todo:
                continue
            if on_index:
                on_index(name, label)
            index = Index(root, eval_index_dir(name, root, encoder.fingerprint, cfg.encode.vector_dtype),
                          cache_bytes=cfg.search.cache_bytes or 2 << 30)
            update_index(index, encoder, cfg)
            searcher = Searcher(index, encoder, cfg.search)
            for mode in modes:
                for q in todo:
                    hits = searcher.search(q.query, mode=mode, limit=TOP_K, auto=auto)
                    rank = first_hit_rank([(h.path, h.start_line) for h in hits], q.targets)
                    results.append(QueryResult(
                        q.id, q.corpus, q.kind, q.query, label, mode, rank,
                        [{"path": h.path, "start_line": h.start_line, "symbol": h.symbol} for h in hits[:3]],
                    ))
            index.close()
    return results


def summary_rows(results: list[QueryResult]) -> list[dict]:
    """One row per (model, mode): overall metrics and P@1 / MRR per query kind and corpus."""
    rows = []
    keys = list(dict.fromkeys((r.model, r.mode) for r in results))
    for model, mode in keys:
        rs = [r for r in results if r.model == model and r.mode == mode]
        row = {"model": model, "mode": mode, **summarize([r.rank for r in rs], TOP_K)}
        for group, attr in (("kind", "kind"), ("corpus", "corpus")):
            for value in sorted({getattr(r, attr) for r in rs}):
                sub = summarize([r.rank for r in rs if getattr(r, attr) == value], TOP_K)
                row[f"{group}:{value}"] = sub
        rows.append(row)
    return rows


def markdown_table(rows: list[dict]) -> str:
    """The seeds' "model x mode" table, with per-kind and per-corpus P@1 columns."""
    kinds = sorted({k.split(":", 1)[1] for r in rows for k in r if k.startswith("kind:")})
    corpora = sorted({k.split(":", 1)[1] for r in rows for k in r if k.startswith("corpus:")})
    head = ["model", "mode", "n", "P@1", "MRR@10", "R@10", "nDCG@10"]
    head += [f"{k} P@1" for k in kinds] + [f"{c} P@1" for c in corpora]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], r["mode"], str(r["n"])]
        cells += [f"{r[m]:.3f}" for m in ("p@1", "mrr@10", "r@10", "ndcg@10")]
        cells += [f"{r[f'kind:{k}']['p@1']:.3f}" if f"kind:{k}" in r else "-" for k in kinds]
        cells += [f"{r[f'corpus:{c}']['p@1']:.3f}" if f"corpus:{c}" in r else "-" for c in corpora]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
