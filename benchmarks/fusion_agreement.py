"""Issue 7: where hybrid fusion gains over semantic search, model by model.

Tuned models lose more queries in hybrid mode than in semantic mode (docs/training.md, "Ninth
probe"). This splits each model's queries by whether its semantic top result is BM25's top result
too, and counts the first-place hits of semantic, lexical and hybrid search in each part: the gain
of fusion comes from the queries where the two disagree and BM25 is right.

    supergrep eval ... --mode semantic --mode hybrid --model minilm --model TUNED --json > models.json
    supergrep eval ... --mode lexical --model minilm --json > lexical.json
    .venv/bin/python benchmarks/fusion_agreement.py --lexical lexical.json models.json [more.json ...]
"""

from __future__ import annotations

import argparse
import json


def place(t: dict) -> tuple:
    return t["path"], t.get("symbol"), t["start_line"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lexical", required=True, help="`eval --mode lexical --json` output")
    ap.add_argument("evals", nargs="+", help="`eval --mode semantic --mode hybrid --json` outputs")
    args = ap.parse_args()
    with open(args.lexical) as f:
        lex = {r["id"]: r for r in json.load(f)["queries"] if r["mode"] == "lexical"}
    runs: dict[tuple[str, str], dict] = {}
    for path in args.evals:
        with open(path) as f:
            for r in json.load(f)["queries"]:
                runs.setdefault((r["model"], r["mode"]), {})[r["id"]] = r
    print("| model | semantic top-1 = BM25's | of those: semantic / hybrid right | disagree | "
          "of those: semantic / BM25 / hybrid right | P@1 semantic / hybrid (queries) |")
    print("|---|---|---|---|---|---|")
    for model in dict.fromkeys(m for m, _ in runs):
        sem, hyb = runs.get((model, "semantic")), runs.get((model, "hybrid"))
        if not sem or not hyb:
            continue
        agree = [i for i in sem if i in lex and lex[i]["top"] and sem[i]["top"]
                 and place(sem[i]["top"][0]) == place(lex[i]["top"][0])]
        same = set(agree)
        split = [i for i in sem if i not in same]
        right = lambda d, ids: sum(d[i]["rank"] == 1 for i in ids)  # noqa: E731
        print(f"| {model} | {len(agree)} | {right(sem, agree)} / {right(hyb, agree)} | {len(split)} | "
              f"{right(sem, split)} / {right(lex, split)} / {right(hyb, split)} | "
              f"{right(sem, list(sem))} / {right(hyb, list(hyb))} |")


if __name__ == "__main__":
    main()
