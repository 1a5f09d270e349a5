"""Index throughput and search latency of the foundation, on real corpora.

Usage:
    python benchmarks/foundation.py --root src --root .cache/eval-corpora/jinja2-3.1.4/src \
        --queries eval/public/queries.jsonl --out benchmarks/results/foundation-cpu.json

For each root: a full index build from scratch with the default model (lines/s as the
`index` command reports it), then 50 queries per mode in one warm process (p50/p95 of the
search call, query encoding included), then a few cold `supergrep search` runs (process start to
exit, model load included). Prints a markdown table; --out also writes the raw figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from supergrep.config import Config  # noqa: E402
from supergrep.encoder import Encoder  # noqa: E402
from supergrep.evaluation.queries import load_queries  # noqa: E402
from supergrep.index.indexer import update_index  # noqa: E402
from supergrep.index.project import Index  # noqa: E402
from supergrep.index.search import Searcher  # noqa: E402


def percentiles(ms: list[float]) -> dict:
    return {"p50_ms": round(float(np.percentile(ms, 50)), 1), "p95_ms": round(float(np.percentile(ms, 95)), 1)}


def bench_root(root: Path, queries: list[str], encoder: Encoder, workdir: Path, cold_runs: int,
               languages: list[str]) -> dict:
    cfg = Config()
    cfg.walk.languages = languages
    index_dir = workdir / f"{len(list(workdir.iterdir()))}-{root.name}"
    index = Index(root, index_dir)
    rep = update_index(index, encoder, cfg, force=True)
    out = {
        "root": str(root), "files": rep.files, "chunks": rep.chunks, "lines": rep.lines_indexed,
        "index_seconds": round(rep.seconds, 1), "lines_per_s": round(rep.lines_per_s, 1),
        "vectors": index.store.stats(index.conn)["vectors"], "dim": encoder.dim, "search": {},
    }
    for cache in (0, 4 << 30):
        idx = Index(root, index_dir, cache_bytes=cache)
        searcher = Searcher(idx, encoder, cfg.search)
        for mode in ("lexical", "semantic", "hybrid"):
            searcher.search(queries[0], mode=mode)  # warm-up (page cache, float32 cache)
            ms = []
            for q in queries:
                t = time.perf_counter()
                searcher.search(q, mode=mode)
                ms.append((time.perf_counter() - t) * 1000)
            out["search"][f"{mode}{'' if cache == 0 else '+f32cache'}"] = percentiles(ms)
        idx.close()
    exe = shutil.which("supergrep", path=str(Path(sys.executable).parent)) or "supergrep"
    cold = []
    for q in queries[:cold_runs]:
        t = time.perf_counter()
        subprocess.run([exe, "search", q, str(root), "--index-dir", str(index_dir), "-n", "10"],
                       capture_output=True, check=False)
        cold.append((time.perf_counter() - t) * 1000)
    out["cold_cli_search"] = percentiles(cold)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", action="append", required=True, type=Path)
    ap.add_argument("--queries", type=Path, default=Path("eval/public/queries.jsonl"))
    ap.add_argument("--n-queries", type=int, default=50)
    ap.add_argument("--cold-runs", type=int, default=5)
    ap.add_argument("-t", "--type", dest="languages", action="append", default=[])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    queries = [q.query for q in load_queries(args.queries)][: args.n_queries]
    encoder = Encoder()
    results = {
        "date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(), "model": encoder.name, "n_queries": len(queries), "roots": [],
    }
    with tempfile.TemporaryDirectory() as work:
        for root in args.root:
            results["roots"].append(bench_root(root.resolve(), queries, encoder, Path(work), args.cold_runs,
                                               args.languages))
    print("| corpus | files | lines | chunks | vectors | index s | lines/s | mode | p50 ms | p95 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results["roots"]:
        for mode, s in [*r["search"].items(), ("cold CLI", r["cold_cli_search"])]:
            print(f"| {Path(r['root']).name} | {r['files']} | {r['lines']} | {r['chunks']} | {r['vectors']} "
                  f"| {r['index_seconds']} | {r['lines_per_s']} | {mode} | {s['p50_ms']} | {s['p95_ms']} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
