"""Experiment: does a pooled (mean of token vectors) chunk score, MiniLM's native sentence
similarity, add to token-level MaxSim on the public set? Reads the eval indexes `supergrep eval`
built (SUPERGREP_HOME), so run that first for the model.

usage: python scripts/experiments/pooled_fusion.py [--model-path DIR]

Result (2026-11-21, raw MiniLM + a random 128-d projection, semantic mode, 55 queries): MaxSim
alone P@1 .655; MaxSim + 0.25 x pooled .655; pooled alone .582. Negative: not adopted.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from supergrep.encoder.encoder import Encoder
from supergrep.encoder.spec import resolve_model
from supergrep.evaluation.evaluate import eval_index_dir
from supergrep.evaluation.metrics import first_hit_rank
from supergrep.evaluation.queries import load_queries
from supergrep.index.project import Index

CORPORA = {"jinja2": ".cache/eval-corpora/jinja2-3.1.4/src", "itsdangerous": ".cache/eval-corpora/itsdangerous-2.2.0/src"}


def minmax(x: np.ndarray) -> np.ndarray:
    return (x - x.min()) / max(float(x.max() - x.min()), 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-path", default=None)
    ap.add_argument("--queries", default="eval/public/queries.jsonl")
    args = ap.parse_args()
    enc = Encoder(resolve_model(args.model_path) if args.model_path else None)
    queries = load_queries(Path(args.queries))
    data = {}
    for name, root in CORPORA.items():
        idx = Index(Path(root), eval_index_dir(name, Path(root), enc.fingerprint))
        ids = [r[0] for r in idx.conn.execute("SELECT id FROM chunks ORDER BY id")]
        rows = idx.chunks(ids)
        vecs = idx.store.get(idx.conn, ids)
        pooled = np.stack([v.astype(np.float32).mean(0) for v in vecs])
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        data[name] = (idx, ids, [(rows[i].path, rows[i].start_line) for i in ids], pooled, rows)
    weights = [0.0, 0.25, 0.5, 1.0, 2.0, 1e6]
    ranks = {w: [] for w in weights}
    kinds = []
    for q in queries:
        idx, ids, locs, pooled, _ = data[q.corpus]
        qv = enc.encode_queries([q.query])[0]
        got, sc = idx.store.search(idx.conn, qv, len(ids), None)
        pos = {c: i for i, c in enumerate(ids)}
        ms = np.full(len(ids), float(np.min(sc)), np.float32)
        ms[[pos[int(c)] for c in got]] = sc
        qp = qv.mean(0)
        qp /= np.linalg.norm(qp)
        ps = pooled @ qp
        kinds.append(q.kind)
        for w in weights:
            s = minmax(ms) + w * minmax(ps) if w < 1e6 else ps
            order = np.argsort(-s, kind="stable")[:10]
            ranks[w].append(first_hit_rank([locs[i] for i in order], q.targets))
    for w in weights:
        r = ranks[w]
        p1 = np.mean([x == 1 for x in r])
        mrr = np.mean([1 / x if x else 0 for x in r])
        sem = np.mean([x == 1 for x, k in zip(r, kinds, strict=True) if k == "semantic"])
        kw = np.mean([x == 1 for x, k in zip(r, kinds, strict=True) if k == "keyword"])
        label = "pooled only" if w >= 1e6 else f"maxsim + {w} pooled"
        print(f"{label:22s} P@1 {p1:.3f} MRR@10 {mrr:.3f} sem {sem:.3f} kw {kw:.3f}")


if __name__ == "__main__":
    main()
