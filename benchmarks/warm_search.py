"""Search latency in a warm, in-process Searcher (what the daemon runs per query, without the
client and the socket), and optionally where one pass of the queries spends its time (cProfile).

    SUPERGREP_HOME=$H python benchmarks/warm_search.py --root .cache/corpus-stdlib --mode hybrid --runs 2 --profile

Queries: the public set's (eval/public/queries.jsonl), the first five run once as warm-up.
Prints p50 / p90 of ``Searcher.search`` and the p50 of encoding one query.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the CLI and the daemon set it

import numpy as np  # noqa: E402

from supergrep.cli.common import make_encoder  # noqa: E402
from supergrep.config import load_config  # noqa: E402
from supergrep.encoder.named import model_of_index  # noqa: E402
from supergrep.encoder.spec import resolve_model  # noqa: E402
from supergrep.index.project import Index  # noqa: E402
from supergrep.index.search import Searcher  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True, type=Path, help="an indexed project")
    ap.add_argument("--mode", default="hybrid", choices=("semantic", "lexical", "hybrid"))
    ap.add_argument("--runs", type=int, default=2, help="passes over the queries")
    ap.add_argument("--model-path", default=None, help="default: the model the index was built with")
    ap.add_argument("--profile", action="store_true", help="one more pass under cProfile (top 25 by own time)")
    args = ap.parse_args()

    cfg = load_config(args.root, None)
    index = Index(args.root, None)
    cfg.encode.device = "cpu"
    enc = make_encoder(resolve_model(args.model_path or model_of_index(index.manifest.model)), cfg)  # as the daemon loads it
    searcher = Searcher(index, enc, cfg.search)
    queries = [json.loads(line)["query"] for line in open("eval/public/queries.jsonl")]
    for q in queries[:5]:
        searcher.search(q, mode=args.mode)
    t_enc = []
    for q in queries:
        t0 = time.perf_counter()
        enc.encode_queries([q])
        t_enc.append(time.perf_counter() - t0)
    times = []
    for _ in range(args.runs):
        for q in queries:
            t0 = time.perf_counter()
            searcher.search(q, mode=args.mode)
            times.append(time.perf_counter() - t0)
    print(f"{args.mode}: {len(times)} searches, p50 {statistics.median(times) * 1e3:.1f} ms, "
          f"p90 {np.percentile(times, 90) * 1e3:.1f} ms; query encoding p50 {statistics.median(t_enc) * 1e3:.1f} ms; "
          f"load average {os.getloadavg()[0]:.2f}")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for q in queries:
            searcher.search(q, mode=args.mode)
        prof.disable()
        print(f"cProfile over {len(queries)} searches:")
        pstats.Stats(prof).sort_stats(os.environ.get("SORT", "tottime")).print_stats(int(os.environ.get("TOP", "25")))


if __name__ == "__main__":
    main()
