#!/usr/bin/env python3
"""Check a query file (eval/dev or eval/public format) against its corpora, with `ast` only.

usage: check_queries.py QUERIES.jsonl --corpus NAME=ROOT [--corpus NAME=ROOT ...]

For every query: valid JSON object; `id` present and unique; `corpus` given by a --corpus;
`query` a non-empty string; `kind` is "semantic" or "keyword"; 1-3 distinct `targets`.
For every target: `path` (relative to the corpus root) is an existing .py file that parses;
a def/async def/class whose qualified name (Class.method, outer.inner) equals `symbol` has
exactly `lineno == start_line` and `end_lineno == end_line` (decorators excluded, as `ast`
gives them). A `semantic` query must not contain its target's own name (the last part of
`symbol`, as a whole word, or with its underscores read as spaces).

Prints one line per problem and exits 2 if there is any; otherwise prints a summary
(counts per corpus and kind) and exits 0. Runs nothing but the standard library.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

KINDS = ("semantic", "keyword")
DEF_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def definitions(tree: ast.AST) -> dict[str, list[tuple[int, int]]]:
    """Qualified name -> [(lineno, end_lineno), ...] of every def/class, also those nested in
    if/try/with/for blocks (a name may be defined more than once, e.g. typing overloads)."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, DEF_NODES):
                name = prefix + child.name
                out[name].append((child.lineno, child.end_lineno))
                walk(child, name + ".")
            elif not isinstance(child, ast.expr):
                walk(child, prefix)

    walk(tree, "")
    return out


def names_target(query: str, symbol: str) -> bool:
    """Whether a query spells out the target's own name (`merge_sorted`, `merge sorted`,
    `groupby`), ignoring dunder and one/two-letter names."""
    name = symbol.rsplit(".", 1)[-1].strip("_")
    if len(name) < 3 or symbol.rsplit(".", 1)[-1].startswith("__"):
        return False
    q = query.lower()
    forms = {name.lower(), name.lower().replace("_", " ")}
    return any(re.search(rf"(?<![\w]){re.escape(f)}(?![\w])", q) for f in forms if f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("queries", type=Path)
    ap.add_argument("--corpus", action="append", default=[], metavar="NAME=ROOT",
                    help="corpus name and its root directory (repeat per corpus)")
    args = ap.parse_args(argv)

    roots: dict[str, Path] = {}
    problems: list[str] = []
    for spec in args.corpus:
        name, sep, root = spec.partition("=")
        if not sep or not name or not root:
            problems.append(f"--corpus {spec!r}: expected NAME=ROOT")
            continue
        roots[name] = Path(root)
        if not Path(root).is_dir():
            problems.append(f"--corpus {name}: {root} is not a directory")

    parsed: dict[Path, dict[str, list[tuple[int, int]]] | None] = {}

    def defs_of(file: Path) -> dict[str, list[tuple[int, int]]] | None:
        if file not in parsed:
            try:
                parsed[file] = definitions(ast.parse(file.read_text(encoding="utf-8"), str(file)))
            except (OSError, SyntaxError, UnicodeDecodeError, ValueError) as exc:
                problems.append(f"{file}: cannot parse: {exc}")
                parsed[file] = None
        return parsed[file]

    seen_ids: set[str] = set()
    counts: Counter[tuple[str, str]] = Counter()
    n = 0
    try:
        lines = args.queries.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        print(f"{args.queries}: cannot read: {exc}")
        return 2
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{args.queries}:{lineno}"
        try:
            q = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{where}: invalid JSON: {exc}")
            continue
        if not isinstance(q, dict):
            problems.append(f"{where}: not a JSON object")
            continue
        n += 1
        qid = q.get("id")
        if not isinstance(qid, str) or not qid:
            problems.append(f"{where}: missing or empty 'id'")
            qid = f"<line {lineno}>"
        elif qid in seen_ids:
            problems.append(f"{where} {qid}: duplicate id")
        seen_ids.add(qid)
        where = f"{where} {qid}"
        text = q.get("query")
        if not isinstance(text, str) or not text.strip():
            problems.append(f"{where}: 'query' must be a non-empty string")
            text = ""
        kind = q.get("kind")
        if kind not in KINDS:
            problems.append(f"{where}: kind {kind!r} is not one of {', '.join(KINDS)}")
        corpus = q.get("corpus")
        root = roots.get(corpus) if isinstance(corpus, str) else None
        if root is None:
            problems.append(f"{where}: corpus {corpus!r} has no --corpus NAME=ROOT")
        counts[(str(corpus), str(kind))] += 1
        targets = q.get("targets")
        if not isinstance(targets, list) or not 1 <= len(targets) <= 3:
            problems.append(f"{where}: 'targets' must be a list of 1-3 targets")
            continue
        seen_targets: set[tuple] = set()
        for i, t in enumerate(targets, 1):
            tw = f"{where} target {i}"
            if not isinstance(t, dict):
                problems.append(f"{tw}: not an object")
                continue
            path, symbol = t.get("path"), t.get("symbol")
            start, end = t.get("start_line"), t.get("end_line")
            if not (isinstance(path, str) and path and isinstance(symbol, str) and symbol):
                problems.append(f"{tw}: 'path' and 'symbol' must be non-empty strings")
                continue
            if not (isinstance(start, int) and isinstance(end, int) and 1 <= start <= end):
                problems.append(f"{tw} {path}:{symbol}: start_line/end_line must be ints, 1 <= start <= end")
                continue
            key = (path, symbol, start, end)
            if key in seen_targets:
                problems.append(f"{tw} {path}:{symbol}: duplicate target")
            seen_targets.add(key)
            if kind == "semantic" and text and names_target(text, symbol):
                problems.append(f"{tw}: semantic query contains the target's name "
                                f"{symbol.rsplit('.', 1)[-1]!r}")
            if root is None:
                continue
            if Path(path).is_absolute() or ".." in Path(path).parts:
                problems.append(f"{tw}: path {path!r} must be relative to the corpus root")
                continue
            file = root / path
            if not file.is_file():
                problems.append(f"{tw}: {path} does not exist under {root}")
                continue
            defs = defs_of(file)
            if defs is None:
                continue
            spans = defs.get(symbol)
            if not spans:
                problems.append(f"{tw}: no def/class {symbol!r} in {path}")
            elif (start, end) not in spans:
                have = ", ".join(f"{a}-{b}" for a, b in spans)
                problems.append(f"{tw}: {path}:{symbol} is at {have}, not {start}-{end}")
    if n == 0:
        problems.append(f"{args.queries}: no queries")
    for p in problems:
        print(p)
    if problems:
        return 2
    by_corpus: dict[str, Counter[str]] = defaultdict(Counter)
    for (corpus, kind), c in counts.items():
        by_corpus[corpus][kind] += c
    parts = [f"{c} {sum(k.values())} ({', '.join(f'{kk} {v}' for kk, v in sorted(k.items()))})"
             for c, k in by_corpus.items()]
    kinds = Counter()
    for k in by_corpus.values():
        kinds.update(k)
    print(f"ok: {n} queries, {len(seen_ids)} ids, all targets match ast spans; "
          + "; ".join(parts) + "; total " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
