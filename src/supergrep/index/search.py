"""Search an index: semantic (exact MaxSim), lexical (BM25) or hybrid (fused)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from supergrep.config import SearchConfig
from supergrep.errors import UsageError
from supergrep.index.project import ChunkRow, Index
from supergrep.scoring.fusion import weighted_rrf

if TYPE_CHECKING:
    from supergrep.encoder.encoder import Encoder

MODES = ("semantic", "lexical", "hybrid")
_TEST_WORDS = re.compile(r"\b(?:tests?|testing|unittests?|pytest|fixtures?|specs?|mocks?|conftest)\b", re.IGNORECASE)


@functools.lru_cache(maxsize=1 << 16)  # hybrid asks for every candidate's path, per query (~1 ms)
def is_test_code(path: str) -> bool:
    """Test code by its path, as ``corpus.mine.is_test_path`` decides, except a module named just
    ``tests``/``test``: that name is ambiguous (Jinja's ``jinja2/tests.py`` holds template tests,
    a Django app's ``tests.py`` unit tests), and a prior must not hide real code.

    >>> [is_test_code(p) for p in ("pkg/tests/x.py", "lib/test_io.py", "web/a.spec.ts",
    ...  "conftest.py", "jinja2/tests.py", "lib/contest.py")]
    [True, True, True, True, False, False]
    """
    from supergrep.corpus.mine import in_test_dir, is_test_file

    if in_test_dir(path):
        return True
    return path.rsplit("/", 1)[-1].rsplit(".", 1)[0] not in ("test", "tests") and is_test_file(path)


def _asks_for_tests(query: str) -> bool:
    """Whether the query itself is about tests (then test code is what it wants).

    >>> _asks_for_tests("the test that checks byte order"), _asks_for_tests("convert byte order")
    (True, False)
    """
    return bool(_TEST_WORDS.search(query))


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


# A token that only code has: snake_case, camelCase, a dotted or :: path, or a call.
_CODE_TOKEN = re.compile(r"[A-Za-z0-9]_[A-Za-z0-9]|[a-z][A-Z]|\w\.\w|::|\w\(|->")


def query_style(query: str) -> str:
    """"code" for identifier-like queries, "natural" for prose (``--auto``).

    Code: at most three words with a code-only token among them, or code-only tokens in at
    least half of the words. A prose question that quotes one identifier stays "natural".

    >>> query_style("parse_http_response")
    'code'
    >>> query_style("getUserName args")
    'code'
    >>> query_style("split a list into chunks of equal size")
    'natural'
    >>> query_style("render a dict as HTML attributes like key=value, skipping None")
    'natural'
    """
    words = query.split()
    codey = sum(bool(_CODE_TOKEN.search(w)) for w in words)
    if codey and (len(words) <= 3 or codey * 2 >= len(words)):
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
        index.configure(search_cfg=self.cfg)

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            raise UsageError("semantic search needs a model")
        if callable(self._encoder) and not hasattr(self._encoder, "encode_queries"):
            self._encoder = self._encoder()
        if not self._checked:
            enc = self._encoder
            self.index.check_model(enc.fingerprint, enc.name, getattr(enc, "compatible_fingerprints", ()))
            self._checked = True
        return self._encoder  # type: ignore[return-value]

    def _fuse_exactly(self, q: np.ndarray, sem: dict[int, float], lex: dict[int, float], exact: set[int],
                      margin: float, sem_w: float, lex_w: float, limit: int,
                      penalty: dict[int, float] | None = None) -> dict[int, float]:
        """Score fusion where some semantic scores are estimates (``margin``: how far one may be
        off): candidates are scored exactly until the fusion is the one exact scores would give
        - the lowest semantic score (min-max scaling's floor: the minimum of noisy estimates is
        biased low) and every candidate whose estimate, give or take the margin, could reach the
        top ``limit``. Usually a few dozen chunks in one or two rounds. ``penalty`` (chunk id ->
        amount, the ranking priors) is taken off inside the loop, so what it lets rise is scored
        exactly too."""
        store, conn = self.index.store, self.index.conn
        # The loop over arrays (one slot per candidate: sem's, then BM25's alone) with the float
        # operations of ``scoring.fusion.score_fusion`` (the definition) in its order, so the
        # result equals a loop over dicts bit for bit (~1.7 ms of Python a hybrid query on
        # stdlib, ~0.2 ms this way; tests/index/test_fuse_exactly.py).
        ids = list(sem) + [d for d in lex if d not in sem]
        n = len(ids)
        s = np.zeros(n, np.float64)
        s[: len(sem)] = list(sem.values())
        in_sem = np.arange(n) < len(sem)
        done = np.fromiter((d in exact for d in ids), bool, n)
        has_lex = np.fromiter((d in lex for d in ids), bool, n)
        top = max(lex.values(), default=0.0)
        lex_part = None
        if top > 0:
            lexv = np.fromiter((lex.get(d, 0.0) for d in ids), np.float64, n)
            lex_part = (lex_w * lexv[has_lex]) / top
        pen = np.fromiter((penalty.get(d, 0.0) for d in ids), np.float64, n) if penalty else None
        ids_arr = np.asarray(ids, np.int64)

        def fuse() -> tuple[np.ndarray, np.ndarray]:
            """(fused score of every slot, which slots are candidates: in sem or BM25's)."""
            out = np.zeros(n, np.float64)
            if in_sem.any():
                v = s[in_sem]
                lo, hi = v.min(), v.max()
                out[in_sem] = sem_w * ((v - lo) / (hi - lo)) if hi != lo else sem_w * 1.0
            if lex_part is not None:
                out[has_lex] = out[has_lex] + lex_part
            if pen is not None:
                out -= pen
            return out, in_sem | has_lex

        def as_dict(out: np.ndarray, live: np.ndarray) -> dict[int, float]:
            return dict(zip(ids_arr[live].tolist(), out[live].tolist(), strict=True))

        for _ in range(16):
            out, live = fuse()
            n_sem = int(in_sem.sum())
            if len(exact) >= n_sem or not n_sem:
                return as_dict(out, live)
            sem_slots = np.flatnonzero(in_sem)  # sem's order
            low = sem_slots[np.argsort(s[sem_slots], kind="stable")[:16]]
            if not done[low[0]]:
                todo = low[~done[low]]
            else:
                hi, lo = s[sem_slots].max(), s[low[0]]
                slack = sem_w * 2 * margin / (hi - lo) if hi > lo else float("inf")
                vals = out[live]
                kth = min(limit, len(vals))
                bar = -np.partition(-vals, kth - 1)[kth - 1]  # the limit-th best fused score
                todo = sem_slots[~done[sem_slots] & (out[sem_slots] + slack >= bar)]
            if not len(todo):
                return as_dict(out, live)
            todo_ids = ids_arr[todo].tolist()
            got = store.score(conn, q, todo_ids)
            for i, d, v in zip(todo.tolist(), todo_ids, got.tolist(), strict=True):
                exact.add(d)
                done[i] = True
                if np.isfinite(v):
                    sem[d] = s[i] = float(v)
                else:
                    sem.pop(d)
                    in_sem[i] = False
        return as_dict(*fuse())

    def _query_vectors(self, query: str) -> np.ndarray:
        return self.encoder.encode_queries([query])[0]  # (q_tokens, dim)

    def _lexical_beside(self, query: str, k: int, allowed: np.ndarray | None):
        """Hybrid: BM25 on the lexical thread, through its own handle on the index (one SQLite
        connection must not serve two threads at once), while this thread encodes the query and
        runs the semantic stage, which needs BM25's hits only at its end. None on a single core.
        Two threads (two concurrent daemon searches each get one), not the store's helper thread:
        the semantic stage queues work there and waits for it. In-process, stdlib project, BM25
        by FTS5: BM25 + the semantic stage 22.7-24.3 ms one after the other, 16.7-19.9 ms side by
        side (docs/benchmarks.md, "Fused C kernels"); from the daemon's in-memory catalog BM25
        is ~1 ms either way."""
        from supergrep.index.compressed import thread_pool

        pool = thread_pool("sg-lexical", 2)
        if pool is None:
            return None
        return pool.submit(self.index.side_handle().lexical, query, k, allowed)

    def _priors(self, meta: dict[int, tuple[str, str, str, int]], query: str) -> dict[int, float]:
        """What hybrid fusion takes off each chunk of ``meta`` (``Index.chunk_meta``) before
        ranking (chunk id -> amount).

        - ``test_penalty`` for test code, unless the query names tests: a behaviour query usually
          wants the implementation, and a test that exercises it shares its words and meaning.
        - ``class_penalty`` for class chunks: a class's header and docstring (its methods are
          chunks of their own) describe everything the class does, so they match a description
          of one behaviour better than the method that implements it (docs/quality.md)."""
        cfg = self.cfg
        test = cfg.test_penalty if cfg.test_penalty > 0 and not _asks_for_tests(query) else 0.0
        out: dict[int, float] = {}
        for d, (path, kind, _symbol, _part) in meta.items():
            amount = (test if test and is_test_code(path) else 0.0) + (cfg.class_penalty if kind == "class" else 0.0)
            if amount:
                out[d] = amount
        return out

    def _one_per_definition(self, ranked: list[tuple[int, float]], limit: int,
                            meta: dict[int, tuple[str, str, str, int]]) -> tuple[list[tuple[int, float]], int]:
        """The first ``limit`` of ``ranked`` (best first) with one chunk per definition: a function
        split into parts (``part`` >= 1) is shown once, by its best part, instead of filling the
        list with itself. Unsplit chunks are never grouped, so overloads and a property's getter
        and setter, which share a symbol, stay apart; module-level chunks have no symbol. Also
        returns how deep into ``ranked`` that went. ``meta``: ``Index.chunk_meta`` of the ranked ids."""
        if not self.cfg.group_parts:
            return ranked[:limit], min(limit, len(ranked))
        out: list[tuple[int, float]] = []
        seen: set = set()
        for i, (d, score) in enumerate(ranked, start=1):
            path, kind, symbol, part = meta.get(d, ("", "", "", 0))
            key = (path, symbol) if part and symbol and kind != "module" else d
            if key not in seen:
                seen.add(key)
                out.append((d, score))
                if len(out) == limit:
                    return out, i
        return out, len(ranked)

    def search(self, query: str, mode: str | None = None, limit: int | None = None,
               filters: SearchFilters | None = None, auto: bool = False) -> list[Hit]:
        """Top results for ``query``, best first.

        Args:
            mode: "semantic", "lexical" or "hybrid" (default from the config).
            limit: Number of results (default from the config).
            filters: Language, sub-path and exclude-glob filters.
            auto: Pick the fusion weights from the query's style (code-like vs prose).
        """
        beside: list = []  # work on other threads: finished before this returns or raises, so
        try:  # closing the index afterwards never pulls a connection from under it
            return self._search(query, mode, limit, filters, auto, beside)
        finally:
            if beside:
                from concurrent.futures import wait

                wait(beside)

    def _search(self, query: str, mode: str | None, limit: int | None, filters: SearchFilters | None,
                auto: bool, beside: list) -> list[Hit]:
        cfg = self.cfg
        mode = mode or cfg.mode
        if mode not in MODES:
            raise UsageError(f"unknown mode '{mode}'; choose one of {', '.join(MODES)}")
        if cfg.fusion not in ("score", "rrf"):
            raise UsageError(f"unknown fusion '{cfg.fusion}'; use score or rrf")
        limit = limit or cfg.limit
        if not query.strip():
            raise UsageError("the query is empty; pass some words to search for")
        f = filters or SearchFilters()
        allowed = self.index.filter_ids(f.languages, f.path_prefix, f.exclude_globs)
        if allowed is not None and len(allowed) == 0:
            return []

        sem_w, lex_w = cfg.semantic_weight, cfg.lexical_weight
        if auto and mode == "hybrid" and query_style(query) == "code":
            lex_w = max(lex_w, sem_w)  # identifiers: exact words matter as much as meaning
        store, conn = self.index.store, self.index.conn
        sem: dict[int, float] = {}
        lex: dict[int, float] = {}
        deep = 3 * limit if cfg.group_parts else limit  # grouping a definition's parts may drop some
        lex_job = self._lexical_beside(query, max(cfg.candidates, deep), allowed) if mode == "hybrid" else None
        if lex_job is not None:
            beside.append(lex_job)
        if mode == "lexical" or (mode == "hybrid" and lex_job is None):
            ids, scores = self.index.lexical(query, deep if mode == "lexical" else max(cfg.candidates, deep), allowed)
            lex = dict(zip(ids.tolist(), scores.tolist(), strict=True))

        def lexical_hits() -> dict[int, float]:
            nonlocal lex_job, lex
            if lex_job is not None:
                ids, scores = lex_job.result()
                lex, lex_job = dict(zip(ids.tolist(), scores.tolist(), strict=True)), None
            return lex

        exact: set[int] = set()
        q = None
        if mode == "semantic":
            q = self._query_vectors(query)
            ids, scores = store.search(conn, q, deep, allowed, exact=cfg.exact)
            sem = dict(zip(ids.tolist(), scores.tolist(), strict=True))
        elif mode == "hybrid":
            q = self._query_vectors(query)
            # Score fusion needs a semantic score for every BM25 candidate too; RRF only ranks.
            also = (lambda: list(lexical_hits())) if cfg.fusion == "score" else []
            ids, scores, is_exact, margin = store.search_deep(conn, q, max(limit, cfg.candidates), allowed, also,
                                                              exact=cfg.exact)
            sem = dict(zip(ids.tolist(), scores.tolist(), strict=True))
            exact = set(ids[is_exact].tolist())
            lex = lexical_hits()

        score_fused = mode == "hybrid" and cfg.fusion != "rrf"
        # path, kind, symbol and part of every candidate, read once for the priors and the grouping
        meta = self.index.chunk_meta(set(sem) | set(lex)) if cfg.group_parts or score_fused else {}

        def ranked(fused: dict[int, float]) -> list[tuple[int, float]]:
            """Best first, ties by chunk id (a lexsort: ~0.3 ms of Python key calls otherwise)."""
            ids = np.fromiter(fused.keys(), np.int64, len(fused))
            scores = np.fromiter(fused.values(), np.float64, len(fused))
            order = np.lexsort((ids, -scores))
            return list(zip(ids[order].tolist(), scores[order].tolist(), strict=True))

        if mode == "semantic":
            best, _ = self._one_per_definition(ranked(sem), limit, meta)
        elif mode == "lexical":
            best, _ = self._one_per_definition(ranked(lex), limit, meta)
        elif not score_fused:
            fused = weighted_rrf([sorted(sem, key=lambda d: (-sem[d], d)), list(lex)], [sem_w, lex_w], cfg.rrf_k)
            best, _ = self._one_per_definition(ranked(fused), limit, meta)
        else:
            penalty = self._priors(meta, query)
            depth = limit
            while True:  # grouping parts may reach below the top `depth`: score that deep exactly too
                fused = self._fuse_exactly(q, sem, lex, exact, margin, sem_w, lex_w, depth, penalty)
                best, used = self._one_per_definition(ranked(fused), limit, meta)
                if used <= depth:
                    break
                depth = used
        rows = self.index.chunks([d for d, _ in best])
        hits = []
        for d, score in best:
            row: ChunkRow | None = rows.get(d)
            if row is None:  # deleted between the scoring and the lookup (a concurrent update)
                continue
            hits.append(Hit(row.path, row.start_line, row.end_line, row.symbol, row.kind, row.language,
                            float(score), row.text, d, sem.get(d), lex.get(d)))
        return hits
