"""Host time of one call of our Triton kernels' entry points, on a GPU: where the 0.2-0.4 ms a call
that the training step's profile shows for our custom ops goes (docs/performance.md #36-#38).

For each kernel, on inputs so small that the GPU finishes first (so the loop measures the host):
- ``op``: the custom op, as the compiled step calls it (``torch.ops.supergrep.*``);
- ``op as custom_op``: the same body behind ``torch.library.custom_op`` (the ops' form before
  ``backends/opdef.py``);
- ``direct``: the Python function behind the op (allocations, checks, our cached launch), no
  dispatcher; ``direct, Triton's JIT launch``: the same with ``triton_launch.ENABLED`` off;
- ``jit launch``: ``kernel[grid](...)`` alone on preallocated outputs (Triton's binder, cache key,
  launcher);
- ``compiled runner``: the kernel compiled once (``JITFunction.warmup``) and launched through its
  ``CompiledKernel`` (no binder, no cache lookup: what a cached launch path would cost);
- baselines: a tiny ATen kernel (``x.add_(1)``) and ``torch.empty``.

    PYTHONPATH=src python3 benchmarks/launch_overhead.py [--calls 2000] [--out FILE.json]
    TRITON_INTERPRET=1 PYTHONPATH=src python3 benchmarks/launch_overhead.py --device cpu --calls 2   # dry run
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def per_call_us(fn, calls: int) -> float:
    for _ in range(min(50, calls)):
        fn()
    sync()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t) / calls * 1e6


def jit_and_runner(kernel, grid, args: tuple, kwargs: dict):
    """(``kernel[grid](*args, **kwargs)``, the CompiledKernel's runner with every parameter in
    signature order, or the error that stopped it: Triton's internals change between versions)."""
    def jit():
        kernel[grid](*args, **kwargs)

    try:
        compiled = kernel.warmup(*args, grid=grid, **kwargs)
        names = kernel.arg_names
        values = dict(zip(names, args, strict=False))
        values.update({k: v for k, v in kwargs.items() if k in names})
        ordered = [values[n] for n in names]
        run = compiled[tuple(grid) + (1,) * (3 - len(grid))]  # CompiledKernel's runner indexes three

        def runner():
            run(*ordered)

        runner()
        sync()
        return jit, runner
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        return jit, repr(e)[:300]


def legacy_ops():
    """The twenty-third session's form of two ops, ``torch.library.custom_op`` (Python autograd and
    backend wrappers around the same bodies), under a namespace of their own: the op layer's cost
    before and after ``backends/opdef.py`` in one run."""
    from supergrep.backends.t5_attention import _attn_fake, _attn_impl
    from supergrep.backends.torch_fp8 import _gated_gelu_bwd_fake, _gated_gelu_bwd_impl

    schema = lambda op: str(op._schema)[len(op._schema.name):]  # noqa: E731 - "(args) -> (outs)"
    attn = torch.library.custom_op("sgbench::attn", _attn_impl, mutates_args=(),
                                   schema=schema(torch.ops.supergrep.t5_varlen_attn.default))
    attn.register_fake(_attn_fake)
    gated = torch.library.custom_op("sgbench::gated", _gated_gelu_bwd_impl, mutates_args=(),
                                    schema=schema(torch.ops.supergrep.gated_gelu_bwd_fp8.default))
    gated.register_fake(_gated_gelu_bwd_fake)
    return torch.ops.sgbench.attn, torch.ops.sgbench.gated


def cached_vs_jit(fn) -> bool:
    """Whether ``fn()`` gives bitwise equal outputs with our cached launches and with Triton's JIT
    launch (each run twice, so the cached one is a hit)."""
    from supergrep.backends import triton_launch

    results = {}
    for state in (True, False):
        triton_launch.ENABLED = state
        fn()
        results[state] = fn()
    triton_launch.ENABLED = True
    a, b = results[True], results[False]
    a, b = (a if isinstance(a, tuple) else (a,)), (b if isinstance(b, tuple) else (b,))
    return all(torch.equal(x.float(), y.float()) for x, y in zip(a, b, strict=True))


def main() -> None:
    from supergrep.backends import triton_gated_gelu as gk
    from supergrep.backends import triton_launch
    from supergrep.backends import triton_t5_attention as ak
    from supergrep.backends.t5_attention import kernel_options
    from supergrep.backends.torch_fp8 import gated_gelu_backward_fp8

    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--out")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the script under TRITON_INTERPRET=1")
    args = ap.parse_args()
    dev, n = args.device, args.calls
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu (Triton's interpreter: not a timing)"
    report: dict = {"device": name, "calls": n, "us_per_call": {}}
    us = report["us_per_call"]
    x = torch.zeros(16, device=dev)
    us["baseline: x.add_(1) (an ATen kernel)"] = per_call_us(lambda: x.add_(1), n)
    us["baseline: torch.empty"] = per_call_us(lambda: torch.empty(64, device=dev), n)

    # T5 attention at xtr-base's head layout, one 64-token document
    heads, d, dist, L = 12, 64, 128, 64
    qkv = torch.randn(L, 3 * heads * d, device=dev, dtype=torch.bfloat16)
    cu = torch.tensor([0, L], dtype=torch.int32, device=dev)
    table = torch.randn(heads, 2 * dist + 1, device=dev)
    opts = kernel_options()
    old_attn, old_gated = legacy_ops()
    us["attn forward: op"] = per_call_us(lambda: torch.ops.supergrep.t5_varlen_attn(qkv, cu, table, L, dist, heads, 1.0), n)
    us["attn forward: op as custom_op (before opdef.py)"] = per_call_us(lambda: old_attn(qkv, cu, table, L, dist, heads, 1.0), n)
    us["attn forward: direct"] = per_call_us(lambda: ak.forward(qkv, cu, L, table, dist, heads, 1.0, **opts), n)
    triton_launch.ENABLED = False
    us["attn forward: direct, Triton's JIT launch"] = per_call_us(lambda: ak.forward(qkv, cu, L, table, dist, heads, 1.0, **opts), n)
    triton_launch.ENABLED = True
    o, lse = ak.forward(qkv, cu, L, table, dist, heads, 1.0, **opts)
    do = torch.randn_like(o)
    fwd_args = (qkv, o, lse, cu, table, qkv.stride(0), o.stride(0), heads, dist, table.shape[-1], 1.0, L)
    fwd_kw = dict(HEAD_DIM=d, BLOCK_D=ak._block_d(d), BLOCK_M=opts.get("block_m", 64), BLOCK_N=opts.get("block_n", 64),
                  IEEE=False, BIAS=1, num_warps=opts.get("num_warps", 4), num_stages=opts.get("num_stages", 2))
    jit, runner = jit_and_runner(ak.t5_attn_fwd_kernel, (1, heads), fwd_args, fwd_kw)
    us["attn forward: jit launch"] = per_call_us(jit, n)
    us["attn forward: compiled runner"] = per_call_us(runner, n) if callable(runner) else runner
    us["attn backward: op"] = per_call_us(
        lambda: torch.ops.supergrep.t5_varlen_attn_bwd(do, qkv, o, lse, cu, table, L, dist, heads, 1.0), n)
    us["attn backward: direct"] = per_call_us(lambda: ak.backward(do, qkv, o, lse, cu, L, table, dist, heads, 1.0, **opts), n)
    triton_launch.ENABLED = False
    us["attn backward: direct, Triton's JIT launch"] = per_call_us(
        lambda: ak.backward(do, qkv, o, lse, cu, L, table, dist, heads, 1.0, **opts), n)
    triton_launch.ENABLED = True
    report["cached equals jit"] = {
        "attn forward": cached_vs_jit(lambda: ak.forward(qkv, cu, L, table, dist, heads, 1.0, **opts)),
        "attn backward": cached_vs_jit(lambda: ak.backward(do, qkv, o, lse, cu, L, table, dist, heads, 1.0, **opts)),
    }

    # the gated GELU backward at xtr-base's width, 64 tokens
    h = torch.randn(64, 4096 + 32, device=dev, dtype=torch.bfloat16)
    da = torch.randn(64, 2048, device=dev, dtype=torch.bfloat16)
    us["gated: op"] = per_call_us(lambda: torch.ops.supergrep.gated_gelu_bwd_fp8(h, da, 2048), n)
    us["gated: via gated_gelu_backward_fp8"] = per_call_us(lambda: gated_gelu_backward_fp8(h, da, 2048), n)
    us["gated: op as custom_op (before opdef.py)"] = per_call_us(lambda: old_gated(h, da, 2048), n)
    us["gated: direct"] = per_call_us(lambda: gk.gated_gelu_backward_fp8(h, da, 2048), n)
    triton_launch.ENABLED = False
    us["gated: direct, Triton's JIT launch"] = per_call_us(lambda: gk.gated_gelu_backward_fp8(h, da, 2048), n)
    triton_launch.ENABLED = True
    report["cached equals jit"]["gated"] = cached_vs_jit(lambda: gk.gated_gelu_backward_fp8(h, da, 2048))
    g, q, s = gk.gated_gelu_backward_fp8(h, da, 2048)
    bm, bw, warps = gk.launch_config(2048)
    g_args = (h, da, g, q, s, 64, 2048, h.stride(0), da.stride(0), g.stride(0), q.stride(0))
    g_kw = dict(BLOCK_M=bm, BLOCK_W=bw, OUT_FP32=False, num_warps=warps)
    jit, runner = jit_and_runner(gk.gated_gelu_bwd_quant_kernel, (64 // bm,), g_args, g_kw)
    us["gated: jit launch"] = per_call_us(jit, n)
    us["gated: compiled runner"] = per_call_us(runner, n) if callable(runner) else runner
    for k, v in us.items():
        print(f"{k:50s} {v if isinstance(v, str) else f'{v:8.1f} us'}", flush=True)
    print("cached launches equal Triton's:", report["cached equals jit"], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
