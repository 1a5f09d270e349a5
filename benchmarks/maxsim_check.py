"""The training loss with MaxSim as fused Triton kernels (backends/triton_maxsim.py) against the
einsum path, alone, on the GPU: correctness (scores, both input gradients) and the time of the
loss's forward + backward, both compiled as the trainer compiles its loss (``compile_dynamic``).

    python benchmarks/maxsim_check.py --out $OUT/maxsim.json        # CUDA; --device cpu: the
                                                                     # interpreter, tiny shapes

Shapes: the xtr-base workload's loss, queries (n, 32, 128) against documents (n, W, 128), the
documents' real lengths drawn from the committed chunk-length distribution (capped at W), at
batch 192 and 384, W = the bucketed batches' typical width (176) and a random batch's (512).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

if "--device" in sys.argv and sys.argv[sys.argv.index("--device") + 1:][:1] == ["cpu"]:  # Triton's interpreter: before Triton's import
    os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402

from supergrep.backends import torch_maxsim, triton_maxsim  # noqa: E402
from supergrep.backends.torch_compile import compile_dynamic  # noqa: E402
from supergrep.backends.torch_ops import TorchOps  # noqa: E402
from supergrep.train.losses import contrastive_loss  # noqa: E402


class _Plain(TorchOps):
    fused_maxsim = None  # the einsum path


def _case(n: int, width: int, dim: int, device: str, seed: int):
    gen = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(n, 32, dim, generator=gen), dim=-1)
    d = torch.nn.functional.normalize(torch.randn(n, width, dim, generator=gen), dim=-1)
    lengths = np.minimum(np.random.default_rng(seed).lognormal(4.8, 0.8, size=n).astype(int) + 8, width)
    dm = torch.arange(width)[None, :] < torch.from_numpy(lengths)[:, None]
    qm = torch.arange(32)[None, :] < torch.from_numpy(np.random.default_rng(seed + 1).integers(6, 33, size=n))[:, None]
    return [x.to(device) for x in (q, qm, d, dm)]


def _run(fn, q, qm, d, dm):
    qq, dd = q.detach().clone().requires_grad_(), d.detach().clone().requires_grad_()
    loss = fn(qq, qm, dd, dm)
    loss.backward()
    return loss.detach(), qq.grad, dd.grad


def _time(fn, args, sync, reps: int) -> float:
    for _ in range(3):
        _run(fn, *args)
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        _run(fn, *args)
    sync()
    return (time.perf_counter() - t0) * 1000 / reps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.device == "cpu":
        shapes, reps = [(8, 40)], 1
    else:
        torch.backends.cuda.matmul.allow_tf32 = True  # the trainer's default (train config tf32)
        shapes, reps = [(192, 176), (192, 512), (384, 176), (384, 512)], a.reps
    torch_maxsim.ENABLED = True  # every shape through the kernels (the trainer's "auto" skips small ones)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    loss = contrastive_loss(0.05, 0.2, 0.1)
    fused = compile_dynamic(lambda q, qm, d, dm: loss(TorchOps(a.device), q, qm, d, dm)[0], None)
    plain = compile_dynamic(lambda q, qm, d, dm: loss(_Plain(a.device), q, qm, d, dm)[0], None)
    rows = []
    for n, width in shapes:
        args = _case(n, width, 128, a.device, seed=n + width)
        ref, got = _run(plain, *args), _run(fused, *args)
        # relative to the whole tensor's norm: a near-tie resolved the other way (tf32 rounds both
        # paths' products differently) moves one token's gradient row to another, so the largest
        # element's error says little; "ieee" repeats the comparison in exact float32 products
        err = [float((r - g).norm() / r.norm().clamp_min(1e-12)) for r, g in zip(ref, got)]
        if a.device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = False
            ref_x, got_x = _run(plain, *args), _run(fused, *args)
            torch.backends.cuda.matmul.allow_tf32 = True
        else:
            ref_x, got_x = ref, got
        exact = [float((r - g).abs().max() / r.abs().max().clamp_min(1e-12)) for r, g in zip(ref_x, got_x)]
        if a.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        t_plain = _time(plain, args, sync, reps)
        peak_plain = torch.cuda.max_memory_allocated() - base if a.device == "cuda" else 0
        if a.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t_fused = _time(fused, args, sync, reps)
        peak_fused = torch.cuda.max_memory_allocated() - base if a.device == "cuda" else 0
        sweep = {}  # the kernels' options, each timed (and checked) on the same inputs
        for rows_, docs_ in ((64, 1), (128, 1), (64, 4), (128, 4)):  # the forward's rows and documents a program
            triton_maxsim.FWD_ROWS, triton_maxsim.FWD_DOCS = rows_, docs_
            alt = _run(fused, *args)
            sweep[f"rows {rows_}, docs {docs_}"] = [
                round(_time(fused, args, sync, reps), 3),
                round(max(float((r - g).norm() / r.norm()) for r, g in zip(ref, alt)), 4)]
        triton_maxsim.FWD_ROWS, triton_maxsim.FWD_DOCS = 0, 0  # by the batch (the defaults)
        row = {"batch": n, "width": width, "doc_tokens": int(args[3].sum()), "einsum_ms": round(t_plain, 3),
               "fused_ms": round(t_fused, 3), "speedup": round(t_plain / t_fused, 2),
               "einsum_peak_mib": round(peak_plain / 2**20, 1), "fused_peak_mib": round(peak_fused / 2**20, 1),
               "rel_err_loss_dq_dd": [round(e, 6) for e in err], "ieee_max_rel_err": [round(e, 6) for e in exact],
               "sweep_ms_err": sweep}
        rows.append(row)
        print(json.dumps(row), flush=True)
    ok = all(max(r["ieee_max_rel_err"]) < 5e-3 for r in rows)  # one near-tie can flip in float32 too
    print("| batch | width | einsum ms | fused ms | x | peak MiB einsum / fused | rel. error loss, dq, dd (tf32, norm) | max rel. error (float32) |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batch']} | {r['width']} | {r['einsum_ms']} | {r['fused_ms']} | {r['speedup']} | "
              f"{r['einsum_peak_mib']} / {r['fused_peak_mib']} | {r['rel_err_loss_dq_dd']} | {r['ieee_max_rel_err']} |")
    print("correct:", ok)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu", "rows": rows,
                       "correct": ok}, f, indent=1)


if __name__ == "__main__":
    main()
