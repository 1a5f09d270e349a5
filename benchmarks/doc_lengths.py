"""The document-length distribution of real mined code chunks, for the bench's reference workloads.

Reads a pairs file from `supergrep mine` (the `train` rows), builds each document exactly as
training does (`Pair.document()`: "<path> <symbol>\\n<code>"), tokenises a seeded sample with
the default model's tokenizer (all-MiniLM-L6-v2's WordPiece, [CLS] and [SEP] included; the only
code-capable tokenizer available offline here: google/xtr-base-en's sentencepiece model is not)
without truncation, caps at --cap and writes a histogram as JSON.

    python benchmarks/doc_lengths.py /work/wt-mine/.cache/corpus/pairs.jsonl \
        -o src/supergrep/bench/doc_lengths.json --sample 50000
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("pairs", type=Path)
    ap.add_argument("-o", "--out", type=Path, required=True)
    ap.add_argument("--sample", type=int, default=50_000)
    ap.add_argument("--cap", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from transformers import AutoTokenizer

    from supergrep.corpus.documents import load_pairs
    from supergrep.encoder.spec import default_model_dir

    pairs = load_pairs(args.pairs, split="train")
    rng = np.random.default_rng(args.seed)
    pick = rng.choice(len(pairs), min(args.sample, len(pairs)), replace=False)
    docs = [pairs[int(i)].document() for i in pick]
    langs = [pairs[int(i)].language for i in pick]
    tok = AutoTokenizer.from_pretrained(str(default_model_dir()), local_files_only=True)
    enc = tok.backend_tokenizer
    enc.no_truncation()
    enc.no_padding()  # the MiniLM tokenizer.json pads to 128 by default
    lengths = np.array([len(e.ids) for e in enc.encode_batch(docs)])  # [CLS] ... [SEP]
    capped = np.minimum(lengths, args.cap)
    counts = np.bincount(capped, minlength=args.cap + 1)
    by_lang = {}
    for lang in sorted(set(langs)):
        sel = np.array([x == lang for x in langs])
        if sel.sum() >= 100:
            by_lang[lang] = {"n": int(sel.sum()), "median": float(np.median(capped[sel])),
                             "mean": float(capped[sel].mean())}
    out = {
        "source": f"{args.pairs.name}: {len(pairs)} train pairs of `supergrep mine`, seeded sample of {len(docs)}",
        "document": "Pair.document(): '<path> <symbol>\\n<code>', as training and the index build it",
        "tokenizer": "all-MiniLM-L6-v2 WordPiece (bert-base-uncased vocabulary), [CLS]/[SEP] counted",
        "cap": args.cap,
        "share_over_cap": float((lengths > args.cap).mean()),
        "mean": float(capped.mean()), "median": float(np.median(capped)),
        "p90": float(np.percentile(capped, 90)), "p99": float(np.percentile(capped, 99)),
        "uncapped_mean": float(lengths.mean()),
        "by_language": by_lang,
        # counts[L] = documents of length L tokens after capping (index 0 unused)
        "counts": counts.tolist(),
    }
    args.out.write_text(json.dumps(out, indent=None, separators=(",", ":")) + "\n")
    print({k: v for k, v in out.items() if k not in ("counts", "by_language")})


if __name__ == "__main__":
    main()
