"""The row quantiser kernel (train config ``fp8_quantize: kernel``) on the GPU: its float8 bytes
and scales against ``quantize_rows``, and the time of the training step's widest case, the gated
GELU's backward feeding the wi projections' input-gradient product, compiled both ways:

- ``compiled``: ``quantize_rows`` fused by Inductor into the GELU backward (a looped reduction
  over 4,096-wide rows that computes the gradient for the amax, then again for the cast);
- ``kernel``: Inductor writes the bf16 gradient (LoRA's weight gradients read it anyway), then
  ``quantize_rows_op`` reads it once;
- ``gated_op`` (train config ``fp8_quantize: gated``): ``gated_gelu_backward_fp8``, the GELU
  backward and the quantisation in one Triton kernel (``triton_gated_gelu.py``), checked against
  the compiled form (bf16 gradient, float8 bytes, scales).

    PYTHONPATH=src python3 benchmarks/fp8_quant_check.py [--tokens 36864] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json

import torch

from supergrep.backends.torch_fp8 import gated_gelu_backward_fp8, quantize_rows, quantize_rows_op


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x.pow(3))))


def gated_backward(h, dh, n):
    """d(wi_0 out), d(wi_1 out) of ``gelu(a) * b`` from the wi output ``h`` = [a, b, ...] (a view of
    the fused GEMM's output, as in the step) and the gradient ``dh`` of the product."""
    a, b, d = h[:, :n].float(), h[:, n:2 * n].float(), dh.float()
    k = 0.7978845608028654
    t = torch.tanh(k * (a + 0.044715 * a.pow(3)))
    dgelu = 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * a * a)
    return torch.cat([d * b * dgelu, d * gelu_new(a)], dim=1).to(torch.bfloat16)


def step_compiled(h, dh, n):
    g = gated_backward(h, dh, n)
    return g, *quantize_rows(g)


def step_kernel(h, dh, n):
    g = gated_backward(h, dh, n)
    return g, *quantize_rows_op(g)


def timed(fn, *args, reps=20):
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0.record()
    for _ in range(reps):
        fn(*args)
    t1.record()
    torch.cuda.synchronize()
    return t0.elapsed_time(t1) / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=36864)  # ~batch 192 x (32 + 159) of xtr-base
    ap.add_argument("--out")
    ap.add_argument("--gated-only", action="store_true",
                    help="only the gated GELU backward (with TORCH_LOGS=output_code: Inductor's code for it)")
    args = ap.parse_args()
    report: dict = {"tokens": args.tokens, "device": torch.cuda.get_device_name(), "bytes": {}, "ms": {}}
    n = args.tokens
    for cols in () if args.gated_only else (768, 2048, 2304, 4096):
        x = (torch.randn(n, cols, device="cuda") * torch.rand(n, 1, device="cuda") * 10).to(torch.bfloat16)
        x[0] = 0
        rq, rs = quantize_rows(x)
        q, s = quantize_rows_op(x)
        same = (q.view(torch.uint8) == rq.view(torch.uint8)).float().mean().item()
        report["bytes"][cols] = {"fp8_bytes_equal": same, "scales_equal": bool(torch.equal(s, rs)),
                                 "max_abs_dequant_diff": float((q.float() * s - rq.float() * rs).abs().max())}
        eager_q = timed(quantize_rows, x)
        comp_q = timed(torch.compile(quantize_rows, dynamic=True), x)
        kern_q = timed(quantize_rows_op, x)
        report["ms"][f"quantize {cols}"] = {"eager": eager_q, "compiled": comp_q, "kernel": kern_q,
                                            "kernel_GBps": n * cols * 3 / kern_q / 1e6}
        print(cols, json.dumps(report["bytes"][cols]), json.dumps(report["ms"][f"quantize {cols}"]), flush=True)
    ff = 2048
    h = (torch.randn(n, 2 * ff + 32, device="cuda")).to(torch.bfloat16)  # wi_0, wi_1 and LoRA's u columns
    dh = (torch.randn(n, ff, device="cuda") * 1e-3).to(torch.bfloat16)
    # In the step only the token count is dynamic: the widths come from the weights. Here too
    # (the twenty-first session's figures passed ``ff`` as an argument, which dynamic=True made
    # symbolic: a row width unknown to Inductor, so a looped reduction re-reading the row).
    torch._dynamo.mark_static(h, 1)
    torch._dynamo.mark_static(dh, 1)
    fc = torch.compile(lambda h, dh: step_compiled(h, dh, ff), dynamic=True)
    fk = torch.compile(lambda h, dh: step_kernel(h, dh, ff), dynamic=True)
    fs = torch.compile(step_compiled, dynamic=True)  # the old form, width symbolic, for comparison
    gc, qc, sc = fc(h, dh)
    gk, qk, sk = fk(h, dh)
    # fp8_quantize "gated": the GELU backward and the quantisation as one Triton kernel, one read a row
    gg, qg, sg = gated_gelu_backward_fp8(h, dh, ff)
    report["gated_backward"] = {
        "g_equal": bool(torch.equal(gc, gk)),
        "fp8_bytes_equal": (qc.view(torch.uint8) == qk.view(torch.uint8)).float().mean().item(),
        "gated_op_g_max_rel_diff": float((gg.float() - gc.float()).abs().max() / gc.float().abs().max()),
        "gated_op_g_equal_share": (gg == gc).float().mean().item(),
        "gated_op_fp8_bytes_equal": (qg.view(torch.uint8) == qc.view(torch.uint8)).float().mean().item(),
        "gated_op_scales_equal": (sg == sc).float().mean().item(),
        "ms_gated_op": timed(gated_gelu_backward_fp8, h, dh, ff),
        "ms_compiled": timed(fc, h, dh), "ms_kernel": timed(fk, h, dh),
        "ms_compiled_symbolic_width": timed(fs, h, dh, ff),
        "bytes_bound_ms": (h.shape[0] * (2 * ff * 2 + ff * 2 + 2 * ff * 2 + 2 * ff)) / 3.35e9}  # H100 HBM3
    from supergrep.backends import triton_gated_gelu

    sweep = {}
    for bm, warps in ((1, 4), (1, 8), (1, 16), (2, 8), (2, 16), (4, 16)):
        try:
            sweep[f"{bm}x{warps}"] = timed(lambda h, dh, c=(bm, warps): triton_gated_gelu.gated_gelu_backward_fp8(h, dh, ff, config=c), h, dh)
        except Exception as e:  # a config the compiler refuses (registers): recorded, not fatal
            sweep[f"{bm}x{warps}"] = repr(e)[:200]
    report["gated_backward"]["ms_gated_op_by_block_m_x_warps"] = sweep
    print("gated backward", json.dumps(report["gated_backward"]), flush=True)
    # the forward: the activation and its float8 rows (wo's input), compiled vs the one-kernel op
    from supergrep.backends.torch_fp8 import gated_gelu, gated_gelu_forward_fp8

    def fwd_compiled(h):
        a = gated_gelu(h, ff)
        return a, *quantize_rows(a)

    ffc = torch.compile(fwd_compiled, dynamic=True)
    ac, aqc, asc = ffc(h)
    ag, aqg, asg = gated_gelu_forward_fp8(h, ff)
    report["gated_forward"] = {
        "a_max_rel_diff": float((ag.float() - ac.float()).abs().max() / ac.float().abs().max()),
        "a_equal_share": (ag == ac).float().mean().item(),
        "fp8_bytes_equal": (aqg.view(torch.uint8) == aqc.view(torch.uint8)).float().mean().item(),
        "scales_equal": (asg == asc).float().mean().item(),
        "ms_op": timed(gated_gelu_forward_fp8, h, ff), "ms_compiled": timed(ffc, h),
        # read h0, h1 (bf16), write a (bf16), its float8 form, the scales: at the H200's 4.8 TB/s
        "bytes_bound_ms_h200": h.shape[0] * (2 * ff * 2 + ff * 2 + ff + 4) / 4.8e9}
    print("gated forward", json.dumps(report["gated_forward"]), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
