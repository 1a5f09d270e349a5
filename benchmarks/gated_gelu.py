"""The gated-GELU GEMM alone on the GPU (``backends/triton_gated_gelu.py``) against what the
compiled encoder ran before: cuBLAS over the stacked [wi_0; wi_1] weights, then Inductor's fused
``gelu_tanh(a) * b`` pass. xtr-base's shape: 131,072 tokens x 768 -> 2 x 2048, bf16.
Correctness (relative error against a float32 reference) and a tile sweep (do_bench medians).

    python3 benchmarks/gated_gelu.py --out $OUT/gated.json
"""

from __future__ import annotations

import argparse
import functools
import json

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=131072)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--d-ff", type=int, default=2048)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import triton.testing

    from supergrep.backends.triton_gated_gelu import gated_gelu

    torch.manual_seed(0)
    m, k, n = args.tokens, args.d_model, args.d_ff
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w0 = (torch.randn(n, k, device="cuda") / k ** 0.5).bfloat16()
    w1 = (torch.randn(n, k, device="cuda") / k ** 0.5).bfloat16()
    a = x.float() @ w0.float().T
    ref = torch.nn.functional.gelu(a, approximate="tanh") * (x.float() @ w1.float().T)
    w = torch.cat([w0, w1])

    def before(x):
        g = x @ w.T
        return torch.nn.functional.gelu(g[:, :n], approximate="tanh") * g[:, n:]

    compiled = torch.compile(before)
    flops = 2 * m * k * 2 * n
    rel = lambda t: float((t.float() - ref).norm() / ref.norm())  # noqa: E731
    res = {"shape": [m, k, n], "before_rel_err": rel(compiled(x))}
    t = triton.testing.do_bench(lambda: compiled(x), warmup=25, rep=200, return_mode="median")
    res["before_ms"], res["before_tflops"] = t, flops / t / 1e9
    t = triton.testing.do_bench(lambda: x @ w.T, warmup=25, rep=200, return_mode="median")
    res["cublas_gemm_only_ms"], res["cublas_tflops"] = t, flops / t / 1e9
    rows = []
    for bm, bn, bk, warps, stages in ((128, 128, 64, 8, 3), (128, 128, 64, 8, 4), (128, 64, 64, 4, 3),
                                      (128, 128, 32, 8, 4), (64, 128, 64, 4, 3), (128, 64, 64, 8, 4),
                                      (256, 64, 64, 8, 3), (128, 256, 64, 8, 3)):
        try:
            fn = functools.partial(gated_gelu, x, w0, w1, bm, bn, bk, warps, stages)
            err = rel(fn())
            t = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
            rows.append({"tiles": [bm, bn, bk, warps, stages], "ms": t, "tflops": flops / t / 1e9, "rel_err": err})
        except Exception as exc:  # noqa: BLE001 - a tile that does not fit is a row, not the end
            rows.append({"tiles": [bm, bn, bk, warps, stages], "error": str(exc)[:200]})
        print(rows[-1], flush=True)
    res["triton"] = rows
    ok = [r for r in rows if "ms" in r]
    res["best"] = min(ok, key=lambda r: r["ms"]) if ok else None
    print(json.dumps({k: v for k, v in res.items() if k != "triton"}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
