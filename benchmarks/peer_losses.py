"""Ours vs the sentence-transformers peer from one `bench train` JSON: samples/s and the loss
curves (mean over windows of steps, warm-up steps included: every variant trains on the same
batches from the same start, so step i is comparable across rows of the same batch size).

    python benchmarks/peer_losses.py OUT/train-xtr-base.json
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> None:
    rows = [r for r in json.load(open(path))["rows"] if r.get("losses")]
    peers = [r for r in rows if r.get("system") == "sentence-transformers"]
    if not peers:
        print("no peer row")
        return
    n = min(len(r["losses"]) for r in rows)
    w = max(1, n // 5)
    windows = [(a, min(a + w, n)) for a in range(0, n, w)]
    print("| variant | batch | samples/s | x peer | init | " + " | ".join(f"loss {a}-{b - 1}" for a, b in windows) + " |")
    print("|---|---|---|---|---|" + "---|" * len(windows))
    peer = max(peers, key=lambda r: r["samples_per_s"])
    for r in rows:
        means = [sum(r["losses"][a:b]) / (b - a) for a, b in windows]
        init = r.get("peer_init", "ours") if r in peers else "ours"
        print(f"| {r['variant']} | {r['batch_size']} | {r['samples_per_s']:.1f} | "
              f"{r['samples_per_s'] / peer['samples_per_s']:.2f}x | {init} | " + " | ".join(f"{m:.3f}" for m in means) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
