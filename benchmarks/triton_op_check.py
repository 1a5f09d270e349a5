"""Our Triton kernels inside compiled graphs (``torch.library.triton_op``: Inductor launches them
from its own wrapper code) give what their eager calls give, on a GPU: the varlen T5 attention
forward and backward, and the gated GELU backward with its float8 quantisation. A quick check to
run before a benchmark that compiles them (CPU tests run the kernels in Triton's interpreter, where
Inductor cannot compile them).

    PYTHONPATH=src python3 benchmarks/triton_op_check.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from supergrep.backends.t5_attention import t5_varlen_attention
from supergrep.backends.torch_fp8 import gated_gelu_backward_fp8


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    heads, d, dist = 12, 64, 128
    report: dict = {}
    ok = True
    for lengths in ((37, 159, 512, 3, 200), (64, 90, 11)):  # two token counts: one compiled graph (dynamic)
        cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=dev)
        n, max_len = int(cu[-1]), max(lengths)
        qkv = torch.randn(n, 3 * heads * d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        table = torch.randn(heads, 2 * dist + 1, device=dev)
        do = torch.randn(n, heads * d, device=dev, dtype=torch.bfloat16)
        fn = torch.compile(t5_varlen_attention, dynamic=True)
        res = {}
        for name, f in (("eager", t5_varlen_attention), ("compiled", fn)):
            o = f(qkv, cu, max_len, table, dist, heads)
            (g,) = torch.autograd.grad(o, qkv, do)
            res[name] = (o.float(), g.float())
        diff = [float((res["compiled"][i] - res["eager"][i]).abs().max()) for i in range(2)]
        report[f"attention {n} tokens: max |compiled - eager| (o, dqkv)"] = diff
        # the same kernels on the same inputs: equal, or within bf16 rounding if Inductor's launch differs
        ok &= all(x <= 1e-2 * float(res["eager"][i].abs().max()) for i, x in enumerate(diff))
    h = torch.randn(8192, 4096 + 32, device=dev, dtype=torch.bfloat16)
    da = (torch.randn(8192, 2048, device=dev) * 1e-3).to(torch.bfloat16)
    eager = gated_gelu_backward_fp8(h, da, 2048)
    comp = torch.compile(lambda h, da: gated_gelu_backward_fp8(h, da, 2048), dynamic=True)(h, da)
    same = [bool(torch.equal(eager[0], comp[0])), bool(torch.equal(eager[1].view(torch.uint8), comp[1].view(torch.uint8))),
            bool(torch.equal(eager[2], comp[2]))]
    report["gated GELU backward: compiled == eager (g, fp8, scales)"] = same
    ok &= all(same)
    report["ok"] = ok
    print(json.dumps(report, indent=1), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
