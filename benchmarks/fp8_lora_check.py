"""The fused LoRA product in float8 against bf16 on the GPU, at xtr-base's shapes: relative error
of the output and of every gradient (vs float32), and the forward + backward time of each.

    PYTHONPATH=src python3 benchmarks/fp8_lora_check.py [--tokens 40000] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn

from supergrep.backends.torch_fused_lora import fused_lora_linear
from supergrep.backends.torch_lora import LoRALinear


def mods(outs, d_in, seed=0):
    torch.manual_seed(seed)
    out = []
    for o in outs:
        base = nn.Linear(d_in, o, bias=False).cuda()
        base.weight.data.normal_(0, d_in ** -0.5)
        base.requires_grad_(False)
        m = LoRALinear(base, 16, 32).cuda()
        with torch.no_grad():
            m.lora_B.normal_(0, 0.02)
        out.append(m)
    return out


def run(ms, x, g, dtype):
    for m in ms:
        m.lora_A.grad = m.lora_B.grad = None
    x = x.detach().clone().requires_grad_(True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype is not None):
        y = fused_lora_linear(x, ms)
    (y.float() * g).sum().backward()
    return [y.float(), x.grad.float()] + [m.lora_A.grad for m in ms] + [m.lora_B.grad for m in ms]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=40000)
    ap.add_argument("--out")
    args = ap.parse_args()
    report = {}
    for name, outs, d_in in (("qkv", (768, 768, 768), 768), ("wi", (2048, 2048), 768), ("o", (768,), 768),
                             ("wo", (768,), 2048)):
        ms = mods(outs, d_in)
        x = torch.randn(args.tokens, d_in, device="cuda")
        g = torch.randn(args.tokens, sum(outs), device="cuda") * 1e-3
        ref = run(ms, x, g, None)  # float32
        row = {}
        for fp8 in (False, True):
            for m in ms:
                m.fp8 = fp8
            got = run(ms, x, g, torch.bfloat16)
            rel = [float((a - b).norm() / b.norm()) for a, b in zip(got, ref)]
            for _ in range(3):
                run(ms, x, g, torch.bfloat16)
            torch.cuda.synchronize()
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            for _ in range(20):
                run(ms, x, g, torch.bfloat16)
            t1.record()
            torch.cuda.synchronize()
            row["fp8" if fp8 else "bf16"] = {"ms": t0.elapsed_time(t1) / 20, "rel_y": rel[0], "rel_gx": rel[1],
                                             "rel_gA_max": max(rel[2:2 + len(outs)]), "rel_gB_max": max(rel[2 + len(outs):])}
        report[name] = row
        print(name, json.dumps(row))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
