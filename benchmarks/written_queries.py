"""Issue 7: training pairs from queries written by reading the code (not docstring summaries).

Every tuned model so far learned from docstring summaries (or comments), which name what the
code names, and lost behaviour queries on the development set. This builds pairs whose queries
were written, one by one, by people (here: the session's helper agents, instructions in
``INSTRUCTIONS.md`` beside the data) who read each function and described its behaviour the way
a developer who does not know its name would search, avoiding its identifiers.

Inputs: ``--items`` files (JSONL: id, repo, path, symbol, docstring, code: rows sampled from
`supergrep mine` pairs) and ``--written`` files (JSONL: {"id", "query"} or {"id", "skip": true}).
Output: ``--out`` in `supergrep mine`'s pair format (query, code, docstring, language, repo,
path, symbol, split), ``split`` = "val" for a deterministic ``--val-share`` of the ids, and with
``--docstring-out`` the same functions with their docstring summaries as queries (the control).
Prints how much of the queries' words the code already spells (the word-overlap shortcut).

    .venv/bin/python benchmarks/written_queries.py --items /tmp/syn/part*.jsonl --written /tmp/syn/out*.jsonl \\
        --out written.jsonl --docstring-out docstring.jsonl --save-refs data/written-queries/queries.jsonl.gz

The repository keeps the queries with references to their code, not the code (third-party
packages' source): ``--refs data/written-queries/queries.jsonl.gz --pairs mined.jsonl`` rebuilds
the pairs from a `supergrep mine` file of the same packages (rows matched by package, path and
symbol, and checked by the code's SHA-1; rows whose code differs are left out and counted).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import sys

from supergrep.errors import InputError
from supergrep.jsonl import read_jsonl
from supergrep.scoring.bm25 import QUERY_STOPWORDS, code_terms
from supergrep.train.augment import chosen

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def summary(docstring: str) -> str:
    """A docstring's first paragraph on one line (what `supergrep mine` makes queries from)."""
    return " ".join(docstring.strip().split("\n\n")[0].split())


def overlap(query: str, code: str) -> float:
    """Share of the query's content words (not stop words, >= 3 letters) that the code spells."""
    terms = set(code_terms(code))
    words = [w.lower() for w in _WORD.findall(query) if len(w) >= 3 and w.lower() not in QUERY_STOPWORDS]
    return sum(w in terms for w in words) / len(words) if words else 0.0


def code_sha1(code: str) -> str:
    return hashlib.sha1(code.encode()).hexdigest()


def from_refs(refs: str, pairs: str) -> tuple[dict, list[dict], int]:
    """Items rebuilt from a refs file and a mined pairs file, the refs' written rows, and how
    many refs found no code with the same SHA-1 (a different package version)."""
    by_key = {}
    for _, row in read_jsonl(pairs, "pairs file"):
        by_key.setdefault((row.get("repo"), row.get("path"), row.get("symbol")), []).append(row)
    items, rows, missing = {}, [], 0
    for _, ref in read_jsonl(refs, "refs file"):
        rows.append(ref)
        match = [r for r in by_key.get((ref["repo"], ref["path"], ref["symbol"]), [])
                 if code_sha1(r["code"]) == ref["code_sha1"]]
        if not match:
            missing += 1
            continue
        r = match[0]
        items[ref["id"]] = {"id": ref["id"], "repo": r["repo"], "path": r["path"], "symbol": r["symbol"],
                            "docstring": r.get("docstring", ""), "code": r["code"]}
    return items, rows, missing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", nargs="+", default=[])
    ap.add_argument("--written", nargs="+", default=[])
    ap.add_argument("--refs", default="", help="queries with references to their code (instead of --items/--written)")
    ap.add_argument("--pairs", default="", help="with --refs: a `supergrep mine` pairs file holding the code")
    ap.add_argument("--save-refs", default="", help="write the queries with references to their code (gzip JSONL)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--docstring-out", default="")
    ap.add_argument("--val-share", type=float, default=0.1)
    args = ap.parse_args()
    if bool(args.refs) == bool(args.items or args.written) or (args.refs and not args.pairs):
        ap.error("give either --items and --written, or --refs with --pairs")

    items, ref_rows, missing = {}, [], 0
    try:  # the code's side must be whole: a bad line stops the run with its file and line
        if args.refs:
            items, ref_rows, missing = from_refs(args.refs, args.pairs)
        for path in args.items:
            for _, row in read_jsonl(path, "items file"):
                items[row["id"]] = row
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    written, skipped, problems = {}, 0, []
    for row in ref_rows:
        if row.get("skip"):
            skipped += 1
        elif row["id"] in items:
            written[row["id"]] = row["query"]
    for path in args.written:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    problems.append(f"{path}:{n}: {e}")
                    continue
                if row.get("id") not in items:
                    problems.append(f"{path}:{n}: unknown id {row.get('id')!r}")
                elif row.get("skip"):
                    skipped += 1
                elif not isinstance(row.get("query"), str) or len(row["query"].split()) < 3:
                    problems.append(f"{path}:{n}: no usable query")
                else:
                    written[row["id"]] = " ".join(row["query"].split())
    for p in problems[:20]:
        print("warning:", p, file=sys.stderr)

    out_rows, doc_rows, ov_w, ov_d = [], [], [], []
    for key, query in sorted(written.items()):
        it = items[key]
        split = "val" if chosen(1234, key, args.val_share) else "train"
        base = {"code": it["code"], "docstring": it["docstring"], "language": "python", "repo": it["repo"],
                "path": it["path"], "symbol": it["symbol"], "split": split, "source": "written", "item": key}
        out_rows.append({"query": query, **base})
        ov_w.append(overlap(query, it["code"]))
        doc = summary(it["docstring"])
        if len(doc.split()) >= 3:
            doc_rows.append({"query": doc, **base, "source": "docstring"})
            ov_d.append(overlap(doc, it["code"]))
    with open(args.out, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in out_rows)
    if args.docstring_out:
        with open(args.docstring_out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in doc_rows)
    if args.save_refs:
        with gzip.open(args.save_refs, "wt") as f:
            for key in sorted(items):
                it = items[key]
                ref = {"id": key, "repo": it["repo"], "path": it["path"], "symbol": it["symbol"],
                       "code_sha1": code_sha1(it["code"])}
                ref.update({"query": written[key]} if key in written else {"skip": True})
                f.write(json.dumps(ref) + "\n")
    if missing:
        print(f"{missing} refs found no code with the same SHA-1 in {args.pairs} (other package versions): left out")
    n_val = sum(r["split"] == "val" for r in out_rows)
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    print(f"{len(items)} items, {len(written)} written queries ({n_val} val), {skipped} skipped, "
          f"{len(problems)} bad lines; mean words {mean([len(q.split()) for q in written.values()]):.1f}; "
          f"share of content words the code spells: written {mean(ov_w):.3f}, docstring summaries {mean(ov_d):.3f}")


if __name__ == "__main__":
    main()
