"""Where a compiled training step's time goes on the GPU: a torch.profiler trace of a few steps
of a `bench train` variant, after its warm-up (compilation included), summarised as

- wall ms per step, GPU-busy ms per step (the union of kernel intervals on the device) and their
  ratio: a ratio well under 1 means the GPU waits for the host (launch/Python bound), near 1
  means the kernels themselves set the step;
- the kernels by total device time (top N), and the CPU-side ops by self CPU time.

    python benchmarks/step_trace.py --model-path .gpu/minilm-fp16 --variants bf16+compile,bs=96+bf16+compile \\
        --warmup 15 --steps 8 --out $OUT/trace

Writes ``<out>/<variant>.md`` (the tables) and ``<out>/<variant>.json`` (the figures);
``--chrome`` also writes the Chrome trace (``.json.gz``). The tables include the GPU's idle gaps
(over 0.1 ms) with the host ops that were running when each began, and the host ``aten::copy_``
calls by input shape.

``--ab ATTR`` compares a trainer switch in one process after the warm-up: one untimed segment in
each state (so a switch that changes the compiled code compiles outside the timing), then timed
segments of ``--steps`` steps alternate ``ATTR = True`` / ``False`` (both orders, ``--rounds``
pairs), then each state is profiled. ``--ab fp8_kernel`` switches the float8 row quantisations
between the Triton kernel and Inductor's fused form (train config ``fp8_quantize``), ``--ab
fp8_gated`` the gated GELU backward between its one-kernel form and Inductor's, ``--ab
cpp_wrapper`` the compiled step functions between Inductor's C++ wrapper and its Python one
(``compile_mode: cpp-wrapper``; both compiled forms stay cached, one per backend), ``--ab
fast_launch`` our Triton kernels' cached launches against Triton's JIT dispatch, ``--ab bwd_tiles``
the attention backward kernels' own tiles against the forward's shared ones, ``--ab
residual_compute`` the residual stream in bf16 against float32 (train config ``residual_dtype``),
``--ab fused_maxsim`` the loss's MaxSim as Triton kernels against the einsum path, ``--ab
scatter_rows`` the padded layout built by a scatter (``torch_train.padded_rows``) against a gather,
``--ab bias16`` training's dense T5 bias matrix in float16 against float32, ``--ab stage`` the step's host side (``TorchTrainer.stage``) in a prefetch thread against in the step,
``--ab gated_fwd`` the gated activation with wo's float8 input as one Triton op against Inductor's
fused form (``torch_t5_varlen.GATED_FORWARD_KERNEL``). Example (a boolean attribute of the trainer; ``stage_copies`` was one, measured and removed):

    python benchmarks/step_trace.py --model-path .gpu/minilm-fp16 \
        --variants bs=192+bf16+compile+varlen+packing --warmup 60 --steps 20 --ab stage_copies --out $OUT/ab
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
    return sum(e - s for s, e in busy_spans(events)) / 1000.0  # us -> ms


def is_annotation(e) -> bool:
    """Device-side ranges that are labels, not kernels: torch 2.11's profiler puts each compiled
    graph's "## Call CompiledFxGraph ##" range on the GPU timeline too (first to last kernel,
    gaps included), which would count idle time as busy."""
    name = getattr(e, "key", None) or e.name
    return bool(getattr(e, "is_user_annotation", False)) or name.startswith(("## ", "Torch-Compiled"))


def busy_spans(events) -> list[tuple[float, float]]:
    """The merged (start, end) device intervals (us) of the kernels, in time order."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in events)
    out: list[list[float]] = []
    for s, e in spans:
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def idle_gaps(kernels, cpu_events, min_us: float = 100.0) -> list[dict]:
    """The GPU's idle gaps longer than ``min_us`` between its first and last kernel, each with
    the host ops (outermost first) in progress on the host when it began: what the host was
    doing while the device had nothing queued."""
    spans = busy_spans(kernels)
    cpu = sorted(((e.time_range.start, e.time_range.end, e.name) for e in cpu_events), key=lambda t: t[0])
    gaps = []
    for (_, end), (nxt, _) in zip(spans, spans[1:]):
        if nxt - end < min_us:
            continue
        stack = [name for a, b, name in cpu if a <= end <= b]
        gaps.append({"start_us": end, "ms": (nxt - end) / 1000.0, "host": stack})
    return gaps


def gap_table(gaps: list[dict], n_steps: int, top: int = 12) -> list[dict]:
    """Idle gaps summed by what the host was doing (its two outermost labelled ops + the innermost)."""
    by: dict[str, list[float]] = {}
    for g in gaps:
        st = g["host"]
        labels = [n for n in st if n.startswith(("sg::", "Optimizer", "## Call", "Torch-Compiled", "CompiledFunction"))]
        key = " > ".join(labels[:2] + ([st[-1]] if st and (not labels or st[-1] != labels[-1]) else [])) or "(no host op)"
        b = by.setdefault(key, [0.0, 0])
        b[0] += g["ms"] / n_steps
        b[1] += 1 / n_steps
    rows = [{"host": k, "ms_per_step": v[0], "gaps_per_step": v[1]} for k, v in by.items()]
    return sorted(rows, key=lambda r: -r["ms_per_step"])[:top]


def kernel_group(name: str) -> str:
    """A kernel's family, for the per-step breakdown."""
    if "flex_attention" in name or name.startswith("triton_tem"):
        return "flex attention"
    if "t5_attn_" in name:
        return "varlen attention (ours, Triton)"
    if name.startswith(("gated_gelu_", "quantize_rows_")):  # (before 2026-11-28 these fell under "other")
        return "our elementwise kernels (Triton: gated GELU backward, row quantiser)"
    if any(t in name for t in ("nvjet", "gemm", "cutlass", "xmma", "splitKreduce")):
        if "f32f32" in name:
            return "GEMM fp32"
        # cuBLAS's float8 kernels: nvjet "qq" (e4m3 x e4m3) with output scaling ("ovscale");
        # (before 2026-11-28 they were counted as "GEMM bf16")
        return "GEMM float8" if ("_qq" in name or "ovscale" in name) else "GEMM bf16"
    if "softmax" in name:
        return "softmax (unfused attention)"
    if name.startswith("triton"):
        return "other Triton (fused elementwise, norms, dropout)"
    return "other (ATen elementwise, reductions, optimizer)"


def profile_steps(tr, timed, bs: int, cuda: bool, top: int, label: str):
    """Profile ``timed`` steps: (figures dict, markdown lines, the profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []),
                 record_shapes=True) as prof:
        fed = feed(tr, timed)
        t0 = time.perf_counter()
        for b in fed:
            tr.train_step(b, 1e-3)
        sync()
        wall_ms = (time.perf_counter() - t0) * 1000 / len(timed)
    events = prof.events()
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA and not is_annotation(e)]
    cpu_events = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    busy = busy_ms(kernels) / len(timed) if kernels else 0.0
    n_kernels = len(kernels) / len(timed)
    avg = prof.key_averages()
    # kernels only: a Triton kernel's host-side launcher carries the same name and device time
    by_dev = sorted((a for a in avg if a.self_device_time_total > 0 and not is_annotation(a)
                     and a.device_type == torch.autograd.DeviceType.CUDA), key=lambda a: -a.self_device_time_total)
    groups: dict[str, list[float]] = {}
    for e in kernels:
        g = groups.setdefault(kernel_group(e.name), [0.0, 0])
        g[0] += e.time_range.elapsed_us() / 1000 / len(timed)
        g[1] += 1 / len(timed)
    by_cpu = sorted(avg, key=lambda a: -a.self_cpu_time_total)
    total_dev = sum(a.self_device_time_total for a in by_dev) or 1.0
    gaps = idle_gaps(kernels, cpu_events) if kernels else []
    copies = sorted((a for a in prof.key_averages(group_by_input_shape=True) if a.key == "aten::copy_"),
                    key=lambda a: -a.self_cpu_time_total)
    res = {
        "variant": label, "batch_size": bs, "steps": len(timed),
        "step_ms_profiled": wall_ms, "gpu_busy_ms": busy,
        "gpu_busy_fraction": busy / wall_ms, "kernels_per_step": n_kernels,
        "gpu_idle_gaps_ms_per_step": sum(g["ms"] for g in gaps) / len(timed),
        "idle_gaps_by_host_op": gap_table(gaps, len(timed)),
        "host_copies": [{"input_shapes": str(a.input_shapes)[:120], "ms_per_step": a.self_cpu_time_total / 1000 / len(timed),
                         "calls_per_step": a.count / len(timed)} for a in copies[:top]],
        "kernel_groups": {k: {"ms_per_step": v[0], "calls_per_step": v[1]} for k, v in
                          sorted(groups.items(), key=lambda kv: -kv[1][0])},
        "top_device": [{"name": a.key, "ms_per_step": a.self_device_time_total / 1000 / len(timed),
                        "share": a.self_device_time_total / total_dev, "calls_per_step": a.count / len(timed)}
                       for a in by_dev[:top]],
        "top_cpu": [{"name": a.key, "ms_per_step": a.self_cpu_time_total / 1000 / len(timed),
                     "calls_per_step": a.count / len(timed)} for a in by_cpu[:top]],
    }
    lines = [f"{wall_ms:.1f} ms/step profiled; GPU busy {busy:.1f} ms/step = {busy / wall_ms:.0%}; "
             f"{n_kernels:.0f} kernels/step; GPU idle in gaps over 0.1 ms: "
             f"{res['gpu_idle_gaps_ms_per_step']:.1f} ms/step", "",
             "| kernel group | ms/step | calls/step |", "|---|---|---|"]
    lines += [f"| {k} | {v['ms_per_step']:.2f} | {v['calls_per_step']:.0f} |" for k, v in res["kernel_groups"].items()]
    lines += ["", "| GPU idle gaps: host op when each began | idle ms/step | gaps/step |", "|---|---|---|"]
    lines += [f"| {r['host'][:110]} | {r['ms_per_step']:.2f} | {r['gaps_per_step']:.1f} |"
              for r in res["idle_gaps_by_host_op"]]
    lines += ["", "| host aten::copy_ by input shapes | self CPU ms/step | calls/step |", "|---|---|---|"]
    lines += [f"| {r['input_shapes']} | {r['ms_per_step']:.2f} | {r['calls_per_step']:.1f} |" for r in res["host_copies"]]
    lines += ["", "| kernel (device) | ms/step | share | calls/step |", "|---|---|---|---|"]
    lines += [f"| {r['name'][:90]} | {r['ms_per_step']:.2f} | {r['share']:.1%} | {r['calls_per_step']:.0f} |"
              for r in res["top_device"]]
    lines += ["", "| op (host) | self CPU ms/step | calls/step |", "|---|---|---|"]
    lines += [f"| {r['name'][:90]} | {r['ms_per_step']:.2f} | {r['calls_per_step']:.0f} |" for r in res["top_cpu"]]
    return res, lines, prof


def warm_curve(tr, batches, sync, block: int, cuda: bool) -> list[dict]:
    """Run the warm-up steps; with ``block`` > 0, time every ``block`` steps (synced) and count what
    could still be warming: compiled graphs, the allocator's device segments, Triton compiles."""
    import torch

    rows = []
    t0, start = time.perf_counter(), 0
    for i, b in enumerate(feed(tr, batches), 1):
        tr.train_step(b, 1e-3)
        if block and (i % block == 0 or i == len(batches)):
            sync()
            now = time.perf_counter()
            from torch._dynamo.utils import counters

            mem = torch.cuda.memory_stats() if cuda else {}
            rows.append({"steps": f"{start + 1}-{i}", "ms_per_step": (now - t0) * 1000 / (i - start),
                         "graphs": int(counters["stats"]["unique_graphs"]),
                         "segments": int(mem.get("segment.all.allocated", 0)),
                         "triton_compiles": _triton_compiles()})
            print(f"  warm-up steps {start + 1}-{i}: {rows[-1]['ms_per_step']:.1f} ms/step, graphs "
                  f"{rows[-1]['graphs']}, segments {rows[-1]['segments']}, triton {rows[-1]['triton_compiles']}", flush=True)
            t0, start = now, i
    sync()
    return rows


_TRITON_COMPILES = [0]


def _count_triton_compiles() -> None:
    """Count Triton JIT compilations (our attention kernels' new specialisations) via its hook."""
    try:
        from triton import knobs

        prev = knobs.runtime.jit_post_compile_hook

        def hook(*a, **k):
            _TRITON_COMPILES[0] += 1
            return prev(*a, **k) if prev else None

        knobs.runtime.jit_post_compile_hook = hook
    except Exception:  # noqa: BLE001 - an older/newer Triton without the hook: report 0
        pass


def _triton_compiles() -> int:
    return _TRITON_COMPILES[0]


def save(out: Path, safe: str, res: dict, lines: list[str]) -> None:
    """Written after each part, so a capped run keeps what it measured."""
    (out / f"{safe}.json").write_text(json.dumps(res, indent=1))
    (out / f"{safe}.md").write_text("\n".join(lines) + "\n")


def set_state(tr, attr: str, state: bool) -> None:
    """``--ab``: a boolean trainer attribute, ``fp8_kernel`` / ``fp8_gated`` (every LoRA
    projection's ``fp8_quantize``: "kernel" / "gated" when True, "compiled" when False;
    torch.compile recompiles once per state, in the untimed segments before the timed ones), or
    ``cpp_wrapper`` (the trainer's compiled functions swapped for ones compiled with Inductor's C++
    wrapper when True), or ``fast_launch`` (our Triton kernels launched through
    ``triton_launch.CachedKernel`` when True, through Triton's JIT dispatch when False; no
    recompile: the launch happens inside our ops' Python)."""
    if attr == "cpp_wrapper":  # the compiled step functions, with Inductor's C++ wrapper or not
        from supergrep.backends.torch_compile import bind_autograd_thread_context, compile_dynamic

        if not tr.cfg.compile:
            raise SystemExit("--ab cpp_wrapper needs a compiled variant (token compile)")
        names = ("_encode", "_encode_packed", "_encode_flex", "_encode_varlen", "_loss")
        if not hasattr(tr, "_ab_impls"):  # both sets kept: Dynamo holds a cache entry per backend
            have = tr.compile_mode == "cpp-wrapper"  # the trainer's own (train config compile_mode)
            bind_autograd_thread_context(tr.device)
            tr._ab_impls = {have: {n: getattr(tr, n + "_impl") for n in names},
                            not have: {n: compile_dynamic(getattr(tr, n + "_eager"), None if have else "cpp-wrapper")
                                       for n in names}}
        for n, fn in tr._ab_impls[state].items():
            setattr(tr, n + "_impl", fn)
    elif attr == "gated_fwd":  # T5's gated activation + wo's float8 input as one op (recompiles once per state)
        from supergrep.backends import torch_t5_varlen

        torch_t5_varlen.GATED_FORWARD_KERNEL = state
    elif attr == "fused_maxsim":  # the loss's MaxSim as Triton kernels (torch_maxsim), always or never (recompiles once per state)
        from supergrep.backends import torch_maxsim

        torch_maxsim.ENABLED = state
    elif attr == "bias16":  # training's dense T5 bias matrix in float16 (recompiles once per state)
        from supergrep.backends import torch_t5_varlen

        torch_t5_varlen.BIAS16_TRAINING = state
    elif attr == "stage":  # batches staged ahead in a thread (TorchTrainer.stage) or prepared in the step
        tr.sg_stage = state
    elif attr == "scatter_rows":  # the padded layout as a scatter (backward: a gather) or as a gather (recompiles once per state)
        from supergrep.backends import torch_train

        torch_train.SCATTER_ROWS = state
    elif attr == "residual_compute":  # varlen: the residual stream in the autocast dtype (recompiles once per state)
        tr.residual_compute = state and tr.amp_dtype is not None
    elif attr == "bwd_tiles":  # the attention backward kernels' own tiles (t5_attention._BWD_BLOCKS) or the shared ones
        from supergrep.backends import t5_attention
        from supergrep.bench.train import BWD_TILES, SHARED_TILES

        t5_attention._BWD_BLOCKS.update(BWD_TILES if state else SHARED_TILES)  # True: the default since #51
    elif attr == "fast_launch":  # our Triton kernels' cached launches (backends/triton_launch.py) or Triton's JIT
        from supergrep.backends import triton_launch

        triton_launch.ENABLED = state
    elif attr in ("fp8_kernel", "fp8_gated"):
        from supergrep.backends.torch_lora import LoRALinear

        for m in tr.model.modules():
            if isinstance(m, LoRALinear):
                m.fp8_quantize = ("kernel" if attr == "fp8_kernel" else "gated") if state else "compiled"
    else:
        setattr(tr, attr, state)


def feed(tr, batches: list):
    """The batches as `train`'s loop gives them: staged ahead by ``TorchTrainer.stage`` in a
    background thread (``tr.sg_stage``: the variant's, token ``nostage`` off; ``--ab stage``)."""
    if not getattr(tr, "sg_stage", False):
        return batches
    from supergrep.train.data import staged_ahead

    return staged_ahead(batches, tr.stage)


def timed_ms(tr, batches, sync) -> float:
    batches = list(batches)
    fed = feed(tr, batches)
    t0 = time.perf_counter()
    for b in fed:
        tr.train_step(b, 1e-3)
    sync()
    return (time.perf_counter() - t0) * 1000 / len(batches)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="xtr-base")
    ap.add_argument("--model-path", required=True, help="MiniLM dir (the tokenizer the workloads draw with)")
    ap.add_argument("--variants", default="bf16+compile")
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--ab", default="", help="a boolean trainer attribute to compare, True vs False, after the warm-up")
    ap.add_argument("--rounds", type=int, default=2, help="--ab: pairs of timed segments (alternating orders)")
    ap.add_argument("--curve-block", type=int, default=0, help="time the warm-up in blocks of this many steps")
    ap.add_argument("--work-dir", default="/tmp/sg-trace-work")
    ap.add_argument("--chrome", action="store_true")
    ap.add_argument("--no-profile", default="cudagraphs",
                    help="variants containing this token are timed but not profiled (CUPTI and CUDA graphs "
                         "have crashed together); '' profiles all")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run (no kernel figures)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    import torch

    _count_triton_compiles()
    from supergrep.bench.train import build_trainer, parse_variant, set_switches
    from supergrep.bench.workloads import get_workload, make_batches, make_pool

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wl = get_workload(args.workload, Path(args.work_dir), args.model_path)
    for name in [v for v in args.variants.split(",") if v.strip()]:
        v = parse_variant(name)
        bs = v.batch_size or wl.batch_size
        # the warm-up's and the profiled steps' batches from a pool of their own, so they are the
        # same with or without --ab (whose segments draw from a second pool): traces compare across calls
        pool = make_pool(wl, bs * (args.warmup + args.steps), 0)
        batches = make_batches(pool, wl, bs, v.batching, v.packing, 0, v.pad_multiple)
        if args.ab:
            extra = make_pool(wl, bs * args.steps * 2 * args.rounds, 1)
            batches += make_batches(extra, wl, bs, v.batching, v.packing, 1, v.pad_multiple)
        tr = build_trainer(wl, v, args.device, bs)
        set_switches(v)  # the variant's module switches (maxsim=, bias16, bwdtiles); --ab's set_state overrides
        tr.sg_stage = v.stage and hasattr(tr, "stage")  # as bench train feeds it
        cuda = args.device.startswith("cuda")
        sync = torch.cuda.synchronize if cuda else (lambda: None)
        t0 = time.perf_counter()
        curve = warm_curve(tr, batches[: args.warmup], sync, args.curve_block, cuda)
        warm_s = time.perf_counter() - t0
        rest = batches[args.warmup :]
        timed = rest[: args.steps]
        plain_ms = timed_ms(tr, timed, sync)  # unprofiled: the step as `train` runs it
        print(f"{v.name}: step {plain_ms:.1f} ms unprofiled ({bs * 1000 / plain_ms:.1f} samples/s), "
              f"warm-up {warm_s:.0f} s", flush=True)
        safe = v.name.replace("+", "_").replace("=", "")
        res = {"variant": v.name, "batch_size": bs, "steps": len(timed), "warmup_s": warm_s,
               "step_ms_unprofiled": plain_ms, "samples_per_s_unprofiled": bs * 1000 / plain_ms,
               "warmup_curve": curve}
        lines = [f"# {v.name} ({args.workload}, batch {bs})", "",
                 f"step {plain_ms:.1f} ms unprofiled ({res['samples_per_s_unprofiled']:.1f} samples/s); "
                 f"warm-up {warm_s:.0f} s", ""]
        if curve:
            lines += [f"## Warm-up, blocks of {args.curve_block} steps", "",
                      "| steps | ms/step | compiled graphs (total) | device segments allocated (total) | Triton kernels compiled (total) |",
                      "|---|---|---|---|---|"]
            lines += [f"| {c['steps']} | {c['ms_per_step']:.1f} | {c['graphs']} | {c['segments']} | {c['triton_compiles']} |"
                      for c in curve] + [""]
        states = [True, False] if args.ab else [None]
        if args.ab:  # same process, same compiled graphs, same batches per segment, both orders
            ms: dict[bool, list[float]] = {True: [], False: []}
            seg = rest[args.steps : 2 * args.steps] or timed
            for state in (True, False):  # untimed: a switch that changes the traced code compiles here
                set_state(tr, args.ab, state)
                timed_ms(tr, seg, sync)
            for r in range(args.rounds):
                for state in ([True, False] if r % 2 == 0 else [False, True]):
                    set_state(tr, args.ab, state)
                    ms[state].append(timed_ms(tr, seg, sync))
                    print(f"  {args.ab}={state}: {ms[state][-1]:.2f} ms/step", flush=True)
            res["ab"] = {"attr": args.ab, "ms_per_step": {str(k): v for k, v in ms.items()},
                         "ratio_false_over_true": (sum(ms[False]) / sum(ms[True]))}
            lines += [f"## A/B: `{args.ab}` (segments of {len(seg)} steps, alternating, {args.rounds} rounds)", "",
                      "| state | ms/step per segment | mean | samples/s |", "|---|---|---|---|"]
            for k in (True, False):
                m = sum(ms[k]) / len(ms[k])
                lines.append(f"| {args.ab}={k} | {', '.join(f'{x:.2f}' for x in ms[k])} | {m:.2f} | {bs * 1000 / m:.1f} |")
            lines += ["", f"{args.ab}=True is {res['ab']['ratio_false_over_true']:.3f}x the speed of False.", ""]
        save(out, safe, res, lines)
        if args.no_profile and args.no_profile in v.name:
            states = []
        for state in states:
            label = v.name if state is None else f"{v.name} ({args.ab}={state})"
            if state is not None:
                set_state(tr, args.ab, state)
            pres, plines, prof = profile_steps(tr, timed, bs, cuda, args.top, label)
            res["profile" if state is None else f"profile_{args.ab}_{state}"] = pres
            lines += ([] if state is None else [f"## Profile, {args.ab}={state}", ""]) + plines + [""]
            print(label + ": " + plines[0], flush=True)
            if args.chrome:
                tag = "" if state is None else f"_{args.ab}{int(state)}"
                tmp = out / f"{safe}{tag}.trace.json"
                prof.export_chrome_trace(str(tmp))
                with open(tmp, "rb") as f, gzip.open(str(tmp) + ".gz", "wb") as g:
                    shutil.copyfileobj(f, g)
                tmp.unlink()
            del prof
            save(out, safe, res, lines)
        del tr
        torch._dynamo.reset()
        if cuda:
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
