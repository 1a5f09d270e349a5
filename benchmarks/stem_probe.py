"""Probe: English stemming (Snowball, `pip install snowballstemmer`) of BM25's terms, documents and
queries alike, scored with the product's own eval on copies of its eval indexes.

STEM_MODE=replace (default): every alphabetic term replaced by its stem; STEM_MODE=both: each
term kept and its stem added where it differs. Identifiers with "_" or digits stay whole.

    cp -r $HOME_WITH_EVAL_INDEXES /tmp/h            # e.g. a SUPERGREP_HOME after `supergrep eval`
    STEM_MODE=both python benchmarks/stem_probe.py rebuild /tmp/h/eval-indexes/*   # chunks_fts rewritten
    SUPERGREP_HOME=/tmp/h STEM_MODE=both python benchmarks/stem_probe.py cli eval --model minilm \
        --queries eval/dev/queries.jsonl -t python --corpus joblib=... --mode all --out X.md

Measured 2026-11-28 on eval/dev (raw MiniLM): neither helps hybrid search (docs/quality.md,
"Stemming BM25's terms"); records in benchmarks/results/stem-probe-2026-11-28/.
"""

from __future__ import annotations

import os
import sqlite3
import sys

import snowballstemmer

import supergrep.index.project as project
import supergrep.scoring.bm25 as bm

_ST = snowballstemmer.stemmer("english")
_CACHE: dict[str, str] = {}
_ORIG_CODE_TERMS = bm.code_terms
BOTH = os.environ.get("STEM_MODE") == "both"  # keep each term and add its stem where it differs


def stem(t: str) -> str:
    s = _CACHE.get(t)
    if s is None:
        s = _CACHE[t] = _ST.stemWord(t) if t.isalpha() else t  # identifiers with _ or digits stay whole
    return s


def _expand(t: str) -> tuple[str, ...]:
    s = stem(t)
    if not BOTH:
        return (s,)
    return (t, s) if s != t else (t,)


def code_terms(text: str) -> list[str]:
    return [x for t in _ORIG_CODE_TERMS(text) for x in _expand(t)]


def query_terms(query: str) -> list[str]:
    seen: dict[str, None] = {}
    for t in _ORIG_CODE_TERMS(query):
        if t not in bm.QUERY_STOPWORDS and t != "_":
            for x in _expand(t):
                seen.setdefault(x, None)
    return list(seen)


# the index's FTS rows and the searcher's query terms both come from these names
bm.code_terms, bm.query_terms = code_terms, query_terms
project.code_terms, project.query_terms = code_terms, query_terms


def rebuild(index_dirs: list[str]) -> None:
    """Rewrite each index's chunks_fts from its chunks with the stemmed terms."""
    for d in index_dirs:
        conn = sqlite3.connect(f"{d}/meta.sqlite")
        rows = conn.execute("SELECT c.id, f.path, c.symbol, c.text FROM chunks c JOIN files f ON c.file_id = f.id").fetchall()
        conn.execute("BEGIN")
        conn.execute("DELETE FROM chunks_fts")
        conn.executemany("INSERT INTO chunks_fts (rowid, path, symbol, body) VALUES (?, ?, ?, ?)",
                         [(cid, " ".join(code_terms(p)), " ".join(code_terms(s)), " ".join(code_terms(t)))
                          for cid, p, s, t in rows])
        conn.execute("COMMIT")
        print(d, len(rows), "chunks")


if __name__ == "__main__":
    if sys.argv[1] == "rebuild":
        rebuild(sys.argv[2:])
    else:  # "cli ...": the supergrep CLI with the stemmed terms
        from supergrep.cli import main

        sys.argv = ["supergrep"] + sys.argv[2:]
        sys.exit(main())
