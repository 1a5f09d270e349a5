"""How close plain layer-dropped students of a model are to it, before any training: which layers
to keep (`supergrep shrink --layers`). For each choice: the mean / min token cosine to the full
model and the MaxSim top-10 agreement and MRR over one pool of held-out pairs.

    python benchmarks/shrink_starts.py PAIRS.jsonl 0,2,4 1,3,5 0,3,5 0,3 [--model-path DIR] [--val 200]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses

import torch

from supergrep.backends.torch_backend import build_dense, load_transformer
from supergrep.backends.torch_layers import keep_layers
from supergrep.backends.torch_ops import TorchOps
from supergrep.corpus.documents import load_pairs
from supergrep.encoder.encoder import padded_batch
from supergrep.encoder.spec import resolve_model
from supergrep.encoder.tokenize import RoleTokenizer
from supergrep.train.losses.maxsim import maxsim_scores
from supergrep.train.shrink import ranking


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pairs")
    ap.add_argument("layers", nargs="+", help="comma-separated layer choices, e.g. 0,2,4")
    ap.add_argument("--model-path", default=None)
    ap.add_argument("--val", type=int, default=200, help="held-out pairs (split == 'val') in the pool")
    ap.add_argument("--max-document-tokens", type=int, default=128)
    args = ap.parse_args()
    spec = resolve_model(args.model_path)
    settings = dataclasses.replace(spec.settings, document_max_tokens=args.max_document_tokens)
    tok = RoleTokenizer(dataclasses.replace(spec, settings=settings))
    val = [p for p in load_pairs(args.pairs) if p.split == "val"][: args.val]
    q, d = tok([p.query for p in val], "query"), tok([p.document() for p in val], "document")
    teacher = load_transformer(spec, torch.float32).eval()
    head = torch.nn.Sequential(*[build_dense(x) for x in spec.dense]).eval()
    ops = TorchOps("cpu")

    def encode(model, ids, role):
        i, m, k = padded_batch(ids, role, settings, tok)
        with torch.no_grad():
            h = model(input_ids=torch.from_numpy(i), attention_mask=torch.from_numpy(m)).last_hidden_state
            return torch.nn.functional.normalize(head(h), dim=-1), torch.from_numpy(k)  # (B, L, dim), (B, L)

    tq, qk = encode(teacher, q, "query")
    td, dk = encode(teacher, d, "document")
    ts = maxsim_scores(ops, tq, qk, td, dk).numpy()
    print(f"{len(val)} held-out pairs; the full model's MRR {ranking(ts, ts)['mrr']:.3f}")
    for choice in args.layers:
        student = keep_layers(copy.deepcopy(teacher), [int(x) for x in choice.split(",")])
        sq, _ = encode(student, q, "query")
        sd, _ = encode(student, d, "document")
        cos = torch.cat([(sq * tq).sum(-1)[qk], (sd * td).sum(-1)[dk]])
        r = ranking(maxsim_scores(ops, sq, qk, sd, dk).numpy(), ts)
        print(f"{choice}: token cosine {cos.mean():.4f} (min {cos.min():.3f}), top-10 agreement "
              f"{r['agreement_at_10']:.3f}, MRR {r['mrr']:.3f}", flush=True)


if __name__ == "__main__":
    main()
