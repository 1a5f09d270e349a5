"""Choose a training run's checkpoint on the held-out (mined validation) split, never on the
public evaluation set: docstring -> code retrieval among N candidates, plain and with the
query words the code spells dropped (`eval-pairs --behaviour`, a proxy for queries that describe
behaviour without naming it). One JSON object per model on stdout and in --out.

    python benchmarks/select_checkpoints.py --val pairs.jsonl --base MODEL --runs /tmp/sweep/* --out sel.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from supergrep.cli.common import make_encoder
from supergrep.config import load_config
from supergrep.corpus.documents import load_pairs
from supergrep.encoder.spec import resolve_model
from supergrep.evaluation.pairs import behaviour_pairs, evaluate_pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--val", required=True)
    ap.add_argument("--base", help="The untrained base model (step 0) to score first.")
    ap.add_argument("--runs", nargs="*", default=[], help="Run directories (their step_* checkpoints) or checkpoints.")
    ap.add_argument("--limit", type=int, default=2000)
    ap.add_argument("--candidates", type=int, default=100)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out")
    a = ap.parse_args()
    pairs = load_pairs(a.val, split="val", strict_split=True)
    behaviour = behaviour_pairs(pairs)
    cfg = load_config(None, None)
    cfg.encode.device = a.device
    models = ([("base", a.base)] if a.base else [])
    for r in a.runs:
        p = Path(r)
        steps = sorted(p.glob("step_*")) if not (p / "adapter_config.json").exists() else [p]
        models += [(f"{p.name}/{s.name}" if s != p else p.name, str(s)) for s in steps]
    out = open(a.out, "a") if a.out else None
    for name, path in models:
        t0 = time.perf_counter()
        enc = make_encoder(resolve_model(path), cfg)
        plain = evaluate_pairs(enc, pairs, candidates=a.candidates, limit=a.limit)
        beh = evaluate_pairs(enc, behaviour, candidates=a.candidates, limit=a.limit)
        row = {"model": name, "path": path, "val_mrr": round(plain["mrr"], 4), "val_r@1": round(plain["r@1"], 4),
               "behaviour_mrr": round(beh["mrr"], 4), "behaviour_r@1": round(beh["r@1"], 4),
               "n": plain["n"], "n_behaviour": beh["n"], "candidates": a.candidates,
               "seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps(row), flush=True)
        if out:
            out.write(json.dumps(row) + "\n")
            out.flush()
    if not models:
        sys.exit("nothing to score: pass --base and/or --runs")


if __name__ == "__main__":
    main()
