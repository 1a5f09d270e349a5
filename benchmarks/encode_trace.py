"""Where index-time encoding's time goes on the GPU (`bench encode`'s varlen modes): one batch of
``--tokens`` real tokens (documents drawn from the mined-code lengths, in random order), timed in
parts with device syncs between them, then a torch.profiler trace of a few calls summarised by
kernel family (step_trace.py's groups):

- ``gpu``: the flat forward (embeddings .. normalised vectors) between CUDA events;
- ``copy``: the vectors to the host (``.cpu()``);
- ``split``: the Encoder's host work, one float32 array per document;
- wall of ``Encoder.encode_ids`` on the same documents, and GPU-busy ms per call in the trace;
- with ``--stream K``: one ``encode_ids`` over K calls' worth of documents (as `bench encode` and
  `index` run them, each call queued while the host splits the previous one), profiled: the GPU's
  busy share of the wall and its idle gaps by what the host was doing (``sg::submit_flat``,
  ``sg::wait_result``; no label = the Encoder's own host work: concatenating, splitting).

    python benchmarks/encode_trace.py --model-path .gpu/minilm-fp16 --workload xtr-base --modes varlen,varlen+compile --out $OUT/encode-trace
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "src"))
from step_trace import busy_ms, gap_table, idle_gaps, is_annotation, kernel_group  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="xtr-base")
    ap.add_argument("--model-path", required=True)
    ap.add_argument("--work-dir", default="/tmp/sg-bench-work")
    ap.add_argument("--modes", default="varlen,varlen+compile")
    ap.add_argument("--tokens", type=int, default=131072)
    ap.add_argument("--doc-cap", type=int, default=512)
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--stream", type=int, default=0, help="also profile one encode_ids over this many calls")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import torch

    from supergrep.bench.encode import with_projection
    from supergrep.bench.workloads import get_workload, sample_lengths
    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.spec import resolve_model

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wl = get_workload(args.workload, Path(args.work_dir), args.model_path, None, args.doc_cap)
    spec = resolve_model(wl.model_dir)
    if spec.model_type == "t5" and not spec.dense:
        spec = resolve_model(with_projection(wl.model_dir, spec.hidden_size, wl.projection_dim))
    enc = Encoder(spec, device="cuda", batch_tokens=args.tokens)
    be = enc.backend
    rng = np.random.default_rng(0)
    lengths = sample_lengths(4 * args.tokens // 100, args.doc_cap, rng)
    keep = np.cumsum(lengths) <= args.tokens
    lengths = lengths[keep]
    docs = [rng.integers(1000, wl.vocab, size=int(n)) for n in lengths]
    flat = np.concatenate(docs)
    report = {"workload": wl.name, "dim": spec.dim, "documents": len(docs), "tokens": int(lengths.sum()),
              "max_len": int(lengths.max()), "modes": {}}
    from supergrep.bench.encode import fp8_options, parse_mode

    for mode in args.modes.split(","):
        base, mods = parse_mode(mode)  # modifiers as in `bench encode`: +half, +fp8, +fp8t, +f32acc, +pageable
        be.flat_host_dtype = torch.float16 if "half" in mods else torch.float32
        be.set_fp8(bool({"fp8", "fp8t"} & mods), fp8_options(mods))
        be.flat_pin_inputs = "pageable" not in mods
        be.set_flat_mode(base.partition("+")[2] or "eager")
        cu = np.zeros(len(lengths) + 1, np.int32)
        np.cumsum(lengths, out=cu[1:])
        pos = np.arange(len(flat)) - np.repeat(cu[:-1].astype(np.int64), lengths)
        ids_t, cu_t, pos_t = (torch.from_numpy(a).cuda() for a in (flat, cu, pos))
        max_len = -(-int(lengths.max()) // 64) * 64
        for _ in range(3):  # warm-up (compilation)
            enc.encode_ids(docs, "document")
        parts = {"gpu": [], "copy": [], "split": [], "encode_ids": []}
        for _ in range(args.calls):
            with torch.inference_mode():
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                a.record()
                vecs = be._flat(ids_t, cu_t, pos_t, max_len)
                b.record()
                torch.cuda.synchronize()
                parts["gpu"].append(a.elapsed_time(b))
                t = time.perf_counter()
                host = vecs.cpu().numpy()
                parts["copy"].append(1000 * (time.perf_counter() - t))
            t = time.perf_counter()
            at = 0
            for n in lengths:
                np.ascontiguousarray(host[at:at + n], dtype=np.float32)
                at += n
            parts["split"].append(1000 * (time.perf_counter() - t))
            t = time.perf_counter()
            enc.encode_ids(docs, "document")
            parts["encode_ids"].append(1000 * (time.perf_counter() - t))
        ms = {k: float(np.median(v)) for k, v in parts.items()}
        flops = report_flops(be, spec, lengths)
        ms["gpu_tflops"] = flops / ms["gpu"] / 1e9
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                enc.encode_ids(docs, "document")
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type.name == "CUDA" and not is_annotation(e)]
        groups: dict[str, float] = {}
        for e in kernels:
            groups[kernel_group(e.name)] = groups.get(kernel_group(e.name), 0.0) + e.device_time / 1000 / 3
        top: dict[str, float] = {}
        for e in kernels:
            top[e.name[:90]] = top.get(e.name[:90], 0.0) + e.device_time / 1000 / 3
        ms["busy_per_call"] = busy_ms(kernels) / 3
        report["modes"][mode] = {"ms": ms, "groups_ms": dict(sorted(groups.items(), key=lambda x: -x[1])),
                                 "top_kernels_ms": dict(sorted(top.items(), key=lambda x: -x[1])[:25])}
        if args.stream:
            report["modes"][mode]["stream"] = stream_gaps(enc, wl, args, rng)
        print(mode, json.dumps(report["modes"][mode], indent=1), flush=True)
    (out / f"encode-trace-{wl.name}.json").write_text(json.dumps(report, indent=1))


def stream_gaps(enc, wl, args, rng) -> dict:
    """One encode_ids over ``args.stream`` calls' worth of fresh documents, profiled: where the GPU
    waits between calls, and what the host was doing then."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from supergrep.bench.workloads import sample_lengths

    lengths = sample_lengths(4 * args.tokens * args.stream // 100, args.doc_cap, rng)
    docs = [rng.integers(1000, wl.vocab, size=int(n)) for n in lengths]
    enc.encode_ids(docs[: len(docs) // 4], "document")  # this size's compiled variants, the allocator
    torch.cuda.synchronize()
    t = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        enc.encode_ids(docs, "document")
        torch.cuda.synchronize()
    wall_ms = 1000 * (time.perf_counter() - t)
    events = prof.events()
    kernels = [e for e in events if e.device_type.name == "CUDA" and not is_annotation(e)]
    cpu = [e for e in events if e.device_type.name == "CPU"]
    gaps = idle_gaps(kernels, cpu, min_us=20.0)
    first = min(e.time_range.start for e in kernels)
    last = max(e.time_range.end for e in kernels)
    calls = sum(1 for e in cpu if e.name == "sg::submit_flat")
    busy = busy_ms(kernels)
    res = {"tokens": int(lengths.sum()), "calls": calls, "wall_ms_profiled": wall_ms,
           "kernel_span_ms": (last - first) / 1000, "busy_ms": busy,
           "busy_share_of_span": busy / ((last - first) / 1000), "idle_gaps_ms": sum(g["ms"] for g in gaps),
           "gaps": len(gaps), "by_host": gap_table(gaps, 1, top=12),
           "largest": sorted(({"ms": g["ms"], "host": g["host"][-4:]} for g in gaps), key=lambda g: -g["ms"])[:12]}
    print("stream:", json.dumps(res, indent=1), flush=True)
    return res


def report_flops(backend, spec, lengths) -> float:
    from supergrep.bench.encode import encoder_flops

    return encoder_flops(backend, spec.dim).encode(lengths.tolist())


if __name__ == "__main__":
    main()
