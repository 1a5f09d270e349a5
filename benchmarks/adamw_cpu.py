"""AdamW on xtr-base's LoRA tensors on the CPU: per-tensor loop vs foreach vs fused (+ clipping).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/adamw_cpu.py
"""

import time

import torch

SHAPES = []
for _ in range(12):  # 12 layers x (q, k, v, o: 768->768; wi_0, wi_1: 768->2048; wo: 2048->768), r = 16
    for i, o in [(768, 768)] * 4 + [(768, 2048)] * 2 + [(2048, 768)]:
        SHAPES += [(16, i), (o, 16)]
SHAPES.append((128, 768))  # the projection


def bench(**kw) -> float:
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(*s)) for s in SHAPES]
    for p in ps:
        p.grad = torch.randn_like(p)
    opt = torch.optim.AdamW(ps, lr=1e-3, **kw)
    for _ in range(3):
        opt.step()
    t = time.perf_counter()
    for _ in range(20):
        torch.nn.utils.clip_grad_norm_(ps, 1.0)
        opt.step()
    return (time.perf_counter() - t) / 20 * 1e3


if __name__ == "__main__":
    print(f"{len(SHAPES)} tensors, {sum(a * b for a, b in SHAPES) / 1e6:.2f}M parameters")
    for kw in ({}, {"foreach": False}, {"foreach": True}, {"fused": True}):
        print(kw or "default", f"{bench(**kw):.1f} ms per clip + step")
