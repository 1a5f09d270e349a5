"""Helpers of benchmarks/gpu_distributed.sh: the xtr-base-shaped workload and the summary.

    python3 benchmarks/gpu_distributed.py prepare DIR [--tiny]   # DIR/model (random T5 + 2_Dense), DIR/pairs.jsonl
    python3 benchmarks/gpu_distributed.py summarize DIR OUT.json  # DIR/runs/*/ -> samples/s, speed-ups, loss curves

The model has google/xtr-base-en's shape with random weights (T5 encoder: d_model 768, 12
layers, 12 heads, d_ff 2048 gated-GELU, vocab 32128; a 768->128 ``2_Dense`` head, trained in
place as XTR's); its sentencepiece tokenizer is trained on the synthetic corpus (the machine
has no network). Pairs are learnable: each query is words of its document, documents run from
a few dozen to over 512 tokens (cut at 512), so batches are length-bucketed as real ones are.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import numpy as np

XTR_BASE = dict(vocab_size=32128, d_model=768, d_kv=64, d_ff=2048, num_layers=12, num_heads=12)
TINY = dict(vocab_size=2000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)


def _words(rnd: random.Random, n: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    out: set[str] = set()
    while len(out) < n:
        out.add("".join(rnd.choice(letters) for _ in range(rnd.randint(3, 9))))
    return sorted(out)


def make_pairs(path: Path, n_pairs: int, seed: int = 0) -> list[str]:
    """Synthetic (query -> document) pairs; returns some lines of text for the tokenizer."""
    rnd = random.Random(seed)
    vocab = _words(rnd, 6000)
    zipf = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, len(vocab) + 1) ** 0.8
    weights /= weights.sum()
    rows, sample = [], []
    for i in range(n_pairs):
        n_words = int(np.exp(rnd.uniform(np.log(20), np.log(420))))  # log-uniform: 20..420 words
        doc = [vocab[j] for j in zipf.choice(len(vocab), n_words, p=weights)]
        lines = [" ".join(doc[k : k + 10]) for k in range(0, len(doc), 10)]
        code = f"def f_{i}(x):\n" + "\n".join("    " + line for line in lines)
        query = " ".join(rnd.sample(doc, min(len(doc), rnd.randint(6, 16))))
        rows.append(json.dumps({"query": query, "code": code, "path": f"pkg/m{i % 97}.py", "symbol": f"f_{i}",
                                "language": "python", "split": "train"}))
        if i < 3000:
            sample += lines
    path.write_text("\n".join(rows) + "\n")
    return sample


def make_model(path: Path, sample: list[str], shape: dict, seed: int = 0) -> None:
    import sentencepiece as spm
    import torch
    from safetensors.torch import save_file
    from transformers import T5Config, T5EncoderModel, T5TokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    text = path / "corpus.txt"
    text.write_text("\n".join(sample))
    spm_vocab = min(8000, shape["vocab_size"] - 100)
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(path / "spiece"), vocab_size=spm_vocab,
                                   hard_vocab_limit=False, model_type="unigram", pad_id=0, eos_id=1, unk_id=2,
                                   bos_id=-1, character_coverage=1.0, minloglevel=2)
    text.unlink()
    tok = T5TokenizerFast(vocab_file=str(path / "spiece.model"), extra_ids=0)
    tok.save_pretrained(str(path))
    torch.manual_seed(seed)
    cfg = T5Config(**shape, feed_forward_proj="gated-gelu", decoder_start_token_id=0)
    T5EncoderModel(cfg).save_pretrained(str(path))
    (path / "generation_config.json").unlink(missing_ok=True)
    dense = path / "2_Dense"
    dense.mkdir(exist_ok=True)
    g = torch.Generator().manual_seed(seed + 1)
    w = torch.randn(128, shape["d_model"], generator=g) / shape["d_model"] ** 0.5
    save_file({"linear.weight": w.contiguous()}, str(dense / "model.safetensors"))
    (dense / "config.json").write_text(json.dumps({"in_features": shape["d_model"], "out_features": 128,
                                                   "bias": False,
                                                   "activation_function": "torch.nn.modules.linear.Identity"}))


def prepare(out: Path, tiny: bool, n_pairs: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    sample = make_pairs(out / "pairs.jsonl", n_pairs)
    make_model(out / "model", sample, TINY if tiny else XTR_BASE)
    print(f"prepared {out}/model ({'tiny' if tiny else 'xtr-base shape'}) and {n_pairs} pairs")


def read_run(run: Path, warmup_share: float = 0.25) -> dict:
    meta = json.loads((run / "bench.json").read_text())
    events = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [e for e in events if e.get("kind") == "train"]
    summary = next((e for e in events if e.get("kind") == "summary"), {})
    batch = meta["global_batch"]
    steps = [e["step"] for e in train]
    # Steady state: the logged windows after the first quarter of the steps (start-up, allocator,
    # kernel autotuning), their samples over their time.
    cut = warmup_share * (steps[-1] if steps else 0)
    prev, samples, seconds = 0, 0.0, 0.0
    for e in train:
        n = (e["step"] - prev) * batch
        if e["step"] > cut and e["samples_per_s"] > 0:
            samples += n
            seconds += n / e["samples_per_s"]
        prev = e["step"]
    return {
        **meta,
        "steps": steps[-1] if steps else 0,
        "samples_per_s": samples / seconds if seconds else None,
        "samples_per_s_whole_run": summary.get("samples_per_s"),
        "peak_gpu_bytes": max((e.get("peak_bytes", 0) for e in train), default=None),
        "loss_per_sample_seen": [[e["step"] * batch, round(e["loss"], 5)] for e in train],
    }


def _curve_gap(a: list, b: list) -> dict | None:
    """Two runs over the same global batches: how far apart their loss curves are."""
    da, db = dict((int(s), v) for s, v in a), dict((int(s), v) for s, v in b)
    common = sorted(set(da) & set(db))
    if not common:
        return None
    diff = np.array([da[s] - db[s] for s in common])
    late = common[len(common) // 4 :]
    return {"points": len(common), "max_abs_diff": float(np.abs(diff).max()),
            "mean_abs_diff": float(np.abs(diff).mean()),
            "mean_loss": float(np.mean([db[s] for s in common])),
            "final_quarter_means": [float(np.mean([da[s] for s in late])), float(np.mean([db[s] for s in late]))]}


def summarize(root: Path, out: Path) -> dict:
    runs = {p.name: read_run(p) for p in sorted((root / "runs").iterdir()) if (p / "bench.json").is_file()
            and (p / "metrics.jsonl").is_file()}
    by = {(r["gpus"], r["global_batch"]): r for r in runs.values()}
    scaling, parity = {}, {}
    for (gpus, batch), r in sorted(by.items()):
        base = by.get((1, r["per_gpu_batch"]))  # weak scaling: one GPU with the same per-GPU batch
        if gpus > 1 and base and base["samples_per_s"] and r["samples_per_s"]:
            scaling[f"{gpus}_gpus"] = {"samples_per_s": r["samples_per_s"], "one_gpu_samples_per_s": base["samples_per_s"],
                                       "speedup": r["samples_per_s"] / base["samples_per_s"],
                                       "efficiency": r["samples_per_s"] / base["samples_per_s"] / gpus,
                                       "target": {2: 1.8, 4: 3.4}.get(gpus)}
        ref = by.get((1, batch))  # the same global batches on one GPU
        if gpus > 1 and ref:
            parity[f"{gpus}_gpus_vs_1_gpu_batch_{batch}"] = _curve_gap(r["loss_per_sample_seen"],
                                                                      ref["loss_per_sample_seen"])
    result = {"workload": "xtr-base shape (T5 encoder 768x12, d_ff 2048 gated-GELU, vocab 32128, random init), "
                          "2_Dense 768->128 trained, LoRA r16 alpha32 on q,k,v,o,wi_0,wi_1,wo, query 32 tokens, "
                          "documents up to 512",
              "scaling": scaling, "loss_parity": parity, "runs": runs}
    out.write_text(json.dumps(result, indent=2) + "\n")
    for name, s in scaling.items():
        print(f"{name}: {s['samples_per_s']:.1f} samples/s vs {s['one_gpu_samples_per_s']:.1f} on 1 GPU: "
              f"x{s['speedup']:.2f} (target x{s['target']})")
    for name, p in parity.items():
        if p:
            print(f"loss {name}: mean |diff| {p['mean_abs_diff']:.4f} (max {p['max_abs_diff']:.4f}) "
                  f"on a mean loss of {p['mean_loss']:.3f}")
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("dir", type=Path)
    p.add_argument("--tiny", action="store_true", help="a 2-layer 64-wide model (CPU smoke test)")
    p.add_argument("--pairs", type=int, default=12000)
    s = sub.add_parser("summarize")
    s.add_argument("dir", type=Path)
    s.add_argument("out", type=Path)
    args = ap.parse_args()
    if args.cmd == "prepare":
        prepare(args.dir, args.tiny, args.pairs)
    else:
        summarize(args.dir, args.out)


if __name__ == "__main__":
    main()
