"""Triton kernel: T5's gated-GELU feed-forward input, ``gelu_tanh(x W0^T) * (x W1^T)``, as one
GEMM with two accumulators and the activation in its epilogue (index-time encoding).

Why: compiled, the encoder ran the stacked wi_0/wi_1 GEMM (cuBLAS) writing an (N, 2 d_ff) bf16
tensor, then one fused Inductor kernel read it back and wrote (N, d_ff): 6.3 of 55.7 GPU ms per
131K-token call of xtr-base, at the memory bandwidth already (docs/performance.md, "Index-time
encoding on the GPU"). Here each program loads an x tile once for both weight tiles and writes
only the product. gelu_tanh(a) = a * sigmoid(2 sqrt(2/pi) (a + 0.044715 a^3)), the identity
0.5 (1 + tanh z) = sigmoid(2 z), in float32 on the accumulators.

Imported only where Triton is installed (CUDA machines, or CPU tests under TRITON_INTERPRET=1).
"""

from __future__ import annotations

import triton
import triton.language as tl

TWO_SQRT_2_OVER_PI = tl.constexpr(1.5957691216057308)


@triton.jit
def gated_gelu_kernel(X, W0, W1, Out, M, N, K, stride_xm, stride_wn, stride_om,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                      IEEE: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # grouped launch order: GROUP_M row blocks share their weight tiles while they sit in L2
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % size_m
    pid_n = (pid % in_group) // size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    x_ptrs = X + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :]
    w0_ptrs = W0 + offs_n[None, :] * stride_wn + offs_k[:, None]  # (BLOCK_K, BLOCK_N) of W0^T
    w1_ptrs = W1 + offs_n[None, :] * stride_wn + offs_k[:, None]
    acc0 = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc1 = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    for k0 in range(0, K, BLOCK_K):
        mask_k = (k0 + offs_k) < K
        x = tl.load(x_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        w0 = tl.load(w0_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        w1 = tl.load(w1_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if IEEE:
            acc0 += tl.dot(x, w0, input_precision="ieee")
            acc1 += tl.dot(x, w1, input_precision="ieee")
        else:
            acc0 = tl.dot(x, w0, acc0)
            acc1 = tl.dot(x, w1, acc1)
        x_ptrs += BLOCK_K
        w0_ptrs += BLOCK_K
        w1_ptrs += BLOCK_K
    inner = TWO_SQRT_2_OVER_PI * (acc0 + 0.044715 * acc0 * acc0 * acc0)
    out = acc0 * tl.sigmoid(inner) * acc1
    o_ptrs = Out + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def gated_gelu(x, w0, w1, block_m: int = 128, block_n: int = 128, block_k: int = 64, num_warps: int = 8,
               num_stages: int = 3, group_m: int = 8):
    """(M, N) = gelu_tanh(x @ w0.T) * (x @ w1.T) for x (M, K), w0 and w1 (N, K), in x's dtype."""
    import torch

    x = x.contiguous()
    w0, w1 = w0.contiguous(), w1.contiguous()
    m, k = x.shape
    n = w0.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    gated_gelu_kernel[grid](x, w0, w1, out, m, n, k, x.stride(0), w0.stride(0), out.stride(0),
                            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
                            IEEE=x.dtype == torch.float32, num_warps=num_warps, num_stages=num_stages)
    return out
