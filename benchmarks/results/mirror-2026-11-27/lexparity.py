import json, time, sys
import numpy as np
from pathlib import Path
from supergrep.index.project import Index, BM25_WEIGHTS
from supergrep.index.mirror import Mirror
from supergrep.scoring.bm25 import query_terms
idx = Index(Path(__import__("os").environ.get("STDLIB", "/tmp/sgb/stdlib")), None)
lx = Mirror(idx.dir, BM25_WEIGHTS); lx.max_chunks = 10**6
t = time.perf_counter(); ok = lx.refresh(idx.conn); print("build", ok, lx.disabled, "%.3f s" % (time.perf_counter() - t))
qs = [json.loads(l)["query"] for l in open("eval/public/queries.jsonl")]
qs += [json.loads(l)["query"] for l in open("eval/dev/queries.jsonl")] if Path("eval/dev/queries.jsonl").exists() else []
same = 0; tf = tm = 0
for q in qs:
    terms = query_terms(q)
    for k in (10, 200):
        t = time.perf_counter(); a = idx.lexical(q, k); tf += time.perf_counter() - t
        t = time.perf_counter(); b = lx.search(idx.conn, terms, k); tm += time.perf_counter() - t
        eq = np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
        same += eq
        if not eq:
            n = min(len(a[0]), len(b[0])); d = np.flatnonzero(a[0][:n] != b[0][:n])
            print("DIFF", q, k, len(a[0]), len(b[0]), d[:5], a[1][d[:3]], b[1][d[:3]])
print("same", same, "of", 2 * len(qs), "FTS5 %.2f ms  mirror %.2f ms per query" % (tf / 2 / len(qs) * 1e3, tm / 2 / len(qs) * 1e3))
