"""Carry mined hard negatives as row numbers instead of code text.

`mine-negatives` copies each negative's code into its row, which doubles the pairs file (too big
to carry to the GPU machine next to the model: 64 MiB a call). The negatives are other rows of the
same file, so their row numbers are enough:

    python benchmarks/hn_pack.py pack pairs.jsonl pairs-hn.jsonl -o hn-index.json     # here
    python benchmarks/hn_pack.py unpack pairs.jsonl hn-index.json -o pairs-hn.jsonl   # there
"""

from __future__ import annotations

import argparse
import hashlib
import json

FIELDS = ("code", "path", "symbol", "language", "docstring")


def _neg(row: dict) -> dict:
    """A row as `mine-negatives` writes it as a negative (empty fields left out)."""
    return {k: row[k] for k in FIELDS if row.get(k)}


def _key(obj: dict) -> str:
    return hashlib.sha1(json.dumps(_neg(obj), sort_keys=True).encode()).hexdigest()


def _rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def pack(pairs: str, mined: str, out: str) -> None:
    rows, with_negs = _rows(pairs), _rows(mined)
    if len(rows) != len(with_negs):
        raise SystemExit(f"{pairs} has {len(rows)} rows but {mined} has {len(with_negs)}")
    where = {}
    for j, r in enumerate(rows):
        where.setdefault(_key(r), j)
    # None: a row mine-negatives left alone (not a training row); []: a row it found nothing for.
    index = [[where[_key(n)] for n in r["negatives"]] if "negatives" in r else None for r in with_negs]
    # `mine-negatives --teacher` also writes the teacher's scores of [positive, *negatives].
    scores = [r.get("teacher_scores") for r in with_negs]
    with open(out, "w") as fh:
        json.dump({"rows": len(rows), "negatives": index, **({"teacher_scores": scores} if any(scores) else {})}, fh)
    print(f"{sum(len(x) for x in index if x)} negatives of {sum(1 for x in index if x)} rows -> {out}")


def unpack(pairs: str, index_path: str, out: str) -> None:
    rows = _rows(pairs)
    index = json.load(open(index_path))
    if index["rows"] != len(rows):
        raise SystemExit(f"{index_path} was packed for {index['rows']} rows, {pairs} has {len(rows)}")
    scores = index.get("teacher_scores") or [None] * len(rows)
    with open(out, "w", encoding="utf-8") as fh:
        for r, negs, t in zip(rows, index["negatives"], scores, strict=True):
            if negs is not None:
                r = {**r, "negatives": [_neg(rows[j]) for j in negs]}
            if t is not None:
                r["teacher_scores"] = t
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["pack", "unpack"])
    ap.add_argument("pairs")
    ap.add_argument("other", help="pack: the mine-negatives output; unpack: the index")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    (pack if a.what == "pack" else unpack)(a.pairs, a.other, a.output)


if __name__ == "__main__":
    main()
