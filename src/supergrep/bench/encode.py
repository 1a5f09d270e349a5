"""`supergrep bench encode`: index-time encoding speed.

- ``forward``: the Encoder's document path after tokenisation (``Encoder.encode_ids``; the dtype
  the backend picks: bf16 on CUDA, fp32 on CPU) over synthetic documents with the mined-code
  length distribution, vectors copied back to the host and split per document as indexing does,
  in each forward mode: ``padded`` (longest first under a padded-token budget), ``varlen``
  (documents end to end, no padding: the default on CUDA for T5/BERT/RoBERTa), ``varlen+compile``,
  ``varlen+autotune`` (compiled with Inductor's max-autotune: its own GEMM templates, epilogues fused).
  tokens/s counts useful tokens; MFU uses the forward formula of ``flops.py``.
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


MODES = ("padded", "varlen", "varlen+compile", "varlen+autotune")
# Modifiers of the varlen modes, for same-process comparisons: ``half`` hands the host float16
# vectors to convert (the path before 2026-11-24's float32 default); ``fp8`` runs the encoder's
# linear layers as float8 products (torch_fp8.py), with ``fp8t`` one scale per tensor instead of per
# row and ``f32acc`` without the tensor cores' fast accumulation (with fp8 or fp8t); ``pageable`` uploads the
# inputs from pageable memory (the path before pinned input buffers).
MODIFIERS = ("half", "fp8", "fp8t", "f32acc", "pageable")


def fp8_options(mods: set[str]):
    from supergrep.backends.torch_fp8 import Fp8Options

    return Fp8Options("tensor" if "fp8t" in mods else "row", fast_accum="f32acc" not in mods)


def parse_mode(mode: str) -> tuple[str, set[str]]:
    """``varlen+compile+half`` -> ("varlen+compile", {"half"}); ValueError for unknown parts."""
    parts = mode.split("+")
    mods = {p for p in parts if p in MODIFIERS}
    base = "+".join(p for p in parts if p not in MODIFIERS)
    if base not in MODES or (mods and base == "padded") or ("f32acc" in mods and not {"fp8", "fp8t"} & mods):
        raise ValueError(f"unknown encode mode {mode!r}; choose from {', '.join(MODES)}, the varlen ones "
                         f"optionally with +{' +'.join(MODIFIERS)}")
    return base, mods


class _FlatTimer:
    """Where a varlen mode's wall time goes, without adding a host sync: the GPU time of each flat
    forward (CUDA events around it, read after the run) and the host's time blocked waiting for
    results. GPU time near the wall means the GPU bounds the run; far below, the host does."""

    def __init__(self, backend):
        self.backend, self.events, self.wait_s = backend, [], 0.0

    def __enter__(self):
        import torch

        be, timer = self.backend, self
        run, submit = be._run_flat, be.submit_flat

        def timed_run(*a, **kw):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = run(*a, **kw)
            end.record()
            timer.events.append((start, end))
            return out

        def timed_submit(*a, **kw):
            if timer.first_submit_s is None:
                timer.first_submit_s = time.perf_counter() - timer.t0
            pending = submit(*a, **kw)
            result = pending.result

            def waited():
                t = time.perf_counter()
                value = result()
                timer.wait_s += time.perf_counter() - t
                timer.last_result_s = time.perf_counter() - timer.t0
                return value

            pending.result = waited
            return pending

        be._run_flat, be.submit_flat = timed_run, timed_submit
        self.bounds = [torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)]
        self.bounds[0].record()  # the GPU's clock when the timed run starts ...
        self.t0, self.first_submit_s, self.last_result_s = time.perf_counter(), None, None
        return self

    def __exit__(self, *exc):
        self.bounds[1].record()  # ... and when the host has every vector
        self.end_s = time.perf_counter() - self.t0
        del self.backend._run_flat, self.backend.submit_flat  # the class's own again

    def gpu_s(self) -> float:
        import torch

        torch.cuda.synchronize()
        return sum(a.elapsed_time(b) for a, b in self.events) / 1000

    def gaps(self) -> dict:
        """The GPU's idle time between consecutive forwards (each end event to the next start
        event), in total and the largest few with their call index: where the wall's idle goes
        (between calls, or before the first / after the last)."""
        import torch

        torch.cuda.synchronize()
        ms = [self.events[i - 1][1].elapsed_time(self.events[i][0]) for i in range(1, len(self.events))]
        top = sorted(range(len(ms)), key=lambda i: -ms[i])[:5]
        out = {"gpu_gaps_s": sum(ms) / 1000, "gpu_gap_top_ms": [[i + 1, round(ms[i], 2)] for i in top]}
        if self.events:  # idle before the first forward and after the last (host work at the ends)
            out["gpu_idle_before_s"] = self.bounds[0].elapsed_time(self.events[0][0]) / 1000
            out["gpu_idle_after_s"] = self.events[-1][1].elapsed_time(self.bounds[1]) / 1000
            # on the host's clock: the first submit's start, the last result's return, the end
            out["host_first_submit_s"], out["host_last_result_s"] = self.first_submit_s, self.last_result_s
            out["host_end_s"] = self.end_s
        return out


def with_projection(model_dir: Path, hidden: int, dim: int, seed: int = 0) -> Path:
    """``model_dir`` (a synthetic T5 encoder, which the trainer gives its projection) as
    google/xtr-base-en ships for encoding: the same files plus a random ``2_Dense`` hidden -> dim,
    so the benchmark copies back dim-wide vectors as a real XTR index does. Built once, beside it."""
    import json

    import torch
    from safetensors.torch import save_file

    out = model_dir.parent / f"{model_dir.name}-2_Dense-{dim}"
    if (out / "2_Dense" / "model.safetensors").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    for f in model_dir.iterdir():
        if f.is_file() and not (out / f.name).exists():
            (out / f.name).symlink_to(f.resolve())
    dense = out / "2_Dense"
    dense.mkdir(exist_ok=True)
    (dense / "config.json").write_text(json.dumps({"in_features": hidden, "out_features": dim, "bias": False,
                                                   "activation_function": "torch.nn.modules.linear.Identity"}))
    g = torch.Generator().manual_seed(seed)
    save_file({"linear.weight": torch.randn(dim, hidden, generator=g) / hidden ** 0.5}, str(dense / "model.safetensors"))
    return out


def run_encode_bench(wl: Workload, device: str = "auto", n_docs: int = 2000, index_root: Path | None = None,
                     batch_tokens: int = 0, doc_cap: int | None = None, seed: int = 0,
                     peak: dict | None = None, modes: tuple[str, ...] | None = None) -> dict:
    """One row per forward mode (``padded``: length-sorted padded batches; ``varlen``: documents
    end to end, ``TorchBackend.forward_flat``; ``+compile``: that forward under torch.compile),
    each through ``Encoder.encode_ids`` (batching, the copy back, per-document float32 arrays), then
    the whole-index row. Default modes: the backend's own choice and, where it can, the other."""
    import torch

    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.spec import resolve_model

    spec = resolve_model(wl.model_dir)
    if spec.model_type == "t5" and not spec.dense and wl.projection_dim:
        spec = resolve_model(with_projection(wl.model_dir, spec.hidden_size, wl.projection_dim))
    enc = Encoder(spec, device=device, batch_tokens=batch_tokens)
    backend = enc.backend
    dev = backend.device
    peak = peak or measure_peak(dev)
    cap = doc_cap or spec.settings.document_max_tokens
    mf = encoder_flops(backend, spec.dim)
    rng = np.random.default_rng(seed)
    lengths = sample_lengths(n_docs, cap, rng)
    docs = [rng.integers(1000 if wl.vocab > 2000 else 5, wl.vocab, size=int(n)) for n in lengths]
    memory = MemoryRecorder(device=dev)
    defaults = {k: getattr(backend, k) for k in ("varlen", "_flat", "_flat_compile_after", "flat_host_dtype",
                                                 "flat_pin_inputs")
                if hasattr(backend, k)}
    if modes is None:
        modes = ("padded", "varlen") if defaults.get("varlen") else ("padded",)
    can_varlen = hasattr(backend, "forward_flat") and backend._choose_varlen(spec, True)
    tokens = int(lengths.sum())
    flops = mf.encode(lengths.tolist())
    dyn = getattr(torch, "_dynamo", None)
    for name in ("recompile_limit", "cache_size_limit"):
        # each compiled mode adds entries to the flat forward's cache (its knobs are guarded):
        # past the default limit of 8, later modes would silently run eager
        if dyn is not None and hasattr(dyn.config, name):
            setattr(dyn.config, name, max(getattr(dyn.config, name), 64))
            break
    rows, reference = [], None
    for mode in modes:
        base, mods = parse_mode(mode)
        if mode != "padded" and not can_varlen:
            rows.append({"what": f"forward, {mode}", "error": f"no varlen forward for {spec.model_type} on {dev}",
                         "seconds": 0})
            continue
        if mode == "padded":
            backend.varlen = False
        else:  # this mode's forward from the first batch (no switch to compiled midway)
            backend.flat_host_dtype = torch.float16 if "half" in mods else torch.float32
            if hasattr(backend, "flat_pin_inputs"):
                backend.flat_pin_inputs = "pageable" not in mods
            want_fp8 = bool({"fp8", "fp8t"} & mods)
            fp8_on = backend.set_fp8(want_fp8, fp8_options(mods)) if hasattr(backend, "set_fp8") else False
            if want_fp8 and not fp8_on:
                rows.append({"what": f"forward, {mode}", "error": f"no float8 products on {dev}", "seconds": 0})
                continue
            backend.set_flat_mode(base.partition("+")[2] or "eager")
        calls: list[int] = []  # documents per forward call, as reported through progress

        def run(subset, progress=None) -> list:
            vectors = enc.encode_ids(subset, "document", progress)
            memory.sample(len(memory.samples))
            return vectors

        warm = sorted(docs, key=len, reverse=True)[: max(1, n_docs // 10)]
        t = time.perf_counter()
        run(warm)  # warm-up (kernels, allocator, compilation) on the longest documents
        warmup_s = time.perf_counter() - t
        check = enc.encode_ids(docs[:200], "document")  # each mode's vectors against the first mode's
        reference = check if reference is None else reference
        cos = [np.sum(a * b, axis=1) for a, b in zip(check, reference, strict=True) if len(a)]
        cosine = min((float(c.min()) for c in cos), default=1.0)
        mean_cosine = float(np.concatenate(cos).mean()) if cos else 1.0
        if dev.startswith("cuda"):
            torch.cuda.synchronize()
        timer = _FlatTimer(backend) if backend.varlen and dev.startswith("cuda") else None
        t = time.perf_counter()
        if timer is None:
            vectors = run(docs, calls.append)  # the vectors come back to the host inside, as indexing needs them
        else:
            with timer:
                vectors = run(docs, calls.append)
        seconds = time.perf_counter() - t
        # Freed after the clock stops: giving back the run's vectors (~8 GB of float32 for 100,000
        # xtr-base documents) took 0.32 s of an H100 run's 6.27 s with the GPU idle, a cost of
        # discarding them all at once, which an index run (that writes and frees them batch by
        # batch) does not pay at the end (docs/performance.md, "The encoding run's ends").
        del vectors
        split = {} if timer is None else {"gpu_s": timer.gpu_s(), "host_wait_s": timer.wait_s, **timer.gaps()}
        rows.append({"what": f"forward, {mode} ({len(calls)} calls, <= {enc.batch_tokens} "
                             f"{'real' if backend.varlen else 'padded'} tokens each)",
                     "mode": mode, "documents": n_docs, "tokens": tokens, "seconds": seconds,
                     "tokens_per_s": tokens / seconds, "tflops": flops / seconds / 1e12,
                     "mfu": flops / seconds / peak["flops_per_s"], "min_cosine_vs_first": cosine,
                     "mean_cosine_vs_first": mean_cosine,
                     "warmup_s": warmup_s, "warmup_tokens": int(sum(len(d) for d in warm)), **split})
    for k, v in defaults.items():
        setattr(backend, k, v)
    if hasattr(backend, "set_fp8"):
        backend.set_fp8(False)
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
