"""Hybrid fusion on a compressed index: how many chunks get exact MaxSim, and how often the top 10
matches the reference that scores every fusion candidate exactly, as the estimates' margin
(``CompressedStore.search_deep``'s) is scaled. Queries: the public set's 55 + the first
docstring lines of indexed functions (200 in all).

    SUPERGREP_HOME=/tmp/sgb/home python benchmarks/hybrid_exactness.py /tmp/sgb/stdlib 1,0.5,0.25,0

Recorded (2026-11-25, stdlib project, minilm-l3, docs/status.md): margin x1 (the code) 196 / 200
identical top-10 lists with 156 chunks scored exactly (median), p50 26.8 ms in-process; x0.5
156 / 200 with 83; x0 95 / 200 with 80 (the 64 re-ranked + 16 for the min-max floor), p50 ~21 ms.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the CLI and the daemon set it

import numpy as np  # noqa: E402

from supergrep.cli.common import make_encoder  # noqa: E402
from supergrep.config import load_config  # noqa: E402
from supergrep.encoder.named import model_of_index  # noqa: E402
from supergrep.encoder.spec import resolve_model  # noqa: E402
from supergrep.index import compressed as C  # noqa: E402
from supergrep.index import search as S  # noqa: E402
from supergrep.index.project import Index  # noqa: E402


def main() -> None:
    root, mults = sys.argv[1], [float(x) for x in sys.argv[2].split(",")]
    cfg = load_config(root, None)
    index = Index(root, None)
    cfg.encode.device = "cpu"
    enc = make_encoder(resolve_model(model_of_index(index.manifest.model)), cfg)
    texts = [json.loads(line)["query"] for line in open("eval/public/queries.jsonl")]
    rows = index.conn.execute("SELECT text FROM chunks WHERE kind IN ('function', 'method') AND text LIKE '%\"\"\"%'").fetchall()
    for i in np.random.default_rng(0).permutation(len(rows)):
        body = rows[i][0].split('"""')
        line = body[1].strip().splitlines()[0].strip() if len(body) > 2 and body[1].strip() else ""
        if len(line.split()) >= 4:
            texts.append(line)
        if len(texts) >= 200:
            break
    searcher = S.Searcher(index, enc, cfg.search)
    state = {"mult": 1.0, "n": 0}
    deep, score = C.CompressedStore.search_deep, C.CompressedStore.score

    def counted_deep(self, *a, **k):
        ids, sc, ex, margin = deep(self, *a, **k)
        state["n"] += int(ex.sum())
        return ids, sc, ex, margin * state["mult"]

    def counted_score(self, conn, q, ids):
        state["n"] += len(ids)
        return score(self, conn, q, ids)

    C.CompressedStore.search_deep, C.CompressedStore.score = counted_deep, counted_score

    def run(mult):
        state["mult"] = mult
        tops, ns, ts = [], [], []
        for q in texts:
            state["n"] = 0
            t0 = time.perf_counter()
            hits = searcher.search(q, mode="hybrid")
            ts.append(time.perf_counter() - t0)
            tops.append([h.chunk_id for h in hits])
            ns.append(state["n"])
        return tops, ns, ts

    for q in texts[:5]:
        searcher.search(q, mode="hybrid")
    ref, nref, _ = run(1e6)  # every candidate's estimate "may be off by anything": all exact
    print(f"reference: exact docs median {statistics.median(nref)}")
    for mult in mults:
        tops, ns, ts = run(mult)
        same = sum(a == b for a, b in zip(tops, ref, strict=True))
        same_set = sum(set(a) == set(b) for a, b in zip(tops, ref, strict=True))
        top1 = sum(a[:1] == b[:1] for a, b in zip(tops, ref, strict=True))
        rec = statistics.mean(len(set(a) & set(b)) / max(len(b), 1) for a, b in zip(tops, ref, strict=True))
        print(f"margin x{mult}: exact docs median {statistics.median(ns)} mean {statistics.mean(ns):.0f}; "
              f"p50 {statistics.median(ts) * 1e3:.1f} ms; same list {same}/{len(texts)}, same set {same_set}, "
              f"same top1 {top1}, recall@10 {rec:.4f}")


if __name__ == "__main__":
    main()
