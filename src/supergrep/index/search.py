"""Search an index: semantic (exact MaxSim), lexical (BM25) or hybrid (fused)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from supergrep.config import SearchConfig
from supergrep.errors import UsageError
from supergrep.index.project import ChunkRow, Index
from supergrep.scoring.fusion import weighted_rrf, weighted_scores

if TYPE_CHECKING:
    from supergrep.encoder.encoder import Encoder

MODES = ("semantic", "lexical", "hybrid")


@dataclass
class Hit:
    """One search result (the ``--json`` result object, plus ranking details)."""

    path: str
    start_line: int
    end_line: int
    symbol: str
    kind: str
    language: str
    score: float
    text: str
    chunk_id: int
    semantic_score: float | None = None
    lexical_score: float | None = None


@dataclass
class SearchFilters:
    languages: list[str] = field(default_factory=list)
    path_prefix: str | None = None
    exclude_globs: list[str] = field(default_factory=list)


_CODE_HINT = re.compile(r"[A-Za-z0-9]_[A-Za-z0-9]|[a-z][A-Z]|\(|\)|::|->|\.[A-Za-z_]|[{}\[\];=<>]")


def query_style(query: str) -> str:
    """"code" for identifier- or code-like queries, "natural" for prose (``--auto``).

    >>> query_style("parse_http_response")
    'code'
    >>> query_style("getUserName")
    'code'
    >>> query_style("split a list into chunks of equal size")
    'natural'
    """
    words = query.split()
    if _CODE_HINT.search(query) or len(words) <= 2:
        return "code"
    return "natural"


class Searcher:
    """Runs queries against one index.

    Args:
        index: An existing index.
        encoder: The model the index was built with, or a zero-argument factory (called on the
            first semantic query, so lexical searches never load a model).
        cfg: Fusion and ranking settings.
    """

    def __init__(self, index: Index, encoder: Encoder | Callable[[], Encoder] | None, cfg: SearchConfig | None = None):
        self.index = index
        self._encoder = encoder
        self._checked = False
        self.cfg = cfg or SearchConfig()

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            raise UsageError("semantic search needs a model")
        if callable(self._encoder) and not hasattr(self._encoder, "encode_queries"):
            self._encoder = self._encoder()
        if not self._checked:
            self.index.check_model(self._encoder.fingerprint, self._encoder.name)
            self._checked = True
        return self._encoder  # type: ignore[return-value]

    def semantic(self, query: str, k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        q = self.encoder.encode_queries([query])[0]  # (q_tokens, dim)
        return self.index.store.search(self.index.conn, q, k, allowed)

    def search(self, query: str, mode: str | None = None, limit: int | None = None,
               filters: SearchFilters | None = None, auto: bool = False) -> list[Hit]:
        """Top results for ``query``, best first.

        Args:
            mode: "semantic", "lexical" or "hybrid" (default from the config).
            limit: Number of results (default from the config).
            filters: Language, sub-path and exclude-glob filters.
            auto: Pick the fusion weights from the query's style (code-like vs prose).
        """
        cfg = self.cfg
        mode = mode or cfg.mode
        if mode not in MODES:
            raise UsageError(f"unknown mode '{mode}'; choose one of {', '.join(MODES)}")
        limit = limit or cfg.limit
        if not query.strip():
            raise UsageError("the query is empty; pass some words to search for")
        f = filters or SearchFilters()
        allowed = self.index.filter_ids(f.languages, f.path_prefix, f.exclude_globs)
        if allowed is not None and len(allowed) == 0:
            return []

        sem_w, lex_w = cfg.semantic_weight, cfg.lexical_weight
        if auto and mode == "hybrid":
            if query_style(query) == "code":
                lex_w = max(lex_w, sem_w)
        sem: dict[int, float] = {}
        lex: dict[int, float] = {}
        if mode in ("semantic", "hybrid"):
            k = limit if mode == "semantic" else max(limit, cfg.lexical_candidates)
            ids, scores = self.semantic(query, k, allowed)
            sem = dict(zip(ids.tolist(), scores.tolist()))
        if mode in ("lexical", "hybrid"):
            k = limit if mode == "lexical" else cfg.lexical_candidates
            ids, scores = self.index.lexical(query, k, allowed)
            lex = dict(zip(ids.tolist(), scores.tolist()))

        if mode == "semantic":
            fused = sem
        elif mode == "lexical":
            fused = lex
        elif cfg.fusion == "rrf":
            fused = weighted_rrf([list(sem), list(lex)], [sem_w, lex_w], cfg.rrf_k)
        elif cfg.fusion == "score":
            missing = [d for d in lex if d not in sem]
            if missing:
                q = self.encoder.encode_queries([query])[0]
                extra = self.index.store.score(self.index.conn, q, missing)
                sem.update({d: float(s) for d, s in zip(missing, extra, strict=True) if np.isfinite(s)})
            fused = weighted_scores([sem, lex], [sem_w, lex_w])
        else:
            raise UsageError(f"unknown fusion '{cfg.fusion}'; use rrf or score")

        best = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        rows = self.index.chunks([d for d, _ in best])
        hits = []
        for d, score in best:
            row: ChunkRow | None = rows.get(d)
            if row is None:  # deleted between the scoring and the lookup (a concurrent update)
                continue
            hits.append(Hit(row.path, row.start_line, row.end_line, row.symbol, row.kind, row.language,
                            float(score), row.text, d, sem.get(d), lex.get(d)))
        return hits
