"""The loss's MaxSim as fused Triton kernels on CUDA (``triton_maxsim``), with autograd.

``losses.maxsim_scores`` asks its ``ops`` for ``fused_maxsim`` first; ``TorchOps`` answers with
``fused_maxsim`` below, which returns None (the einsum path then runs) unless the tensors are on
a CUDA device (or Triton's interpreter is on, for tests), Triton is installed, the shapes are the
loss's and ``ENABLED``: by default ("auto") for batches whose n_q x n_d x d_len reaches
``MIN_WORK`` (large batches, wide documents: where the einsum's temporary costs time and memory);
``SUPERGREP_FUSED_MAXSIM=1`` always, ``=0`` never. The operators are bare
(``opdef.define_op``), so a compiled loss calls the kernels' Python directly.
"""

from __future__ import annotations

import importlib.util
import os

import torch

from supergrep.backends.opdef import define_op

_MODE = os.environ.get("SUPERGREP_FUSED_MAXSIM", "auto").strip().lower()
# "auto": the kernels where the einsum's (n_q, q_len, n_d, d_len) temporary is large; True: always; False: never
ENABLED: bool | str = "auto" if _MODE == "auto" else _MODE not in ("0", "false", "no", "off")
# n_q * n_d * d_len from which "auto" takes the kernels. The loss's forward + backward alone,
# compiled, H200 (benchmarks/maxsim_check.py, benchmarks/results/fused-maxsim-2026-11-29): batch
# 192 x width 176 (6.5M) 2.46 -> 1.68 ms, 192 x 512 (18.9M) 4.77 -> 1.37, 384 x 176 (26M) 9.32 ->
# 2.45, 384 x 512 (75M) 19.93 -> 2.89. In the training step an earlier form of the kernels that
# tied the einsum alone ran 0.976x at batch 192 (bucketed widths): ~1 ms of overhead around the
# ops, more than the 0.8 ms the kernels now save there; from ~12M they save 2.5 ms and more.
MIN_WORK = 12_000_000
_HAVE_TRITON = importlib.util.find_spec("triton") is not None


def _fwd_impl(q, q_mask, d, d_mask, need_arg):
    from supergrep.backends import triton_maxsim as k

    return k.forward(q, q_mask, d, d_mask, need_arg)


def _fwd_fake(q, q_mask, d, d_mask, need_arg):
    n_q, q_len, _ = q.shape
    n_d = d.shape[0]
    f32 = torch.float32
    return (q.new_empty((n_q, n_d), dtype=f32), q.new_empty((n_q, n_d, q_len) if need_arg else (0,), dtype=torch.int32),
            q.new_empty((n_q,), dtype=f32))


def _bwd_impl(g, q, q_mask, d, arg, inv):
    from supergrep.backends import triton_maxsim as k

    return k.backward(g, q, q_mask, d, arg, inv)


def _bwd_fake(g, q, q_mask, d, arg, inv):
    return q.new_empty(q.shape), d.new_empty(d.shape)


_fwd = define_op("supergrep::maxsim_fwd", "(Tensor q, Tensor q_mask, Tensor d, Tensor d_mask, bool need_arg) -> "
                 "(Tensor, Tensor, Tensor)", _fwd_impl, _fwd_fake)
_bwd = define_op("supergrep::maxsim_bwd", "(Tensor g, Tensor q, Tensor q_mask, Tensor d, Tensor arg, Tensor inv) "
                 "-> (Tensor, Tensor)", _bwd_impl, _bwd_fake)


class _FusedMaxSim(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, q_mask, d, d_mask):
        need = ctx.needs_input_grad[0] or ctx.needs_input_grad[2]  # else no argmax is kept (n_q x n_d x q_len)
        scores, arg, inv = _fwd(q, q_mask, d, d_mask, need)
        ctx.save_for_backward(q, q_mask, d, arg, inv)
        return scores

    @staticmethod
    def backward(ctx, g):
        q, q_mask, d, arg, inv = ctx.saved_tensors
        dq, dd = _bwd(g, q, q_mask, d, arg, inv)
        return dq, None, dd, None


def maxsim(q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor) -> torch.Tensor:
    """``losses.maxsim_scores(TorchOps(), q, q_mask, d, d_mask)`` through the kernels, whatever
    the device (on a CPU only under ``TRITON_INTERPRET=1``)."""
    return _FusedMaxSim.apply(q, q_mask, d, d_mask)


def fused_maxsim(q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor) -> torch.Tensor | None:
    """The fused scores where they apply, else None (the caller's einsum path)."""
    if not (ENABLED and _HAVE_TRITON) or torch.are_deterministic_algorithms_enabled():
        return None  # (the backward adds atomically: its float sums' order varies run to run)
    if not (q.is_cuda or os.environ.get("TRITON_INTERPRET") == "1") or d.device != q.device:
        return None
    if q.dim() != 3 or d.dim() != 3 or q.shape[-1] != d.shape[-1] or q.shape[-1] > 512 or q.shape[1] > 512:
        return None
    if q.dtype not in (torch.float32, torch.bfloat16, torch.float16) or d.dtype != q.dtype:
        return None
    if q_mask.shape != q.shape[:2] or d_mask.shape != d.shape[:2]:
        return None
    if ENABLED == "auto" and q.shape[0] * d.shape[0] * d.shape[1] < MIN_WORK:
        return None
    return maxsim(q, q_mask, d, d_mask)
