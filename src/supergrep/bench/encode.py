"""`supergrep bench encode`: index-time encoding speed.

- ``forward``: the backend's forward pass (the dtype it picks: bf16 on CUDA, fp32 on CPU) over
  synthetic documents with the mined-code length distribution, batched as the Encoder batches
  (longest first under its padded-token budget), vectors copied back to the host as indexing
  does. tokens/s counts useful tokens; MFU uses the forward formula of ``flops.py``.
- ``index``: a whole ``supergrep index`` run (walk, chunk, tokenise, encode, store) over a
  directory (default: this package's source), from scratch: lines/s as `index` prints it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from supergrep.bench.flops import ModelFlops, attention_shape, measure_peak
from supergrep.bench.workloads import Workload, sample_lengths
from supergrep.train.memory import MemoryRecorder


def encoder_flops(backend, dim: int) -> ModelFlops:
    from torch import nn

    n = sum(m.in_features * m.out_features for name, m in backend.model.named_modules()
            if isinstance(m, nn.Linear) and not name.startswith("pooler"))
    n += sum(m.in_features * m.out_features for m in backend.head.modules() if isinstance(m, nn.Linear))
    layers, d_attn = attention_shape(backend.model.config)
    return ModelFlops(n, 0, layers, d_attn, dim)


def run_encode_bench(wl: Workload, device: str = "auto", n_docs: int = 2000, index_root: Path | None = None,
                     batch_tokens: int = 0, doc_cap: int | None = None, seed: int = 0,
                     peak: dict | None = None) -> dict:
    from supergrep.encoder.encoder import Encoder, length_batches
    from supergrep.encoder.spec import resolve_model

    spec = resolve_model(wl.model_dir)
    enc = Encoder(spec, device=device, batch_tokens=batch_tokens)
    backend = enc.backend
    dev = backend.device
    peak = peak or measure_peak(dev)
    cap = doc_cap or spec.settings.document_max_tokens
    mf = encoder_flops(backend, spec.dim)
    rng = np.random.default_rng(seed)
    lengths = sample_lengths(n_docs, cap, rng)
    docs = [rng.integers(1000 if wl.vocab > 2000 else 5, wl.vocab, size=int(n)) for n in lengths]
    batches = length_batches([len(d) for d in docs], enc.batch_tokens)
    memory = MemoryRecorder(device=dev)

    def run(subset) -> None:
        for rows in subset:
            width = len(docs[rows[0]])
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for i, r in enumerate(rows):
                ids[i, : len(docs[r])] = docs[r]
                mask[i, : len(docs[r])] = 1
            backend.forward(ids, mask)  # includes the copy back to the host
            memory.sample(len(memory.samples))

    run(batches[: max(1, len(batches) // 10)])  # warm-up: kernels, allocator
    t = time.perf_counter()
    run(batches)
    seconds = time.perf_counter() - t
    tokens = int(lengths.sum())
    flops = mf.encode(lengths.tolist())
    rows = [{"what": f"forward ({len(batches)} batches, <= {enc.batch_tokens} padded tokens each)",
             "documents": n_docs, "tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds,
             "tflops": flops / seconds / 1e12, "mfu": flops / seconds / peak["flops_per_s"]}]
    if index_root is not None:
        rows.append(index_run(enc, Path(index_root)))
    return {"kind": "encode", "workload": wl.describe(), "device": dev, "dtype": backend.dtype, "peak": peak,
            "doc_cap": cap, "model_flops": mf.to_dict(), "rows": rows, "memory": memory.summary()}


def index_run(enc, root: Path) -> dict:
    from supergrep.config import Config
    from supergrep.index.indexer import update_index
    from supergrep.index.project import Index

    try:
        with tempfile.TemporaryDirectory(prefix="sg-bench-index-") as tmp:
            index = Index(root.resolve(), index_dir=Path(tmp) / "index")
            rep = update_index(index, enc, Config(), force=True)
            close = getattr(index, "close", None)
            if close:
                close()
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return {"what": f"index {root}", "error": f"{type(exc).__name__}: {exc}"[:300], "seconds": 0}
    return {"what": f"index {root.name}/ ({rep.files} files, {rep.chunks} chunks)", "documents": rep.chunks_embedded,
            "lines": rep.lines_indexed, "seconds": rep.seconds, "lines_per_s": rep.lines_per_s}
