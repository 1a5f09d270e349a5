"""The loss's MaxSim as fused Triton kernels (backends/triton_maxsim.py): scores and both input
gradients equal the einsum path's (losses/maxsim.py), masks and odd shapes included, eagerly and
inside a compiled loss. Run in Triton's CPU interpreter (the kernels' GPU speed is measured on the
GPU machine: benchmarks/maxsim_check.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from supergrep.backends.torch_ops import TorchOps

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="needs triton (its CPU interpreter runs the kernels)")

CHECK = r"""
import json, torch
from supergrep.backends.torch_ops import TorchOps
from supergrep.backends import torch_maxsim
from supergrep.train.losses import contrastive_loss
from supergrep.train.losses.maxsim import maxsim_scores

torch_maxsim.ENABLED = True  # every shape (the default "auto" leaves small ones to the einsum)

class Plain(TorchOps):
    fused_maxsim = None  # the einsum path

def case(nq, lq, nd, ld, dim, seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.nn.functional.normalize(torch.randn(nq, lq, dim, generator=gen), dim=-1)
    d = torch.nn.functional.normalize(torch.randn(nd, ld, dim, generator=gen), dim=-1)
    qm = torch.rand(nq, lq, generator=gen) > 0.3
    qm[:, 0] = True
    dm = torch.rand(nd, ld, generator=gen) > 0.2
    dm[0, 0] = False
    d[0, 0] = q[0, 0]          # the best match of query 0's first token, masked: must not win
    dm[1, 3:] = False          # a short document
    if nd > 2:
        dm[2] = False          # no real token: -1e4 a query token, and no gradient
    return q, qm, d, dm, torch.randn(nq, nd, generator=gen)

def run(fn, q, qm, d, dm, g):
    qq, dd = q.clone().requires_grad_(), d.clone().requires_grad_()
    s = fn(qq, qm, dd, dm)
    (s * g).sum().backward()
    return s.detach(), qq.grad, dd.grad

out = {}
for name, shape in {"loss": (6, 32, 9, 70, 128), "odd": (5, 7, 4, 13, 24), "one": (1, 16, 3, 5, 16),
                    "wide": (3, 32, 5, 200, 128)}.items():
    q, qm, d, dm, g = case(*shape, seed=len(out))
    s0, dq0, dd0 = run(lambda *a: maxsim_scores(Plain(), *a), q, qm, d, dm, g)
    s1, dq1, dd1 = run(torch_maxsim.maxsim, q, qm, d, dm, g)
    out[name] = [torch.allclose(s0, s1, atol=1e-5), torch.allclose(dq0, dq1, atol=1e-5), torch.allclose(dd0, dd1, atol=1e-5),
                 s1.dtype == torch.float32 and dq1.dtype == dd1.dtype == torch.float32,
                 bool(dd1[0, 0].abs().sum() == 0), bool(s1[:, 2].eq(-1e4).all()) if shape[2] > 2 else True]
# a forward program over several documents (FWD_DOCS, swept by benchmarks/maxsim_check.py), 128 rows
from supergrep.backends import triton_maxsim
triton_maxsim.FWD_ROWS, triton_maxsim.FWD_DOCS = 128, 3
q, qm, d, dm, g = case(6, 32, 10, 70, 128, seed=3)
s0, dq0, dd0 = run(lambda *a: maxsim_scores(Plain(), *a), q, qm, d, dm, g)
s1, dq1, dd1 = run(torch_maxsim.maxsim, q, qm, d, dm, g)
out["docs3"] = [torch.allclose(s0, s1, atol=1e-5), torch.allclose(dq0, dq1, atol=1e-5), torch.allclose(dd0, dd1, atol=1e-5)]
triton_maxsim.FWD_ROWS, triton_maxsim.FWD_DOCS = 0, 0
# scores without gradients (a teacher's): the same, and no argmax kept
q, qm, d, dm, g = case(5, 32, 7, 30, 64, seed=5)
with torch.no_grad():
    plain_s, fused_s = maxsim_scores(Plain(), q, qm, d, dm), torch_maxsim.maxsim(q, qm, d, dm)
_, arg, _ = torch.ops.supergrep.maxsim_fwd(q, qm, d, dm, False)
out["no_grad"] = [torch.allclose(plain_s, fused_s, atol=1e-5), arg.numel() == 0]
# bf16 vectors (an autocast loss): bf16 products accumulated in float32 are the float32 einsum of
# the bf16 values (the einsum in bf16 itself rounds its sums, and its ties differ); bf16 gradients
q, qm, d, dm, g = case(4, 32, 6, 40, 128, seed=7)
q, d = q.bfloat16(), d.bfloat16()
s0, dq0, dd0 = run(lambda *a: maxsim_scores(Plain(), *a), q.float(), qm, d.float(), dm, g)
s1, dq1, dd1 = run(torch_maxsim.maxsim, q, qm, d, dm, g)
out["bf16"] = [torch.allclose(s0, s1, atol=1e-5), dq1.dtype == dd1.dtype == torch.bfloat16,
               torch.allclose(dq0.bfloat16().float(), dq1.float(), atol=1e-2, rtol=1e-2),
               torch.allclose(dd0.bfloat16().float(), dd1.float(), atol=1e-2, rtol=1e-2)]
# the training loss, compiled with dynamic shapes (the trainer's compile_dynamic): the bare operators in its graphs
loss = contrastive_loss(0.05, 0.2, 0.1)
comp = torch.compile(lambda q, qm, d, dm: loss(TorchOps(), q, qm, d, dm)[0], dynamic=True)
res = []
for shape in ((6, 32, 9, 70, 128), (4, 32, 7, 51, 128)):  # a second shape: no recompile needed for correctness
    q, qm, d, dm, _ = case(*shape, seed=11)
    dm[2, 0] = True  # every document has a real token (a -1e4 score would dominate the loss)
    ref = run(lambda *a: loss(Plain(), *a)[0].reshape(1, 1), q, qm, d, dm, torch.ones(1, 1))
    got = run(lambda *a: comp(*a).reshape(1, 1), q, qm, d, dm, torch.ones(1, 1))
    res += [torch.allclose(r, x, atol=1e-5) for r, x in zip(ref, got)]
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    run(lambda *a: comp(*a).reshape(1, 1), q, qm, d, dm, torch.ones(1, 1))
names = {e.name for e in prof.events()}
out["compiled"] = res + ["supergrep::maxsim_fwd" in names, "supergrep::maxsim_bwd" in names]
print(json.dumps(out))
"""


@needs_triton
def test_fused_maxsim_matches_the_einsum_path_in_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run([sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert sorted(out) == ["bf16", "compiled", "docs3", "loss", "no_grad", "odd", "one", "wide"]
    for key, checks in out.items():
        assert all(checks), (key, checks)


def test_fused_maxsim_stays_off_where_it_does_not_apply(monkeypatch):
    """On a CPU (no interpreter), with the switch off, or for shapes the loss never has, TorchOps
    answers None and maxsim_scores runs its einsum path."""
    from supergrep.backends import torch_maxsim

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    q, d = torch.randn(2, 4, 8), torch.randn(3, 5, 8)
    qm, dm = torch.ones(2, 4, dtype=torch.bool), torch.ones(3, 5, dtype=torch.bool)
    assert TorchOps().fused_maxsim(q, qm, d, dm) is None  # a CPU tensor
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    # the decision alone (the kernels run in the interpreter's own process, above: a Triton kernel
    # imported before TRITON_INTERPRET was set would launch on CUDA)
    chosen = torch.zeros(2, 3)
    monkeypatch.setattr(torch_maxsim, "maxsim", lambda *a: chosen)
    monkeypatch.setattr(torch_maxsim, "ENABLED", False)
    assert TorchOps().fused_maxsim(q, qm, d, dm) is None  # switched off
    monkeypatch.setattr(torch_maxsim, "ENABLED", True)
    assert TorchOps().fused_maxsim(q, qm, torch.randn(3, 5, 6), dm) is None  # dims differ
    assert TorchOps().fused_maxsim(q.double(), qm, d.double(), dm) is None  # float64
    assert TorchOps().fused_maxsim(q, qm, d, dm) is chosen  # the interpreter's CPU tensors: the kernels
    torch.use_deterministic_algorithms(True)
    try:
        assert TorchOps().fused_maxsim(q, qm, d, dm) is None  # atomic adds are not deterministic
    finally:
        torch.use_deterministic_algorithms(False)
    monkeypatch.setattr(torch_maxsim, "ENABLED", "auto")  # the default: by the einsum temporary's size
    assert TorchOps().fused_maxsim(q, qm, d, dm) is None  # 2 x 3 x 5 < MIN_WORK
    monkeypatch.setattr(torch_maxsim, "MIN_WORK", 2 * 3 * 5)
    assert TorchOps().fused_maxsim(q, qm, d, dm) is chosen




@needs_triton
def test_forward_tiles_follow_the_measured_batches(monkeypatch):
    """The forward's rows and documents a program: chosen by the batch as measured on the H200
    (64 rows / 1 document for batch 192's bucketed loss, 128 rows / 4 documents at batch 384 and
    for wide documents); FWD_ROWS / FWD_DOCS override both."""
    from supergrep.backends import triton_maxsim as tm

    assert (tm._fwd_rows(192, 192), tm._fwd_docs(192, 192, 176)) == (64, 1)
    assert (tm._fwd_rows(192, 192), tm._fwd_docs(192, 192, 512)) == (64, 4)
    assert (tm._fwd_rows(384, 384), tm._fwd_docs(384, 384, 176)) == (128, 4)
    monkeypatch.setattr(tm, "FWD_DOCS", 2)
    monkeypatch.setattr(tm, "FWD_ROWS", 32)
    assert (tm._fwd_rows(384, 384), tm._fwd_docs(384, 384, 176)) == (32, 2)
