"""Triton kernel: a matrix's rows in float8 (e4m3), one scale per row, in one read of the row.

Why our own kernel: inside a compiled training step Inductor fuses ``quantize_rows`` into the
kernel that produces its input; for the gated GELU's backward that is a looped reduction over
4,096-wide rows that computes the GELU's gradient twice (once for the amax, once for the cast).
Behind a custom op (``torch_fp8.quantize_rows_op``, train config ``fp8_quantize: kernel``) the
producer writes its bf16 output once and this kernel reads each row once. Measured on an H100
(docs/performance.md #33): alone, 1.2-2.3x faster than Inductor's quantisation of a
materialised input (0.156 ms at 36,864 x 4,096, 2.9 TB/s); behind the gated GELU's backward,
1.14x slower than the fused form (the producer itself dominates). So it is opt-in.

Same numbers as ``torch_fp8.quantize_rows``: scale = amax / 448 (1 for a row of zeros), values
divided by it in float32, clamped to +-448, rounded to nearest by the cast. Imported only where
Triton is installed (CUDA machines, or CPU tests under TRITON_INTERPRET=1).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from supergrep.backends.triton_launch import CachedKernel

FP8_MAX = tl.constexpr(448.0)  # a global inside @triton.jit must be a constexpr


@triton.jit
def quantize_rows_kernel(x_ptr, q_ptr, s_ptr, n_rows, n_cols, stride_x, stride_q,
                         BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, OUT_FP32: tl.constexpr):
    """BLOCK_M rows per program, each whole in registers (BLOCK_D >= n_cols). OUT_FP32 stores the
    scaled, clamped values before the cast (tests: Triton's CPU interpreter rounds float8
    differently from the GPU's conversion, which is the one that matters)."""
    rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    inside = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=inside, other=0.0).to(tl.float32)
    amax = tl.max(tl.abs(x), axis=1)
    scale = tl.where(amax > 0, amax / FP8_MAX, 1.0)
    q = tl.minimum(tl.maximum(x / scale[:, None], -FP8_MAX), FP8_MAX)
    if OUT_FP32:
        tl.store(q_ptr + rows[:, None] * stride_q + cols[None, :], q, mask=inside)
    else:
        tl.store(q_ptr + rows[:, None] * stride_q + cols[None, :], q.to(tl.float8e4nv), mask=inside)
    tl.store(s_ptr + rows, scale, mask=rows < n_rows)


_KERNEL = CachedKernel(quantize_rows_kernel)  # launched without Triton's binder (triton_launch.py)


def launch_config(n_cols: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_D, num_warps): ~4,096 elements a program (16 a thread at 8 warps, so each
    thread loads 16-byte vectors of bf16), whole rows."""
    block_d = triton.next_power_of_2(n_cols)
    block_m = max(1, 4096 // block_d)
    return block_m, block_d, 8 if block_m * block_d >= 4096 else 4


def quantize_rows(x: torch.Tensor, out_fp32: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): q (rows, cols) row-major float8 e4m3 (float32 with ``out_fp32``), scale
    (rows, 1) float32. ``x`` 2-D, unit stride along its rows (any row stride: a view of a wider
    GEMM output needs no copy)."""
    assert x.dim() == 2
    if x.stride(1) != 1:
        x = x.contiguous()
    n_rows, n_cols = x.shape
    q = torch.empty((n_rows, n_cols), device=x.device, dtype=torch.float32 if out_fp32 else torch.float8_e4m3fn)
    scale = torch.empty((n_rows, 1), device=x.device, dtype=torch.float32)
    if n_rows:
        block_m, block_d, warps = launch_config(n_cols)
        _KERNEL[(triton.cdiv(n_rows, block_m),)](
            x, q, scale, n_rows, n_cols, x.stride(0), q.stride(0),
            BLOCK_M=block_m, BLOCK_D=block_d, OUT_FP32=out_fp32, num_warps=warps)
    return q, scale
