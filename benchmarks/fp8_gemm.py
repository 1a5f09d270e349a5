"""Float8 products alone, on the GPU: what each of ``torch_fp8.py``'s options buys at xtr-base's
encoding shapes, before paying for a whole `bench encode` run.

For one 131K-token call, per layer: q/k/v stacked (768 -> 2304), o (768 -> 768), wi_0/wi_1
stacked (768 -> 4096), wo (2048 -> 768). Each product timed (median of ``do_bench``) as bf16
(cuBLAS), float8 with row scales (the shipped default), row + fast accumulation, tensor scales,
tensor + fast accumulation; plus the input quantisation passes (compiled), row vs tensor. The
sum over one layer's four products is what the encoder pays 12 times a call.

    python3 benchmarks/fp8_gemm.py --tokens 131072 --out $OUT/fp8-gemm.json
"""

from __future__ import annotations

import argparse
import json

import torch

SHAPES = {"qkv": (768, 2304), "o": (768, 768), "wi": (768, 4096), "wo": (2048, 768)}  # (in, out)


def _product(mode: str, x, w, row, tensor):
    """A no-argument callable running one product in ``mode`` (bf16, row[+fast], tensor[+fast])."""
    if mode == "bf16":
        return lambda: torch.nn.functional.linear(x, w)
    xq, xs, wq, ws = row if mode.startswith("row") else tensor
    fast = mode.endswith("+fast")
    return lambda: torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16, use_fast_accum=fast)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=131072)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import triton.testing

    from supergrep.backends.torch_fp8 import FP8_MAX, quantize_rows, quantize_tensor

    torch.manual_seed(0)
    dev = "cuda"
    m = args.tokens
    modes = ("bf16", "row", "row+fast", "tensor", "tensor+fast")
    report = {"tokens": m, "device": torch.cuda.get_device_name(), "torch": torch.__version__, "shapes": {}}
    for name, (k, n) in SHAPES.items():
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) / k**0.5
        ref = (x.float() @ w.float().t())
        xr, xrs = quantize_rows(x)
        wr, wrs = quantize_rows(w)
        xt, xts = quantize_tensor(x)
        wt, wts = quantize_tensor(w)
        row = {}
        for mode in modes:
            fn = _product(mode, x, w, (xr, xrs, wr, wrs.reshape(1, -1)), (xt, xts, wt, wts))
            y = fn().float()
            cos = torch.nn.functional.cosine_similarity(y, ref, dim=-1)
            ms = triton.testing.do_bench(fn, warmup=25, rep=100)
            row[mode] = {"ms": ms, "tflops": 2 * m * k * n / ms / 1e9, "cos_min": cos.min().item(),
                         "cos_mean": cos.mean().item()}
        quant = {}
        for qname, q in (("row", quantize_rows), ("tensor", quantize_tensor)):
            cq = torch.compile(q)
            cq(x)
            quant[qname] = triton.testing.do_bench(lambda cq=cq, x=x: cq(x), warmup=25, rep=100)
        row["quantise_input_ms"] = quant
        report["shapes"][name] = row
        print(f"{name:4s} {k}->{n}: " + "  ".join(f"{md} {row[md]['ms']:.3f} ms ({row[md]['tflops']:.0f} TF/s, "
                                                   f"cos {row[md]['cos_min']:.4f})" for md in modes)
              + f"  quantise row {quant['row']:.3f} / tensor {quant['tensor']:.3f} ms", flush=True)
    per_layer = {md: sum(report["shapes"][s][md]["ms"] for s in SHAPES) for md in modes}
    report["per_layer_ms"] = per_layer
    report["per_call_ms_12_layers"] = {md: 12 * v for md, v in per_layer.items()}
    print("one layer's four products (ms): " + ", ".join(f"{md} {v:.3f} ({per_layer['bf16'] / v:.2f}x bf16)"
                                                       for md, v in per_layer.items()))
    print(f"(float8 max {FP8_MAX})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
