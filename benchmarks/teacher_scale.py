"""Issue 7: do a teacher's in-batch MaxSim scores differ from the student's in scale or in order?

The eighth probe (docs/training.md) trained all-MiniLM-L6-v2 on all-mpnet-base-v2's in-batch
score distribution (KL at one temperature) and lost 10 behaviour queries. One reading was that
the two models' scores sit in different ranges, so a KL at one temperature asks the student for
the teacher's spread, not only its order, and a per-query standardised KL would fix it. This
measures that on the training rows, before anything is trained: per model, each batch's
(n_q, n_d) MaxSim rows (mean over query tokens, as the trainer scores), their mean, spread, the
positive's z-score and in-batch accuracy; between the models, the rows' Spearman correlation and
the KL at the training temperature, raw and with both rows standardised (the teacher's order at
the student's own spread).

    .venv/bin/python benchmarks/teacher_scale.py --pairs /tmp/qa/pairs.jsonl --batches 8 --batch 32

Prints a Markdown table and writes it with the raw figures to ``--out`` (JSON) when given.
"""

from __future__ import annotations

import argparse
import json
import random

import numpy as np

from supergrep.corpus.documents import code_document, load_pairs
from supergrep.encoder.encoder import Encoder
from supergrep.encoder.spec import resolve_model


def maxsim(qs: list[np.ndarray], ds: list[np.ndarray]) -> np.ndarray:
    """(n_q, n_d) MaxSim, the mean over each query's tokens of its best document token."""
    return np.array([[float((q @ d.T).max(axis=1).mean()) for d in ds] for q in qs])


def kl(t: np.ndarray, s: np.ndarray, temperature: float) -> float:
    """Mean over rows of KL(softmax(t / T) || softmax(s / T)), as `distill_loss` computes it."""
    def logp(x):
        x = x / temperature
        x = x - x.max(axis=1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    lt, ls = logp(t), logp(s)
    return float((np.exp(lt) * (lt - ls)).sum(axis=1).mean())


def standardised_to(t: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``t``'s rows moved to ``s``'s rows' mean and spread: the teacher's order at the student's scale."""
    z = (t - t.mean(1, keepdims=True)) / t.std(1, keepdims=True)
    return z * s.std(1, keepdims=True) + s.mean(1, keepdims=True)


def spearman_rows(a: np.ndarray, b: np.ndarray) -> float:
    ra = a.argsort(1).argsort(1).astype(float)
    rb = b.argsort(1).argsort(1).astype(float)
    return float(np.mean([np.corrcoef(x, y)[0, 1] for x, y in zip(ra, rb)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", required=True)
    ap.add_argument("--student", default="minilm")
    ap.add_argument("--teacher", default="mpnet")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--temperature", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    pairs = load_pairs(args.pairs, split="train", strict_split=True)
    rows = random.Random(args.seed).sample(pairs, args.batches * args.batch)
    queries = [p.query for p in rows]
    docs = [code_document(p.code, p.path, p.symbol, p.language) for p in rows]
    scores = {}
    for name in (args.student, args.teacher):
        enc = Encoder(resolve_model(name), backend="torch", device="cpu")
        q, d = enc.encode_queries(queries), enc.encode_documents(docs)
        b = args.batch
        scores[name] = [maxsim(q[i:i + b], d[i:i + b]) for i in range(0, len(rows), b)]

    def stats(mats):
        pos = np.concatenate([np.diag(m) for m in mats])
        mean = np.concatenate([m.mean(1) for m in mats])
        sd = np.concatenate([m.std(1) for m in mats])
        acc = np.concatenate([m.argmax(1) == np.arange(len(m)) for m in mats])
        return {"positive": float(pos.mean()), "row_mean": float(mean.mean()), "row_std": float(sd.mean()),
                "positive_z": float(((pos - mean) / sd).mean()), "accuracy": float(acc.mean())}

    per_model = {name: stats(m) for name, m in scores.items()}
    s_m, t_m = scores[args.student], scores[args.teacher]
    between = {
        "spearman": float(np.mean([spearman_rows(t, s) for t, s in zip(t_m, s_m)])),
        "kl_raw": float(np.mean([kl(t, s, args.temperature) for t, s in zip(t_m, s_m)])),
        "kl_teacher_at_student_scale": float(np.mean([kl(standardised_to(t, s), s, args.temperature)
                                                      for t, s in zip(t_m, s_m)])),
    }
    lines = [f"{args.batches} batches of {args.batch} training pairs, seed {args.seed}, KL at T={args.temperature}", "",
             "| model | positive | row mean | row std | positive z | in-batch accuracy |", "|---|---|---|---|---|---|"]
    for name, st in per_model.items():
        lines.append(f"| {name} | {st['positive']:.3f} | {st['row_mean']:.3f} | {st['row_std']:.3f} | "
                     f"{st['positive_z']:.2f} | {st['accuracy']:.3f} |")
    lines += ["", f"rows' Spearman correlation {between['spearman']:.3f}; KL(teacher || student) "
              f"{between['kl_raw']:.3f} raw, {between['kl_teacher_at_student_scale']:.3f} with the teacher's rows "
              "moved to the student's mean and spread"]
    print("\n".join(lines))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "models": per_model, "between": between, "table": lines}, f, indent=1)


if __name__ == "__main__":
    main()
