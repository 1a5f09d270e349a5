"""Hard negatives for training pairs, mined with BM25.

In-batch negatives are mostly easy: a random other function rarely shares a query's words. A
hard negative is code that BM25 ranks high for the query but that is not the answer: training
against it teaches the model to look past shared words to what the code does (the seeds' model
learned word overlap instead). Ranking runs in SQLite FTS5 (its ``bm25()``) over the same
code-aware terms the index uses (identifiers whole and split), one table per language, so a
negative is always in the query's language.

What is never a negative (likely false negatives): the pair's own code, any code equal to it up
to whitespace, code whose symbol has the same last name (an overload or a copy in another
package), and code whose query (docstring summary) is the same text.

Only training rows get negatives and only training rows are candidates, so nothing of the
validation split leaks into training.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import sqlite3
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from supergrep.corpus.mine import AtomicJsonl
from supergrep.errors import InputError
from supergrep.jsonl import read_jsonl
from supergrep.scoring.bm25 import code_terms, query_terms

_WS = re.compile(r"\s+")
_CANDIDATES = 30  # BM25 hits read per query before the exclusions


@dataclasses.dataclass
class NegativeStats:
    rows: int = 0
    train_rows: int = 0
    with_negatives: int = 0
    negatives: int = 0
    no_match: int = 0
    seconds: float = 0.0
    by_language: dict = dataclasses.field(default_factory=dict)
    output: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _code_key(code: str) -> str:
    return hashlib.blake2b(_WS.sub("", code).encode(), digest_size=12).hexdigest()


def _last_name(symbol: str) -> str:
    return re.split(r"[.:#/]+", symbol.strip())[-1].lower() if symbol else ""


def read_rows(pairs_path: str | Path, split: str) -> tuple[list[dict], list[int], list[tuple[str, str, str, str]]]:
    """The pairs file's rows as written (every field kept), the indices of ``split`` rows (rows
    without a split count as it), and each row's (language, query, code key, last symbol name):
    what the exclusions compare."""
    rows: list[dict] = []
    for where, obj in read_jsonl(pairs_path, "pairs file"):
        if not isinstance(obj.get("query"), str) or not isinstance(obj.get("code"), str):
            raise InputError(f"{where}: each row needs string 'query' and 'code'")
        rows.append(obj)
    train = [i for i, r in enumerate(rows) if str(r.get("split", "") or split) == split]
    facts = [(str(r.get("language", "")), r["query"], _code_key(r["code"]), _last_name(str(r.get("symbol", ""))))
             for r in rows]
    return rows, train, facts


def negative_object(row: dict) -> dict:
    """A row as a negative: its code and whichever of path, symbol, language and docstring it has."""
    return {k: row[k] for k in ("code", "path", "symbol", "language", "docstring") if row.get(k)}


def write_mined(output: str | Path, rows: list[dict], train: list[int], mined: dict[int, dict]) -> None:
    """Every row, in order, to ``output`` (temp file + rename). A training row loses any
    ``negatives`` / ``teacher_scores`` it came with (an earlier mining's; scores belong to their
    own negatives) and gets ``mined[i]``'s fields instead; other rows are copied unchanged."""
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    train_set = set(train)
    writer = AtomicJsonl(out)
    try:
        for i, r in enumerate(rows):
            if i in train_set:
                r = {**{k: v for k, v in r.items() if k not in ("negatives", "teacher_scores")}, **mined.get(i, {})}
            writer.write(json.dumps(r, ensure_ascii=False))
        writer.commit()
    except BaseException:
        writer.abort()
        raise


def _table(language: str) -> str:
    return "fts_" + (re.sub(r"[^a-z0-9]", "_", language.lower()) or "none")


def _build(db_path: Path, rows: list[dict], train: list[int]) -> None:
    conn = sqlite3.connect(db_path)
    try:
        by_lang: dict[str, list[int]] = {}
        for i in train:
            by_lang.setdefault(str(rows[i].get("language", "")), []).append(i)
        for lang, ids in by_lang.items():
            t = _table(lang)
            conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {t} USING fts5(symbol, body, "
                         "tokenize = \"unicode61 remove_diacritics 0 tokenchars '_'\")")
            conn.executemany(
                f"INSERT INTO {t} (rowid, symbol, body) VALUES (?, ?, ?)",
                ((i, " ".join(code_terms(str(rows[i].get("symbol", "")))),
                  " ".join(code_terms(str(rows[i]["code"])))) for i in ids))
        conn.commit()
    finally:
        conn.close()


# Worker state (one read-only connection and the row facts per process).
_W: dict = {}


def _init(db_path: str, facts: list[tuple[str, str, str, str]], per_query: int, skip_top: int) -> None:
    _W["conn"] = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    _W["facts"] = facts
    _W["per_query"] = per_query
    _W["skip_top"] = skip_top


def _negatives_for(i: int) -> list[int]:
    facts = _W["facts"]
    lang, query, key, name = facts[i]
    terms = query_terms(query)
    if not terms:
        return []
    match = " OR ".join(f'"{t}"' for t in terms)
    table = _table(lang)
    try:
        hits = _W["conn"].execute(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY bm25({table}, 2.0, 1.0) LIMIT ?",
            (match, _CANDIDATES + _W["skip_top"])).fetchall()
    except sqlite3.OperationalError:  # no table for a language with no training rows
        return []
    out: list[int] = []
    seen_keys = {key}
    qnorm = query.strip().lower()
    for rank, (j,) in enumerate(hits):
        if j == i or rank < _W["skip_top"]:
            continue
        jl, jq, jkey, jname = facts[j]
        if jkey in seen_keys or (name and jname == name) or jq.strip().lower() == qnorm:
            continue
        seen_keys.add(jkey)
        out.append(j)
        if len(out) == _W["per_query"]:
            break
    return out


def _batch(ids: list[int]) -> list[tuple[int, list[int]]]:
    return [(i, _negatives_for(i)) for i in ids]


def mine_negatives(pairs_path: str | Path, output: str | Path, per_query: int = 1, skip_top: int = 0,
                   workers: int = 0, split: str = "train") -> NegativeStats:
    """Add BM25 hard negatives (``negatives``: objects with code, path, symbol, language, docstring) to every
    row of ``split`` and write all rows, in order, to ``output`` (temp file + rename).

    Args:
        per_query: Negatives per training row.
        skip_top: BM25 hits skipped before choosing (a guard against near-duplicates the
            exclusions miss; 0 takes the hardest).
        workers: Processes for the queries (0: one per CPU core).
        split: Rows with this ``split`` get negatives and are the candidates; rows without a
            split count as this split.
    """
    if per_query < 1:
        raise InputError("--per-query must be at least 1")
    t0 = time.perf_counter()
    rows, train, facts = read_rows(pairs_path, split)
    stats = NegativeStats(rows=len(rows), train_rows=len(train), output=str(output))
    with tempfile.TemporaryDirectory(prefix="sg-negatives-") as tmp:
        db = Path(tmp) / "bm25.sqlite"
        _build(db, rows, train)
        n_workers = workers or os.cpu_count() or 1
        batches = [train[s : s + 2000] for s in range(0, len(train), 2000)]
        if n_workers == 1:
            _init(str(db), facts, per_query, skip_top)
            results = [_batch(b) for b in batches]
        else:
            with ProcessPoolExecutor(n_workers, initializer=_init,
                                     initargs=(str(db), facts, per_query, skip_top)) as pool:
                results = list(pool.map(_batch, batches))
        found = dict(pair for chunk in results for pair in chunk)
    langs: Counter = Counter()
    for i, negs in found.items():
        if negs:
            stats.with_negatives += 1
            stats.negatives += len(negs)
            langs[str(rows[i].get("language", ""))] += 1
        else:
            stats.no_match += 1
    write_mined(output, rows, train, {i: {"negatives": [negative_object(rows[j]) for j in negs]}
                                      for i, negs in found.items()})
    stats.by_language = dict(langs)
    stats.seconds = time.perf_counter() - t0
    return stats
