"""Triton kernels: T5 self-attention over variable-length documents laid end to end (no padding),
with T5's relative position bias added inside the kernel. Forward and backward, FlashAttention-2
style (online softmax; the backward recomputes the probabilities from the saved log-sum-exp).

Why our own kernel: FlashAttention takes no additive bias, SDPA's fused kernels need the bias
materialised per (row, head, T, T), and FlexAttention over packed 512-token rows computed whole
128 x 128 blocks across document borders: at ~159-token documents it spent 36% of the step's GPU
time for a few percent of its FLOPs (docs/performance.md, "Batch 192 and 384"). Here every
program works inside one document, so the only waste is each document's last partial block.

Layout: ``qkv`` is (N, 3 * H * D), token t holding its q, k, v heads back to back (what one GEMM
against the stacked q/k/v weights writes); ``cu`` (n_docs + 1,) int32 are the documents' start
offsets. The bias of query position i and key position j of one document is
``table[h, clamp(j - i, -dist, dist) + dist]``: T5's buckets are constant past ``max_distance``,
so a (H, 2 * dist + 1) table indexed by clamped relative position holds all of them.

Imported only where Triton is installed (CUDA machines, or CPU tests under TRITON_INTERPRET=1);
``t5_attention.py`` falls back to the same attention written in torch elsewhere.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from supergrep.backends.triton_launch import CachedKernel

LOG2E = tl.constexpr(1.4426950408889634)  # a global inside @triton.jit must be a constexpr


@triton.jit
def _bias(table_ptr, h, rows, cols, dist, table_w, BIAS: tl.constexpr):
    """The (rows, cols) tile of head h's position bias. BIAS 1: gathered from the (H, 2 dist + 1)
    table by clamped relative position; 2: a tile of a dense (H, W, W) matrix (W = table_w),
    coalesced; 0: none (for timing the bias' cost only)."""
    if BIAS == 1:
        rel = cols[None, :] - rows[:, None]
        rel = tl.minimum(tl.maximum(rel, -dist), dist) + dist
        return tl.load(table_ptr + h * table_w + rel)
    elif BIAS == 2:
        inside = (rows < table_w)[:, None] & (cols < table_w)[None, :]
        return tl.load(table_ptr + (h * table_w + rows[:, None]) * table_w + cols[None, :], mask=inside, other=0.0)
    else:
        return tl.zeros([rows.shape[0], cols.shape[0]], tl.float32)


@triton.jit
def t5_attn_fwd_kernel(QKV, Out, LSE, CU, TABLE, stride_tok, stride_otok, n_heads, dist, table_w, sm_scale, n_tokens,
                HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                IEEE: tl.constexpr, BIAS: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    doc = pid_bh // n_heads
    h = pid_bh % n_heads
    start = tl.load(CU + doc)
    seq = tl.load(CU + doc + 1) - start
    m0 = pid_m * BLOCK_M
    if m0 < seq:
        hd = n_heads * HEAD_DIM
        rows = m0 + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        mask_m = rows < seq
        mask_d = offs_d < HEAD_DIM
        tok_m = (start + rows).to(tl.int64)
        q = tl.load(QKV + tok_m[:, None] * stride_tok + h * HEAD_DIM + offs_d[None, :],
                    mask=mask_m[:, None] & mask_d[None, :], other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        for n0 in range(0, seq, BLOCK_N):
            cols = n0 + offs_n
            mask_n = cols < seq
            tok_n = (start + cols).to(tl.int64)
            kv_mask = mask_n[:, None] & mask_d[None, :]
            k = tl.load(QKV + tok_n[:, None] * stride_tok + hd + h * HEAD_DIM + offs_d[None, :], mask=kv_mask, other=0.0)
            if IEEE:
                s = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                s = tl.dot(q, tl.trans(k))
            s = (s * sm_scale + _bias(TABLE, h, rows, cols, dist, table_w, BIAS)) * LOG2E  # log2 domain
            s = tl.where(mask_n[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(QKV + tok_n[:, None] * stride_tok + 2 * hd + h * HEAD_DIM + offs_d[None, :], mask=kv_mask,
                        other=0.0)
            if IEEE:
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            m_i = m_new
        acc = acc / l_i[:, None]
        tl.store(Out + tok_m[:, None] * stride_otok + h * HEAD_DIM + offs_d[None, :], acc.to(Out.dtype.element_ty),
                 mask=mask_m[:, None] & mask_d[None, :])
        tl.store(LSE + h * n_tokens + tok_m, m_i + tl.math.log2(l_i), mask=mask_m)


@triton.jit
def t5_attn_bwd_dkdv_kernel(QKV, DO, LSE, DELTA, DQKV, CU, TABLE, stride_tok, stride_dotok, stride_dqtok, n_heads, dist,
                     table_w,
                     sm_scale, n_tokens, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, IEEE: tl.constexpr, BIAS: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    doc = pid_bh // n_heads
    h = pid_bh % n_heads
    start = tl.load(CU + doc)
    seq = tl.load(CU + doc + 1) - start
    n0 = pid_n * BLOCK_N
    if n0 < seq:
        hd = n_heads * HEAD_DIM
        cols = n0 + tl.arange(0, BLOCK_N)
        offs_m = tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        mask_n = cols < seq
        mask_d = offs_d < HEAD_DIM
        tok_n = (start + cols).to(tl.int64)
        kv_mask = mask_n[:, None] & mask_d[None, :]
        k = tl.load(QKV + tok_n[:, None] * stride_tok + hd + h * HEAD_DIM + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(QKV + tok_n[:, None] * stride_tok + 2 * hd + h * HEAD_DIM + offs_d[None, :], mask=kv_mask,
                    other=0.0)
        dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        for m0 in range(0, seq, BLOCK_M):
            rows = m0 + offs_m
            mask_m = rows < seq
            tok_m = (start + rows).to(tl.int64)
            q_mask = mask_m[:, None] & mask_d[None, :]
            q = tl.load(QKV + tok_m[:, None] * stride_tok + h * HEAD_DIM + offs_d[None, :], mask=q_mask, other=0.0)
            do = tl.load(DO + tok_m[:, None] * stride_dotok + h * HEAD_DIM + offs_d[None, :], mask=q_mask, other=0.0)
            lse = tl.load(LSE + h * n_tokens + tok_m, mask=mask_m, other=0.0)
            delta = tl.load(DELTA + h * n_tokens + tok_m, mask=mask_m, other=0.0)
            if IEEE:
                s = tl.dot(q, tl.trans(k), input_precision="ieee")
            else:
                s = tl.dot(q, tl.trans(k))
            s = (s * sm_scale + _bias(TABLE, h, rows, cols, dist, table_w, BIAS)) * LOG2E
            p = tl.math.exp2(s - lse[:, None])
            p = tl.where(mask_m[:, None] & mask_n[None, :], p, 0.0)
            if IEEE:
                dv += tl.dot(tl.trans(p), do.to(tl.float32), input_precision="ieee")
                dp = tl.dot(do, tl.trans(v), input_precision="ieee")
            else:
                dv = tl.dot(tl.trans(p.to(do.dtype)), do, dv)
                dp = tl.dot(do, tl.trans(v))
            ds = p * (dp - delta[:, None])
            if IEEE:
                dk += tl.dot(tl.trans(ds), q.to(tl.float32), input_precision="ieee")
            else:
                dk = tl.dot(tl.trans(ds.to(q.dtype)), q, dk)
        dk = dk * sm_scale
        out = DQKV + tok_n[:, None] * stride_dqtok + h * HEAD_DIM + offs_d[None, :]
        tl.store(out + hd, dk.to(DQKV.dtype.element_ty), mask=kv_mask)
        tl.store(out + 2 * hd, dv.to(DQKV.dtype.element_ty), mask=kv_mask)


@triton.jit
def t5_attn_bwd_dq_kernel(QKV, DO, LSE, DELTA, DQKV, CU, TABLE, stride_tok, stride_dotok, stride_dqtok, n_heads, dist,
                     table_w,
                   sm_scale, n_tokens, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, IEEE: tl.constexpr, BIAS: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    doc = pid_bh // n_heads
    h = pid_bh % n_heads
    start = tl.load(CU + doc)
    seq = tl.load(CU + doc + 1) - start
    m0 = pid_m * BLOCK_M
    if m0 < seq:
        hd = n_heads * HEAD_DIM
        rows = m0 + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        mask_m = rows < seq
        mask_d = offs_d < HEAD_DIM
        tok_m = (start + rows).to(tl.int64)
        q_mask = mask_m[:, None] & mask_d[None, :]
        q = tl.load(QKV + tok_m[:, None] * stride_tok + h * HEAD_DIM + offs_d[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO + tok_m[:, None] * stride_dotok + h * HEAD_DIM + offs_d[None, :], mask=q_mask, other=0.0)
        lse = tl.load(LSE + h * n_tokens + tok_m, mask=mask_m, other=0.0)
        delta = tl.load(DELTA + h * n_tokens + tok_m, mask=mask_m, other=0.0)
        dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
        for n0 in range(0, seq, BLOCK_N):
            cols = n0 + offs_n
            mask_n = cols < seq
            tok_n = (start + cols).to(tl.int64)
            kv_mask = mask_n[:, None] & mask_d[None, :]
            k = tl.load(QKV + tok_n[:, None] * stride_tok + hd + h * HEAD_DIM + offs_d[None, :], mask=kv_mask,
                        other=0.0)
            v = tl.load(QKV + tok_n[:, None] * stride_tok + 2 * hd + h * HEAD_DIM + offs_d[None, :], mask=kv_mask,
                        other=0.0)
            if IEEE:
                s = tl.dot(q, tl.trans(k), input_precision="ieee")
                dp = tl.dot(do, tl.trans(v), input_precision="ieee")
            else:
                s = tl.dot(q, tl.trans(k))
                dp = tl.dot(do, tl.trans(v))
            s = (s * sm_scale + _bias(TABLE, h, rows, cols, dist, table_w, BIAS)) * LOG2E
            p = tl.math.exp2(s - lse[:, None])
            p = tl.where(mask_m[:, None] & mask_n[None, :], p, 0.0)
            ds = p * (dp - delta[:, None])
            if IEEE:
                dq += tl.dot(ds, k.to(tl.float32), input_precision="ieee")
            else:
                dq = tl.dot(ds.to(k.dtype), k, dq)
        dq = dq * sm_scale
        tl.store(DQKV + tok_m[:, None] * stride_dqtok + h * HEAD_DIM + offs_d[None, :], dq.to(DQKV.dtype.element_ty),
                 mask=q_mask)


@triton.jit
def t5_attn_bwd_delta_kernel(Out, DO, DELTA, stride_otok, stride_dotok, n_tokens, n_heads,
                             HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr):
    """delta[h, t] = sum_d o[t, h, d] * do[t, h, d] (float32): the backward's softmax term, one
    pass over o and dO (in torch it took two casts, a product and a reduction)."""
    pid_t = tl.program_id(0)
    h = tl.program_id(1)
    toks = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_d = tl.arange(0, BLOCK_D)
    mask = (toks < n_tokens)[:, None] & (offs_d < HEAD_DIM)[None, :]
    t64 = toks.to(tl.int64)
    o = tl.load(Out + t64[:, None] * stride_otok + h * HEAD_DIM + offs_d[None, :], mask=mask, other=0.0)
    do = tl.load(DO + t64[:, None] * stride_dotok + h * HEAD_DIM + offs_d[None, :], mask=mask, other=0.0)
    tl.store(DELTA + h * n_tokens + t64, tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1), mask=toks < n_tokens)


# launched without Triton's per-call binder (triton_launch.py)
_FWD, _DKDV, _DQ, _DELTA = (CachedKernel(k) for k in (t5_attn_fwd_kernel, t5_attn_bwd_dkdv_kernel, t5_attn_bwd_dq_kernel,
                                                      t5_attn_bwd_delta_kernel))


def _block_d(head_dim: int) -> int:
    return max(16, triton.next_power_of_2(head_dim))


def _bias_mode(table, bias: int | None) -> int:
    """2 for a dense (H, W, W) bias matrix, 1 for the (H, 2 dist + 1) table, 0 for an empty table
    (no bias: BERT-style encoders); ``bias`` overrides (0 times a T5 layer without its bias)."""
    if bias is not None:
        return bias
    if table.numel() == 0:
        return 0
    return 2 if table.dim() == 3 else 1


def forward(qkv, cu, max_len: int, table, dist: int, heads: int, scale: float, block_m: int = 64, block_n: int = 64,
            num_warps: int = 4, num_stages: int = 2, bias: int | None = None):
    """(o (N, H * D) in qkv's dtype, lse (H, N) float32, log2 domain). ``table``: (H, 2 dist + 1),
    or a dense (H, W, W) matrix with W >= max_len (``dense_bias``)."""
    import torch

    if qkv.stride(1) != 1:  # the kernels step through a token's features one by one
        qkv = qkv.contiguous()
    n, width = qkv.shape
    head_dim = width // (3 * heads)
    o = torch.empty((n, heads * head_dim), dtype=qkv.dtype, device=qkv.device)
    lse = torch.empty((heads, n), dtype=torch.float32, device=qkv.device)
    n_docs = cu.shape[0] - 1
    grid = (triton.cdiv(max_len, block_m), n_docs * heads)
    mode = _bias_mode(table, bias)
    table_arg = table if table.numel() else cu  # BIAS 0 never reads it; an empty tensor has no valid pointer
    _FWD[grid](qkv, o, lse, cu, table_arg, qkv.stride(0), o.stride(0), heads, dist, table.shape[-1],
               scale, n, HEAD_DIM=head_dim, BLOCK_D=_block_d(head_dim), BLOCK_M=block_m, BLOCK_N=block_n,
               IEEE=qkv.dtype == torch.float32, BIAS=mode, num_warps=num_warps, num_stages=num_stages)
    return o, lse


def backward(do, qkv, o, lse, cu, max_len: int, table, dist: int, heads: int, scale: float, block_m: int = 64,
             block_n: int = 64, num_warps: int = 4, num_stages: int = 2, bias: int | None = None,
             dkdv: tuple | None = None, dq: tuple | None = None):
    """d(qkv) (N, 3 * H * D) in qkv's dtype. ``dkdv`` / ``dq``: (block_m, block_n, num_warps,
    num_stages) for that kernel alone, instead of the shared tiles."""
    import torch

    if qkv.stride(1) != 1:
        qkv = qkv.contiguous()
    n, width = qkv.shape
    head_dim = width // (3 * heads)
    if do.stride(1) != 1:  # any row stride is fine (dO often is a view of a wider GEMM output)
        do = do.contiguous()
    delta = torch.empty((heads, n), dtype=torch.float32, device=qkv.device)
    _DELTA[(triton.cdiv(n, 64), heads)](o, do, delta, o.stride(0), do.stride(0), n, heads,
                                        HEAD_DIM=head_dim, BLOCK_D=_block_d(head_dim), BLOCK_T=64)
    # its own (contiguous) layout: qkv may be a strided view of a wider GEMM output
    dqkv = torch.empty(qkv.shape, dtype=qkv.dtype, device=qkv.device)
    n_docs = cu.shape[0] - 1
    args = (qkv, do, lse, delta, dqkv, cu, table if table.numel() else cu, qkv.stride(0), do.stride(0),
            dqkv.stride(0), heads, dist, table.shape[-1], scale, n)
    shared = (block_m, block_n, num_warps, num_stages)
    for kernel, tiles, along_n in ((_DKDV, dkdv or shared, True), (_DQ, dq or shared, False)):
        if (id(kernel), tiles) in _TOO_BIG:
            tiles = shared
        while True:
            bm, bn, warps, stages = tiles
            # dK/dV programs own key blocks (BLOCK_N), dQ programs query blocks (BLOCK_M)
            grid = (triton.cdiv(max_len, bn if along_n else bm), n_docs * heads)
            try:
                kernel[grid](*args, HEAD_DIM=head_dim, BLOCK_D=_block_d(head_dim), BLOCK_M=bm, BLOCK_N=bn,
                             IEEE=qkv.dtype == torch.float32, BIAS=_bias_mode(table, bias), num_warps=warps,
                             num_stages=stages)
                break
            except OutOfResources:  # tiles tuned on an H200 can exceed a smaller GPU's shared memory
                if tiles == shared:
                    raise
                _TOO_BIG.add((id(kernel), tiles))
                tiles = shared
    return dqkv


_TOO_BIG: set = set()  # (kernel, tiles) that did not fit this GPU: the shared tiles instead


def dense_bias(table, dist: int, width: int):
    """(H, width, width) float32: position i's bias towards j, ``table[:, clamp(j - i) + dist]``,
    for the kernels' coalesced BIAS 2 path (built once per step, shared by every layer)."""
    import torch

    pos = torch.arange(width, device=table.device)
    return table.float()[:, (pos[None, :] - pos[:, None]).clamp(-dist, dist) + dist].contiguous()
