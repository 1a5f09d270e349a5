"""The nibble re-rank kernel of two builds of ``index/_kernels.c`` on the same synthetic documents:
the results bit for bit and the time a token, one thread. Each build is a compiled ``_kernels``
module file (``.so``), loaded from its path as a module object of its own.

    python benchmarks/rerank_kernels/bench.py NEW.so OLD.so [--docs 160 --tokens 150 --dim 384]
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import time

import numpy as np


def load(path: str):
    loader = importlib.machinery.ExtensionFileLoader("supergrep.index._kernels", path)
    spec = importlib.util.spec_from_file_location("supergrep.index._kernels", path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+")
    ap.add_argument("--docs", type=int, default=160)
    ap.add_argument("--tokens", type=int, default=150)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--q", type=int, default=32)
    ap.add_argument("--centroids", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args()
    from supergrep.index.native import pack_nibble_weights

    rng = np.random.default_rng(0)
    nb = args.dim // 2
    n_tok = args.docs * args.tokens
    resid = [rng.integers(0, 256, (n_tok, nb), dtype=np.uint8)]
    codes = [rng.integers(0, args.centroids, n_tok).astype(np.uint16)]
    scale = [(rng.random(n_tok) + 0.5).astype(np.float16)]
    seg = np.zeros(args.docs, np.int64)
    start = np.arange(args.docs, dtype=np.int64) * args.tokens
    length = np.full(args.docs, args.tokens, np.int64)
    w8 = rng.integers(-127, 128, (2 * nb, args.q), dtype=np.int8)
    wp = pack_nibble_weights(w8)
    alpha = (rng.random(args.q) * 0.01).astype(np.float32)
    offset = rng.standard_normal(args.q).astype(np.float32)
    st = rng.standard_normal((args.centroids, args.q)).astype(np.float32)
    out: dict = {"docs": args.docs, "tokens": n_tok, "dim": args.dim, "q": args.q, "builds": {}}
    mods = [load(path) for path in args.builds]
    scores = [np.empty(args.docs, np.float32) for _ in mods]
    times: list[list[float]] = [[] for _ in mods]
    # call by call, alternating builds: a burst of load on a shared machine hits both alike
    for rep in range(args.repeats + 3):
        for i, k in enumerate(mods):
            t = time.perf_counter()
            k.rerank_nibbles(resid, codes, scale, seg, start, length, wp, alpha, offset, st, scores[i])
            if rep >= 3:
                times[i].append(time.perf_counter() - t)
    for path, k, t in zip(args.builds, mods, times, strict=True):
        ns = np.array(t) * 1e9 / n_tok
        out["builds"][path] = {"simd": k.simd(), "ns_per_token_min": round(float(ns.min()), 1),
                               "ns_per_token_p10": round(float(np.percentile(ns, 10)), 1),
                               "ns_per_token_median": round(float(np.median(ns)), 1)}
    out["identical"] = all(np.array_equal(scores[0], r) for r in scores[1:])
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
