"""Fused LoRA projections: several ``LoRALinear`` layers that read the same input in one pass.

Unfused (PEFT-style) LoRA costs about five extra full passes over the (N, out) activations per
projection in forward + backward (the low-rank product, the sum, and the same again for the
gradients), plus a GEMM launch each for the base and the two thin products. Here the update is
folded into the frozen weight for the step (``W + scale * B A``, a weight-sized product) and
that merged weight and the A's share one GEMM, so the forward makes no extra pass over the
activations at all; the backward's input gradient and ``g B`` share one GEMM too, and only the
two thin weight-gradient GEMMs read the activations again.

Rounding: under bf16 autocast the merged weight is rounded to bf16 once per step, so the update
reaches the forward with a rounding error of the order of the frozen weight's own bf16 rounding
(which the unfused path has too); the gradients of A and B are exact (they come from ``x A^T``
and ``g B``, not from the merged weight).

Float8 (``LoRALinear.fp8``, train config ``fp8_products``): with a frozen base, the two large
GEMMs of a projection are the forward (``x [W + s B A; A]^T``) and the input gradient
(``g [W + s B A, blockdiag(B)]``); there is no weight-gradient GEMM for W at all. Both run as
float8 (e4m3) products on GPUs with float8 tensor cores (``torch._scaled_mm``: a float32 scale
per row of each operand, float32 accumulation (the tensor cores' fast one on CUDA), output in
the compute dtype), the merged weight quantised once a step in each orientation. The thin
weight-gradient GEMMs of A and B stay in the compute dtype, from the bf16 ``x`` and ``g``, so
the adapter's gradients see float8 error only through ``u = x A^T`` and ``v = g blockdiag(B)``.
The quantisations of the weights and of ``x`` happen outside the autograd function (they need
no gradient): torch.compile (2.11-2.13) cannot trace a reduction over a dynamic-size input
inside one ("lift_tracked_freevar_to_input should not be called on root SubgraphTracer").
With ``fp8_quantize: kernel`` (opt-in) the row quantisations of x and of the gradient go
through one opaque op (``torch_fp8.quantize_rows_op``, a Triton kernel on CUDA) instead of being
fused by Inductor into their producers; measured no faster in the step (``triton_fp8_quant.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from supergrep.backends.torch_fp8 import (
    FP8,
    FP8_MAX,
    _mm,
    gated_gelu,
    gated_gelu_backward_fp8,
    gated_gelu_forward_fp8,
    quantize_rows,
    quantize_rows_op,
)
from supergrep.backends.torch_lora import LoRALinear


def fusable(mods: Sequence[nn.Module]) -> bool:
    """Whether ``fused_lora_linear`` computes exactly what these modules compute.

    False for anything it does not model (callers fall back to the plain modules): another
    module type, a disabled adapter, QAT, dropout, a trainable base, or mixed shapes / rank /
    scale / bias / device.
    """
    if not mods or not all(isinstance(m, LoRALinear) for m in mods):
        return False
    m0 = mods[0]
    has_bias = m0.base.bias is not None
    for m in mods:
        drop = m.dropout
        if not (isinstance(drop, nn.Identity) or (isinstance(drop, nn.Dropout) and drop.p == 0)):
            return False
        if not m.enabled or m.weight_fake_quant is not None:
            return False
        # the fused backward gives the base no gradient: a trainable base must not be fused
        if m.base.weight.requires_grad or (m.base.bias is not None and m.base.bias.requires_grad):
            return False
        if (m.in_features != m0.in_features or m.r != m0.r or m.scale != m0.scale or m.fp8 != m0.fp8
                or (m.base.bias is not None) != has_bias or m.base.weight.device != m0.base.weight.device):
            return False
    return True


def _cat(ts: list[torch.Tensor]) -> torch.Tensor:
    return ts[0] if len(ts) == 1 else torch.cat(ts)


def fp8_shapes_ok(in_features: int, outs: Sequence[int]) -> bool:
    """Float8 products need the inner sizes of both GEMMs (in, sum of outs) in multiples of 16."""
    return in_features % 16 == 0 and sum(outs) % 16 == 0


def _quantized_rows16(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize_rows`` of a weight-sized float32 matrix, its rows padded with zeros to a multiple
    of 16 (a float8 product's output size); scales as the (1, rows) row vector ``_scaled_mm`` takes."""
    pad = -w.shape[0] % 16
    if pad:
        w = torch.cat([w, w.new_zeros(pad, w.shape[1])])
    # row-major, so that q.t() is the column-major operand _scaled_mm requires (elementwise ops
    # keep a transposed input's strides)
    q, s = quantize_rows(w.contiguous())
    return q.contiguous(), s.reshape(1, -1)


def _fp8_mm(xq, xs, wq, ws, dtype, n, bias=None):
    """``torch_fp8._mm`` (its first ``n`` columns: W as ``_quantized_rows16`` may carry padding
    rows), with the tensor cores' fast accumulation on CUDA."""
    h = _mm(xq, xs, wq, ws, dtype, xq.device.type == "cuda", bias)
    return h if h.shape[1] == n else h[:, :n]


def quantize_delayed(x: torch.Tensor, amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` in float8 with one scale from ``amax`` (a 1-element float32 buffer holding the
    previous call's amax; 0 before the first: scale 1), which then takes this call's amax.
    Delayed scaling (Transformer Engine's recipe): the cast does not wait for a reduction over
    x, so the compiled producer of x can write its float8 form in the same pass that feeds
    the amax. Values beyond the previous amax clip to it. Returns the (rows, 1) scale column the
    row-scaled product takes."""
    x32 = x.float()
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))  # (1,)
    q = (x32 / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    amax.copy_(x32.abs().amax().reshape(1))
    return q, scale.reshape(1, 1).expand(x.shape[0], 1).contiguous()


def _fp8_operands(w, a, b, bias, outs, scale, dtype, backward: bool = True):
    """The float8 forms of a step's merged weight (no gradient flows through them): [W + s B A; A]
    row-quantised for the forward, [W + s B A, blockdiag(B)]^T for the input gradient (None
    unless ``backward``: a no-grad forward skips that weight-sized pass); the block-diagonal B
    in ``dtype``; the bias padded to the forward's output columns."""
    bd = b if len(outs) == 1 else torch.block_diag(*b.split(outs))  # (sum_out, k*r), small
    w_eff = w + scale * (bd @ a)  # float32, weight-sized
    fq, fs = _quantized_rows16(torch.cat([w_eff, a]))
    gq = gs = None
    if backward:
        gq, gs = _quantized_rows16(torch.cat([w_eff, bd], dim=1).t())  # (in + k*r, sum_out)
    if bias is not None:
        bias = torch.cat([bias, bias.new_zeros(fq.shape[0] - bias.shape[0])]).to(dtype)
    return fq, fs, gq, gs, bd.to(dtype), bias


def _forward(x, w, a, b, bias, outs, scale, dtype):
    """(y, u, merged weight, block-diagonal B) for flat x (N, in). ``w``, ``a``, ``b`` are the
    float32 masters; the merged weight is formed in float32 and rounded to ``dtype`` once."""
    n_out = w.shape[0]
    bd = b if len(outs) == 1 else torch.block_diag(*b.split(outs))  # (sum_out, k*r), small
    w_eff = (w + scale * (bd @ a)).to(dtype)  # weight-sized: no pass over the activations
    wa = torch.cat([w_eff, a.to(dtype)])
    if bias is None:
        h = x @ wa.t()
    else:  # the bias rides in the GEMM's epilogue (zeros for the A columns)
        h = torch.addmm(torch.cat([bias, bias.new_zeros(a.shape[0])]).to(dtype), x, wa.t())
    # own storage for u (small): saving a view of h would keep all of h alive until backward
    return h[:, :n_out], h[:, n_out:].contiguous(), w_eff, bd.to(dtype)


def _lora_grads(g, x, u, v, outs, scale, need_a, need_b):
    """The thin weight-gradient GEMMs of A (from v = g blockdiag(B) and x) and of B (from g and
    u = x A^T), in the compute dtype, returned in float32 like the masters."""
    ga = gb = None
    if need_a:
        ga = ((v.t() * scale) @ x).float()
    if need_b:  # per module: g_i^T u_i, never the full block-diagonal gradient
        us = u * scale
        r = u.shape[1] // len(outs)
        parts, o = [], 0
        for i, n in enumerate(outs):
            parts.append(g[:, o:o + n].t() @ us[:, i * r:(i + 1) * r])
            o += n
        gb = _cat(parts).float()
    return ga, gb


class _FusedLoRA(torch.autograd.Function):
    """y = x [W + s B A; A]^T, split: y and u = x A^T. W and bias are frozen."""

    @staticmethod
    def forward(ctx, x, w, a, b, bias, outs, scale, dtype):
        y, u, w_eff, bd = _forward(x, w, a, b, bias, outs, scale, dtype)
        ctx.save_for_backward(x, u, w_eff, a.to(dtype), bd)
        ctx.outs, ctx.scale, ctx.device_type = outs, scale, x.device.type
        return y

    @staticmethod
    def backward(ctx, g):
        x, u, w_eff, a, bd = ctx.saved_tensors
        outs, scale = ctx.outs, ctx.scale
        need_x, _, need_a, need_b = ctx.needs_input_grad[:4]
        gx = v = None
        # the compute dtype was fixed in forward; a surrounding autocast must not change it
        with torch.autocast(ctx.device_type, enabled=False):
            g = g.to(x.dtype)
            if need_x:  # one GEMM for both g (W + s B A) and v = g blockdiag(B)
                n_in = x.shape[1]
                h = g @ torch.cat([w_eff, bd], dim=1)
                gx, v = h[:, :n_in], h[:, n_in:]
            elif need_a:
                v = g @ bd
            ga, gb = _lora_grads(g, x, u, v, outs, scale, need_a, need_b)
        return gx, None, ga, gb, None, None, None, None


class _FusedLoRAFp8(torch.autograd.Function):
    """``_FusedLoRA`` with the forward and the input gradient as float8 products; the operands
    come quantised (``_fp8_operands``, x by ``quantize_rows``); a and b are passed for their
    gradients only."""

    @staticmethod
    def forward(ctx, x, a, b, xq, xs, fq, fs, gq, gs, bd, bias, n_out, outs, scale, kernel):
        h = _fp8_mm(xq, xs, fq, fs, x.dtype, n_out + a.shape[0], bias)
        u = h[:, n_out:].contiguous()
        ctx.save_for_backward(x, u, gq, gs, bd)
        ctx.outs, ctx.scale, ctx.device_type, ctx.kernel = outs, scale, x.device.type, kernel
        return h[:, :n_out]

    @staticmethod
    def backward(ctx, g):
        x, u, gq, gs, bd = ctx.saved_tensors
        with torch.autocast(ctx.device_type, enabled=False):
            g = g.to(x.dtype).contiguous()
            quantize = quantize_rows_op if ctx.kernel else quantize_rows
            grads = _fp8_backward(g, lambda: quantize(g), x, u, gq, gs, bd, ctx)
        return grads + (None,) * 12


def _fp8_backward(g, g8_rows, x, u, gq, gs, bd, ctx):
    """(gx, ga, gb) of a float8 fused projection from its output gradient ``g`` (compute dtype):
    one float8 GEMM for both the input gradient g (W + s B A) and v = g blockdiag(B), from
    ``g8_rows()`` (g's float8 rows and scales, asked for only when x needs a gradient), then
    LoRA's thin weight-gradient GEMMs."""
    need_x, need_a, need_b = ctx.needs_input_grad[:3]
    gx = v = None
    if need_x:
        n_in = x.shape[1]
        g8, g8s = g8_rows()
        h = _fp8_mm(g8, g8s, gq, gs, x.dtype, n_in + bd.shape[1])
        gx, v = h[:, :n_in], h[:, n_in:]
    elif need_a:
        v = g @ bd
    ga, gb = _lora_grads(g, x, u, v, ctx.outs, ctx.scale, need_a, need_b)
    return gx, ga, gb


class _FusedLoRAFp8Gated(torch.autograd.Function):
    """``_FusedLoRAFp8`` of the fused wi_0/wi_1 projection followed by T5's gated GELU: returns
    ``a = gelu_tanh(y0) * y1``. The backward takes da, and the gated GELU's backward with the
    float8 quantisation of its result runs as one op (``torch_fp8.gated_gelu_backward_fp8``: a
    Triton kernel on CUDA, one read a row), feeding the same input-gradient product and LoRA
    gradients as ``_FusedLoRAFp8`` (train config ``fp8_quantize: gated``)."""

    @staticmethod
    def forward(ctx, x, a, b, xq, xs, fq, fs, gq, gs, bd, bias, n_out, outs, scale, quant_out):
        h = _fp8_mm(xq, xs, fq, fs, x.dtype, n_out + a.shape[0], bias)
        y = h[:, :n_out]
        u = h[:, n_out:].contiguous()
        ctx.save_for_backward(x, u, gq, gs, bd, y)
        ctx.outs, ctx.scale, ctx.device_type = outs, scale, x.device.type
        if quant_out:  # the activation with its float8 rows, one op (the next projection's input)
            act, aq, as_ = gated_gelu_forward_fp8(y, n_out // 2)
            ctx.mark_non_differentiable(aq, as_)
            return act, aq, as_
        return gated_gelu(y, n_out // 2)

    @staticmethod
    def backward(ctx, da, *_):
        x, u, gq, gs, bd, y = ctx.saved_tensors
        with torch.autocast(ctx.device_type, enabled=False):
            g, g8, g8s = gated_gelu_backward_fp8(y, da.to(x.dtype), y.shape[1] // 2)
            grads = _fp8_backward(g, lambda: (g8, g8s), x, u, gq, gs, bd, ctx)
        return grads + (None,) * 12


def gated_fusable(mods: Sequence[nn.Module], act: nn.Module) -> bool:
    """Whether ``fused_lora_linear(x, mods, gated=True)`` takes the one-kernel backward for
    ``act(wi_0 x) * wi_1 x``: two fusable float8 projections of equal width set to
    ``fp8_quantize: gated``, a tanh-GELU activation (HF ``gelu_new`` / ``gelu_pytorch_tanh``)."""
    if len(mods) != 2 or not fusable(mods) or not mods[0].fp8 or getattr(mods[0], "fp8_quantize", "") != "gated":
        return False
    outs = tuple(m.out_features for m in mods)
    name = type(act).__name__
    tanh = name == "NewGELUActivation" or (name in ("PytorchGELUTanh", "GELUTanh")) or (
        isinstance(act, nn.GELU) and act.approximate == "tanh")
    return tanh and outs[0] == outs[1] and fp8_shapes_ok(mods[0].in_features, outs)


def fused_lora_linear(x: torch.Tensor, mods: Sequence[LoRALinear], gated: bool = False,
                      opaque_grad: bool = False, quant_out: bool = False,
                      x_quant: tuple[torch.Tensor, torch.Tensor] | None = None):
    """``torch.cat([m(x) for m in mods], dim=-1)`` with no extra pass over the activations in
    forward and two in backward (module docstring).

    Only for modules where ``fusable(mods)`` holds. Under autocast the matmuls run in the
    autocast dtype (as ``F.linear`` would) and so does the output; otherwise in ``x.dtype``.
    The output may be a strided view (one GEMM writes it beside ``x A^T``). With ``mods[0].fp8``
    and sizes float8 products take (``fp8_shapes_ok``) the two large GEMMs run in float8
    (module docstring); otherwise in the compute dtype. ``gated`` (two modules of equal width,
    ``gated_fusable``): returns T5's ``gelu_tanh(y0) * y1`` of the two outputs instead, its
    backward one op with the float8 quantisation (``_FusedLoRAFp8Gated``). ``opaque_grad``: the
    output's gradient comes out of an opaque op (our attention backward's d(qkv)), so there is no
    producer for Inductor to fuse its row quantisation into; with ``fp8_quantize: gated`` it runs
    as the Triton row kernel (0.113 vs Inductor's standalone 0.226 ms at 36,864 x 2,304 on an
    H100, same bytes: ``benchmarks/results/fp8-quant-h100-2026-11-28/``).
    ``quant_out`` (with ``gated``): returns (a, *quantize_rows(a)), the activation and its float8
    rows from one op (``torch_fp8.gated_gelu_forward_fp8``); ``x_quant``: x's float8 rows and
    scales, computed by the caller that way (row scaling only; ignored on other paths).
    """
    dev = x.device.type
    dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else x.dtype
    m0 = mods[0]
    x2 = x.reshape(-1, x.shape[-1]).to(dtype)
    # the float32 masters go in: the update is merged into the frozen weight before rounding
    w = _cat([m.base.weight.float() for m in mods])
    a = _cat([m.lora_A.float() for m in mods])
    b = _cat([m.lora_B.float() for m in mods])
    bias = None if m0.base.bias is None else _cat([m.base.bias.float() for m in mods])
    outs = tuple(m.out_features for m in mods)
    grad = torch.is_grad_enabled() and (x2.requires_grad or a.requires_grad or b.requires_grad)
    with torch.autocast(dev, enabled=False):
        if m0.fp8 and fp8_shapes_ok(m0.in_features, outs):
            with torch.no_grad():
                ops = _fp8_operands(w, a.detach(), b.detach(), bias, outs, m0.scale, dtype, backward=grad)
                amax = getattr(m0, "fp8_amax", None)  # delayed scaling (set_fp8_products)
                mode = getattr(m0, "fp8_quantize", "compiled")
                kernel = mode == "kernel"
                if amax is not None:
                    xq, xs = quantize_delayed(x2.detach(), amax)
                elif x_quant is not None:
                    xq, xs = x_quant
                else:
                    xq, xs = (quantize_rows_op if kernel else quantize_rows)(x2.detach())
            if grad and gated:  # the activation inside, its backward one op with the quantisation
                y = _FusedLoRAFp8Gated.apply(x2, a, b, xq, xs, *ops, w.shape[0], outs, m0.scale, quant_out)
                if quant_out:
                    act, aq, as_ = y
                    return act.reshape(*x.shape[:-1], act.shape[-1]), aq, as_
                return y.reshape(*x.shape[:-1], y.shape[-1])
            if grad:
                grad_kernel = kernel or (opaque_grad and mode == "gated")
                y = _FusedLoRAFp8.apply(x2, a, b, xq, xs, *ops, w.shape[0], outs, m0.scale, grad_kernel)
            else:
                y = _fp8_mm(xq, xs, ops[0], ops[1], dtype, w.shape[0] + a.shape[0], ops[5])[:, :w.shape[0]]
        elif grad:
            y = _FusedLoRA.apply(x2, w, a, b, bias, outs, m0.scale, dtype)
        else:
            y = _forward(x2, w, a, b, bias, outs, m0.scale, dtype)[0]
        if gated:
            y = gated_gelu(y, y.shape[1] // 2)
            if quant_out:  # not the float8 path: the same triple, in torch
                return (y.reshape(*x.shape[:-1], y.shape[-1]), *(t.contiguous() for t in quantize_rows(y.detach())))
    return y.reshape(*x.shape[:-1], y.shape[-1])
