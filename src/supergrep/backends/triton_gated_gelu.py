"""Triton kernels: the gated GELU's backward and the float8 row quantisation of its output, in one
read of each row (train config ``fp8_quantize: gated``); and its forward with the quantisation of
the activation (``torch_t5_varlen.GATED_FORWARD_KERNEL``, on by default: 1.010x the step, performance.md #44).

T5 v1.1 / XTR's feed-forward computes ``a = gelu_tanh(h0) * h1`` from the fused wi_0/wi_1
product ``h = [h0, h1]`` (N, 2w). In the float8 training step, the backward then needs
``dh = [da * h1 * gelu'(h0), da * gelu(h0)]`` in bf16 (LoRA's B gradient reads it) and in float8
with one scale per row (the input-gradient product reads that). Inductor fuses the quantisation
into the GELU's backward as a looped reduction over the 2w-wide rows that computes the gradient
twice (once for the amax, once for the cast), plus a pointwise kernel beforehand: 0.79 ms a layer
on an H200 at 36.9K tokens (twentieth session's trace: 18% of the step's GPU time for 12
layers), ~3x the bytes it must move. Here one program holds whole rows in registers: it reads
h0, h1 and da once, writes dh in bf16, its float8 form and the row's scale.

Numbers: computed in float32 from the bf16 inputs (as Inductor computes); the row's amax and the
cast are taken over the bf16-rounded dh, so the float8 bytes and scales are exactly
``torch_fp8.quantize_rows`` of the bf16 dh. tanh(z) as 1 - 2 / (exp(2z) + 1) (Triton has exp on
every backend, its CPU interpreter included). Imported only where Triton is installed.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from supergrep.backends.triton_launch import CachedKernel

FP8_MAX = tl.constexpr(448.0)


@triton.jit
def gated_gelu_bwd_quant_kernel(h_ptr, d_ptr, g_ptr, q_ptr, s_ptr, n_rows, width, stride_h, stride_d,
                                stride_g, stride_q, BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr,
                                OUT_FP32: tl.constexpr):
    """BLOCK_M rows a program, each whole (BLOCK_W >= width per half). OUT_FP32 stores the scaled,
    clamped values before the float8 cast (tests: the CPU interpreter rounds float8 differently)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_W)
    inside = (rows[:, None] < n_rows) & (cols[None, :] < width)
    hrow = h_ptr + rows[:, None] * stride_h + cols[None, :]
    a = tl.load(hrow, mask=inside, other=0.0).to(tl.float32)
    b = tl.load(hrow + width, mask=inside, other=0.0).to(tl.float32)
    d = tl.load(d_ptr + rows[:, None] * stride_d + cols[None, :], mask=inside, other=0.0).to(tl.float32)
    # tanh of the GELU's argument sqrt(2 / pi) (a + 0.044715 a^3); literals, not globals: a
    # constexpr global times a tensor fails in Triton's interpreter
    t = 1.0 - 2.0 / (tl.exp(1.5957691216057308 * (a + 0.044715 * a * a * a)) + 1.0)
    gelu = 0.5 * a * (1.0 + t)
    dgelu = 0.5 * (1.0 + t) + 0.3989422804014327 * a * (1.0 - t * t) * (1.0 + 0.134145 * a * a)
    # rounded to the output dtype before the amax: the float8 form is that of the stored gradient
    g0 = (d * b * dgelu).to(g_ptr.dtype.element_ty)
    g1 = (d * gelu).to(g_ptr.dtype.element_ty)
    grow = g_ptr + rows[:, None] * stride_g + cols[None, :]
    tl.store(grow, g0, mask=inside)
    tl.store(grow + width, g1, mask=inside)
    g0 = g0.to(tl.float32)
    g1 = g1.to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(g0), axis=1), tl.max(tl.abs(g1), axis=1))
    scale = tl.where(amax > 0, amax / FP8_MAX, 1.0)
    q0 = tl.minimum(tl.maximum(g0 / scale[:, None], -FP8_MAX), FP8_MAX)
    q1 = tl.minimum(tl.maximum(g1 / scale[:, None], -FP8_MAX), FP8_MAX)
    qrow = q_ptr + rows[:, None] * stride_q + cols[None, :]
    if OUT_FP32:
        tl.store(qrow, q0, mask=inside)
        tl.store(qrow + width, q1, mask=inside)
    else:
        tl.store(qrow, q0.to(tl.float8e4nv), mask=inside)
        tl.store(qrow + width, q1.to(tl.float8e4nv), mask=inside)
    tl.store(s_ptr + rows, scale, mask=rows < n_rows)


@triton.jit
def gated_gelu_fwd_quant_kernel(h_ptr, a_ptr, q_ptr, s_ptr, n_rows, width, stride_h, stride_a, stride_q,
                                BLOCK_M: tl.constexpr, BLOCK_W: tl.constexpr, OUT_FP32: tl.constexpr):
    """The forward: a = gelu_tanh(h0) * h1 in h's dtype, its float8 rows and scales (the next
    projection's input), one read of h0 and h1. Inductor fuses the quantisation into the GELU as
    a looped reduction that computes a twice (0.19 ms a layer at 36.9K x 2 x 2048 on an H200, the
    twenty-fourth session's trace: 2.31 ms a step)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_W)
    inside = (rows[:, None] < n_rows) & (cols[None, :] < width)
    hrow = h_ptr + rows[:, None] * stride_h + cols[None, :]
    x = tl.load(hrow, mask=inside, other=0.0).to(tl.float32)
    b = tl.load(hrow + width, mask=inside, other=0.0).to(tl.float32)
    t = 1.0 - 2.0 / (tl.exp(1.5957691216057308 * (x + 0.044715 * x * x * x)) + 1.0)
    a = (0.5 * x * (1.0 + t) * b).to(a_ptr.dtype.element_ty)
    tl.store(a_ptr + rows[:, None] * stride_a + cols[None, :], a, mask=inside)
    a = a.to(tl.float32)  # the float8 form is that of the stored activation
    amax = tl.max(tl.abs(a), axis=1)
    scale = tl.where(amax > 0, amax / FP8_MAX, 1.0)
    q = tl.minimum(tl.maximum(a / scale[:, None], -FP8_MAX), FP8_MAX)
    qrow = q_ptr + rows[:, None] * stride_q + cols[None, :]
    if OUT_FP32:
        tl.store(qrow, q, mask=inside)
    else:
        tl.store(qrow, q.to(tl.float8e4nv), mask=inside)
    tl.store(s_ptr + rows, scale, mask=rows < n_rows)


_KERNEL = CachedKernel(gated_gelu_bwd_quant_kernel)
_FWD_KERNEL = CachedKernel(gated_gelu_fwd_quant_kernel)  # launched without Triton's binder (triton_launch.py)


def launch_config(width: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_W, num_warps): ~4,096 elements of each of h0, h1, d a program (16 a thread
    at 8 warps: 16-byte vector loads of bf16), whole rows."""
    block_w = triton.next_power_of_2(width)
    block_m = max(1, 4096 // block_w)
    return block_m, block_w, 8 if block_m * block_w >= 4096 else 4


def gated_gelu_backward_fp8(h: torch.Tensor, d: torch.Tensor, width: int, out_fp32: bool = False,
                            config: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dh, q, scale) for ``a = gelu_tanh(h[:, :width]) * h[:, width:2 * width]`` and the gradient
    ``d`` (N, width) of a: dh (N, 2 * width) in h's dtype, row-major; q its rows in float8 e4m3
    (float32 with ``out_fp32``); scale (N, 1) float32. h and d may be views with any row stride
    (h: a slice of a wider GEMM output) but unit stride along a row. ``config``: (BLOCK_M,
    num_warps) instead of ``launch_config``'s (benchmarks/fp8_quant_check.py sweeps them)."""
    assert h.dim() == 2 and d.dim() == 2 and d.shape == (h.shape[0], width) and h.shape[1] >= 2 * width
    if h.stride(1) != 1:
        h = h.contiguous()
    if d.stride(1) != 1:
        d = d.contiguous()
    n = h.shape[0]
    g = torch.empty((n, 2 * width), device=h.device, dtype=h.dtype)
    q = torch.empty((n, 2 * width), device=h.device, dtype=torch.float32 if out_fp32 else torch.float8_e4m3fn)
    scale = torch.empty((n, 1), device=h.device, dtype=torch.float32)
    if n:
        block_m, block_w, warps = launch_config(width)
        if config is not None:
            block_m, warps = config
        _KERNEL[(triton.cdiv(n, block_m),)](
            h, d, g, q, scale, n, width, h.stride(0), d.stride(0), g.stride(0), q.stride(0),
            BLOCK_M=block_m, BLOCK_W=block_w, OUT_FP32=out_fp32, num_warps=warps)
    return g, q, scale


def gated_gelu_forward_fp8(h: torch.Tensor, width: int, out_fp32: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, q, scale) for ``a = gelu_tanh(h[:, :width]) * h[:, width:2 * width]``: a (N, width) in
    h's dtype, row-major; q its rows in float8 e4m3 (float32 with ``out_fp32``), exactly
    ``quantize_rows(a)``; scale (N, 1) float32. h may be a view with any row stride (a slice of a
    wider GEMM output) but unit stride along a row."""
    assert h.dim() == 2 and h.shape[1] >= 2 * width
    if h.stride(1) != 1:
        h = h.contiguous()
    n = h.shape[0]
    a = torch.empty((n, width), device=h.device, dtype=h.dtype)
    q = torch.empty((n, width), device=h.device, dtype=torch.float32 if out_fp32 else torch.float8_e4m3fn)
    scale = torch.empty((n, 1), device=h.device, dtype=torch.float32)
    if n:
        block_m, block_w, warps = launch_config(width)
        _FWD_KERNEL[(triton.cdiv(n, block_m),)](h, a, q, scale, n, width, h.stride(0), a.stride(0), q.stride(0),
                                                BLOCK_M=block_m, BLOCK_W=block_w, OUT_FP32=out_fp32, num_warps=warps)
    return a, q, scale
