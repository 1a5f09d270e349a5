"""Where a compiled training step's time goes on the GPU: a torch.profiler trace of a few steps
of a `bench train` variant, after its warm-up (compilation included), summarised as

- wall ms per step, GPU-busy ms per step (the union of kernel intervals on the device) and their
  ratio: a ratio well under 1 means the GPU waits for the host (launch/Python bound), near 1
  means the kernels themselves set the step;
- the kernels by total device time (top N), and the CPU-side ops by self CPU time.

    python benchmarks/step_trace.py --model-path .gpu/minilm-fp16 --variants bf16+compile,bs=96+bf16+compile \\
        --warmup 15 --steps 8 --out $OUT/trace

Writes ``<out>/<variant>.md`` (the tables) and ``<out>/<variant>.json`` (the figures);
``--chrome`` also writes the Chrome trace (``.json.gz``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import time
from pathlib import Path


def busy_ms(events) -> float:
    """Union of the device-side kernel intervals (ms): overlapping kernels count once."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    total, cur_s, cur_e = 0.0, None, None
    for s, e in spans:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total / 1000.0  # us -> ms


def kernel_group(name: str) -> str:
    """A kernel's family, for the per-step breakdown."""
    if "flex_attention" in name or name.startswith("triton_tem"):
        return "flex attention"
    if "t5_attn_" in name:
        return "varlen attention (ours, Triton)"
    if any(t in name for t in ("nvjet", "gemm", "cutlass", "xmma", "splitKreduce")):
        return "GEMM fp32" if "f32f32" in name else "GEMM bf16"
    if "softmax" in name:
        return "softmax (unfused attention)"
    if name.startswith("triton"):
        return "other Triton (fused elementwise, norms, dropout)"
    return "other (ATen elementwise, reductions, optimizer)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="xtr-base")
    ap.add_argument("--model-path", required=True, help="MiniLM dir (the tokenizer the workloads draw with)")
    ap.add_argument("--variants", default="bf16+compile")
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--work-dir", default="/tmp/sg-trace-work")
    ap.add_argument("--chrome", action="store_true")
    ap.add_argument("--no-profile", default="cudagraphs",
                    help="variants containing this token are timed but not profiled (CUPTI and CUDA graphs "
                         "have crashed together); '' profiles all")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run (no kernel figures)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    from supergrep.bench.train import build_trainer, parse_variant
    from supergrep.bench.workloads import get_workload, make_batches, make_pool

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wl = get_workload(args.workload, Path(args.work_dir), args.model_path)
    for name in [v for v in args.variants.split(",") if v.strip()]:
        v = parse_variant(name)
        bs = v.batch_size or wl.batch_size
        pool = make_pool(wl, bs * (args.warmup + args.steps), 0)
        batches = make_batches(pool, wl, bs, v.batching, v.packing, 0, v.pad_multiple)
        tr = build_trainer(wl, v, args.device, bs)
        cuda = args.device.startswith("cuda")
        sync = torch.cuda.synchronize if cuda else (lambda: None)
        t0 = time.perf_counter()
        for b in batches[: args.warmup]:
            tr.train_step(b, 1e-3)
        sync()
        warm_s = time.perf_counter() - t0
        timed = batches[args.warmup :]
        t0 = time.perf_counter()
        for b in timed:  # unprofiled: the step as `train` runs it
            tr.train_step(b, 1e-3)
        sync()
        plain_ms = (time.perf_counter() - t0) * 1000 / len(timed)
        print(f"{v.name}: step {plain_ms:.1f} ms unprofiled ({bs * 1000 / plain_ms:.1f} samples/s), "
              f"warm-up {warm_s:.0f} s", flush=True)
        safe = v.name.replace("+", "_").replace("=", "")
        if args.no_profile and args.no_profile in v.name:
            (out / f"{safe}.json").write_text(json.dumps({
                "variant": v.name, "batch_size": bs, "steps": len(timed), "warmup_s": warm_s,
                "step_ms_unprofiled": plain_ms, "samples_per_s_unprofiled": bs * 1000 / plain_ms}, indent=1))
            del tr
            torch._dynamo.reset()
            continue
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
            t0 = time.perf_counter()
            for b in timed:
                tr.train_step(b, 1e-3)
            sync()
            wall_ms = (time.perf_counter() - t0) * 1000 / len(timed)
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        busy = busy_ms(kernels) / len(timed) if kernels else 0.0
        n_kernels = len(kernels) / len(timed)
        avg = prof.key_averages()
        # kernels only: a Triton kernel's host-side launcher carries the same name and device time
        by_dev = sorted((a for a in avg if a.self_device_time_total > 0
                         and a.device_type == torch.autograd.DeviceType.CUDA), key=lambda a: -a.self_device_time_total)
        groups: dict[str, list[float]] = {}
        for e in kernels:
            g = groups.setdefault(kernel_group(e.name), [0.0, 0])
            g[0] += e.time_range.elapsed_us() / 1000 / len(timed)
            g[1] += 1 / len(timed)
        by_cpu = sorted(avg, key=lambda a: -a.self_cpu_time_total)
        total_dev = sum(a.self_device_time_total for a in by_dev) or 1.0
        res = {
            "variant": v.name, "batch_size": bs, "steps": len(timed), "warmup_s": warm_s,
            "step_ms_unprofiled": plain_ms, "step_ms_profiled": wall_ms, "gpu_busy_ms": busy,
            "gpu_busy_fraction": busy / wall_ms, "kernels_per_step": n_kernels,
            "samples_per_s_unprofiled": bs * 1000 / plain_ms,
            "kernel_groups": {k: {"ms_per_step": v[0], "calls_per_step": v[1]} for k, v in
                              sorted(groups.items(), key=lambda kv: -kv[1][0])},
            "top_device": [{"name": a.key, "ms_per_step": a.self_device_time_total / 1000 / len(timed),
                            "share": a.self_device_time_total / total_dev, "calls_per_step": a.count / len(timed)}
                           for a in by_dev[: args.top]],
            "top_cpu": [{"name": a.key, "ms_per_step": a.self_cpu_time_total / 1000 / len(timed),
                         "calls_per_step": a.count / len(timed)} for a in by_cpu[: args.top]],
        }
        (out / f"{safe}.json").write_text(json.dumps(res, indent=1))
        lines = [f"# {v.name} ({args.workload}, batch {bs})", "",
                 f"step {plain_ms:.1f} ms unprofiled ({res['samples_per_s_unprofiled']:.1f} samples/s), "
                 f"{wall_ms:.1f} ms profiled; GPU busy {busy:.1f} ms/step = {busy / wall_ms:.0%}; "
                 f"{n_kernels:.0f} kernels/step; warm-up {warm_s:.0f} s", "",
                 "| kernel group | ms/step | calls/step |", "|---|---|---|"]
        lines += [f"| {k} | {v['ms_per_step']:.2f} | {v['calls_per_step']:.0f} |" for k, v in res["kernel_groups"].items()]
        lines += ["", "| kernel (device) | ms/step | share | calls/step |", "|---|---|---|---|"]
        lines += [f"| {r['name'][:90]} | {r['ms_per_step']:.2f} | {r['share']:.1%} | {r['calls_per_step']:.0f} |"
                  for r in res["top_device"]]
        lines += ["", "| op (host) | self CPU ms/step | calls/step |", "|---|---|---|"]
        lines += [f"| {r['name'][:90]} | {r['ms_per_step']:.2f} | {r['calls_per_step']:.0f} |" for r in res["top_cpu"]]
        (out / f"{safe}.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines[:3]), flush=True)
        if args.chrome:
            tmp = out / f"{safe}.trace.json"
            prof.export_chrome_trace(str(tmp))
            with open(tmp, "rb") as f, gzip.open(str(tmp) + ".gz", "wb") as g:
                shutil.copyfileobj(f, g)
            tmp.unlink()
        del tr
        torch._dynamo.reset()
        if cuda:
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
