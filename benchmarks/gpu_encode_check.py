"""Check and time the Encoder on an accelerator against CPU reference vectors.

Two steps, two machines:

    # here (CPU): reference vectors of a sample, from the same model directory
    python benchmarks/gpu_encode_check.py reference --model .gpu/minilm-fp16 --texts .gpu/texts.jsonl \
        --queries eval/public/queries.jsonl --out .gpu/reference.npz
    # on the GPU machine: device selection, dtype, parity with the reference, throughput
    python benchmarks/gpu_encode_check.py check --model .gpu/minilm-fp16 --texts .gpu/texts.jsonl \
        --queries eval/public/queries.jsonl --reference .gpu/reference.npz --out $OUT/gpu-encode.json

``texts.jsonl`` holds one ``{"text": ..., "lines": ...}`` per chunk, as the indexer embeds it.
Parity: mean per-token cosine between device and CPU vectors, and whether the MaxSim ranking of
the sample documents for each query is the same. Throughput: documents, tokens and source lines
per second for several padded-token batch budgets (device-synchronised by reading results back).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from supergrep.encoder.encoder import Encoder
from supergrep.encoder.spec import resolve_model
from supergrep.evaluation.queries import load_queries
from supergrep.scoring.maxsim import maxsim

N_DOCS = 64
N_QUERIES = 16


def load_texts(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pack(mats: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([len(m) for m in mats], dtype=np.int64)
    return np.concatenate(mats).astype(np.float32), lengths


def unpack(flat: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    return np.split(flat, np.cumsum(lengths)[:-1])


def sample(args) -> tuple[list[str], list[str]]:
    texts = [t["text"] for t in load_texts(args.texts)][:N_DOCS]
    queries = [q.query for q in load_queries(args.queries)][:N_QUERIES]
    return texts, queries


def reference(args) -> None:
    enc = Encoder(resolve_model(args.model), device="cpu")
    texts, queries = sample(args)
    d_flat, d_len = pack(enc.encode_documents(texts))
    q_flat, q_len = pack(enc.encode_queries(queries))
    np.savez(args.out, d_flat=d_flat, d_len=d_len, q_flat=q_flat, q_len=q_len)
    print(f"wrote {args.out}: {len(texts)} documents, {len(queries)} queries")


def check(args) -> None:
    import torch

    enc = Encoder(resolve_model(args.model), device=args.device)
    out: dict = {
        "device": enc.backend.device, "dtype": enc.backend.dtype, "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    texts, queries = sample(args)
    ref = np.load(args.reference)
    ref_d = unpack(ref["d_flat"], ref["d_len"])
    ref_q = unpack(ref["q_flat"], ref["q_len"])
    got_d = enc.encode_documents(texts)
    got_q = enc.encode_queries(queries)
    assert [len(x) for x in got_d] == ref["d_len"].tolist(), "token counts differ from the CPU reference"
    cos = np.concatenate([(a * b).sum(1) for a, b in zip(got_d + got_q, ref_d + ref_q, strict=True)])
    same_top = 0
    for qg, qr in zip(got_q, ref_q, strict=True):
        sg = [maxsim(qg, d) for d in got_d]
        sr = [maxsim(qr, d) for d in ref_d]
        same_top += int(np.argmax(sg) == np.argmax(sr))
    out["parity"] = {"mean_token_cosine": float(cos.mean()), "min_token_cosine": float(cos.min()),
                     "same_top1_of_64": f"{same_top}/{len(got_q)}"}

    all_texts = load_texts(args.texts)
    docs = [t["text"] for t in all_texts] * args.repeat
    lines = sum(t["lines"] for t in all_texts) * args.repeat
    n_tokens = sum(enc.count_tokens(docs[: len(all_texts)], "document")) * args.repeat
    out["corpus"] = {"documents": len(docs), "lines": lines, "tokens_untruncated": n_tokens}
    out["throughput"] = []
    for budget in args.batch_tokens:
        enc.batch_tokens = budget
        enc.encode_documents(docs[:256])  # warm-up: kernels, allocator
        t = time.perf_counter()
        vecs = enc.encode_documents(docs)  # results come back to the host: synchronised
        dt = time.perf_counter() - t
        toks = sum(len(v) for v in vecs)
        out["throughput"].append({"batch_tokens": budget, "seconds": round(dt, 3),
                                  "docs_per_s": round(len(docs) / dt, 1),
                                  "tokens_per_s": round(toks / dt), "lines_per_s": round(lines / dt)})
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if out["parity"]["mean_token_cosine"] < 0.99:
        raise SystemExit("parity check failed: mean token cosine < 0.99")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=["reference", "check"])
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--texts", type=Path, required=True)
    ap.add_argument("--queries", type=Path, default=Path("eval/public/queries.jsonl"))
    ap.add_argument("--reference", type=Path)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--repeat", type=int, default=8)
    ap.add_argument("--batch-tokens", type=int, nargs="+", default=[8192, 32768, 131072])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    reference(args) if args.step == "reference" else check(args)


if __name__ == "__main__":
    main()
