"""Triton kernels: the training loss's MaxSim over every (query, document) pair of a batch, without
the (n_q, q_len, n_d, d_len) similarity tensor (``torch_maxsim``: by default on CUDA for large
batches).

The loss's ``maxsim_scores`` einsums queries against chunks of 64 documents, masks, takes the max
over document tokens and sums over query tokens. Compiled, that is a tf32 batched GEMM plus
reductions over a temporary that grows with n_q x n_d x d_len: ~1.7 ms of a ~42 ms step at batch
192 on an H200 (twenty-fifth session's trace), and 4x that at batch 384, 3x again for batches
whose widest document is 512 tokens (random rather than length-bucketed batches). Here:

- forward: one program per (block of queries, block of 1 or 4 documents, ``_fwd_docs``) holds the
  queries' tokens, streams each document's tokens in tiles of BK up to its last real token, and keeps each query token's running
  max and its argmax; it writes the (query, document) score and the argmax (int32, n_q x n_d x
  q_len: 4.7 MB at batch 192), nothing of size d_len.
- backward, from the argmax, one program per query and block of documents: dq[i, t] = inv[i]
  sum_j g[i, j] d[j, arg[i, j, t]] (a gather) and dd[j, k] = sum over (i, t) with arg[i, j, t] =
  k of inv[i] g[i, j] q[i, t] (each query token's vector added to the document token it chose, a
  scatter), both added atomically.

Semantics are ``maxsim_scores``'s (losses/maxsim.py): masked document tokens never win (a document
with none gives each query token -1e4, and no gradient), masked query tokens count 0 and the sum
is divided by the query's real tokens. Products in tf32 (exact for bf16/fp16 inputs; for float32
inputs only when torch allows it, ``torch.backends.cuda.matmul.allow_tf32``, as for the einsum it
replaces), accumulated in float32.
Imported only where Triton is installed; tests run it in Triton's CPU interpreter.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from supergrep.backends.triton_launch import CachedKernel


@triton.jit
def maxsim_fwd_kernel(q_ptr, qm_ptr, d_ptr, dm_ptr, dend_ptr, inv_ptr, s_ptr, a_ptr, n_q, n_d, q_len, dim,
                      sq0, sq1, sqm0, sqm1, sd0, sd1, sdm0, sdm1,
                      QB: tl.constexpr, LQ: tl.constexpr, BK: tl.constexpr, BD: tl.constexpr, JD: tl.constexpr,
                      PREC: tl.constexpr, STORE_ARG: tl.constexpr):
    """Program (block of QB queries, block of JD documents): the queries' tokens loaded once, each
    document's tokens streamed in tiles of BK up to its last real token."""
    pq = tl.program_id(0)
    j0 = tl.program_id(1) * JD
    zero = pq.to(tl.int64) * 0  # for int64 offsets from the loop's index
    r = tl.arange(0, QB * LQ)
    qi = (pq * QB + r // LQ).to(tl.int64)
    t = r % LQ
    valid = (qi < n_q) & (t < q_len)
    cols = tl.arange(0, BD)
    cin = cols < dim
    # float32 in registers (tf32 products hold bf16/fp16 values exactly; Triton's interpreter has no bf16 dot)
    qv = tl.load(q_ptr + qi[:, None] * sq0 + t[:, None] * sq1 + cols[None, :], mask=valid[:, None] & cin[None, :],
                 other=0.0).to(tl.float32)
    qmv = (tl.load(qm_ptr + qi * sqm0 + t * sqm1, mask=valid, other=0) != 0) & valid
    # -1e4 below: losses/maxsim.NEG, a masked similarity (a literal: Triton's interpreter rejects
    # a constexpr global times a tensor)
    rows = pq * QB + tl.arange(0, QB)
    rin = rows < n_q
    inv = tl.load(inv_ptr + rows, mask=rin, other=0.0)
    for jd in range(j0, tl.minimum(j0 + JD, n_d)):
        j = zero + jd
        end = tl.load(dend_ptr + j)
        best = tl.full((QB * LQ,), -1e4, tl.float32)
        arg = tl.full((QB * LQ,), -1, tl.int32)
        for k0 in range(0, end, BK):
            ks = k0 + tl.arange(0, BK)
            kin = ks < end
            dv = tl.load(d_ptr + j * sd0 + ks[:, None] * sd1 + cols[None, :],
                         mask=kin[:, None] & cin[None, :], other=0.0).to(tl.float32)
            dmv = (tl.load(dm_ptr + j * sdm0 + ks * sdm1, mask=kin, other=0) != 0) & kin
            s = tl.dot(qv, tl.trans(dv), input_precision=PREC)
            s = tl.where(dmv[None, :], s, -1e4)
            m = tl.max(s, axis=1)
            a = tl.argmax(s, axis=1).to(tl.int32) + k0
            upd = m > best  # strict: a masked tile (all -1e4) never replaces; ties keep the first token
            best = tl.where(upd, m, best)
            arg = tl.where(upd, a, arg)
        per_q = tl.sum(tl.reshape(tl.where(qmv, best, 0.0), (QB, LQ)), axis=1)
        tl.store(s_ptr + rows.to(tl.int64) * n_d + j, per_q * inv, mask=rin)
        if STORE_ARG:
            tl.store(a_ptr + (qi * n_d + j) * q_len + t, arg, mask=valid)


@triton.jit
def maxsim_bwd_kernel(g_ptr, q_ptr, qm_ptr, d_ptr, a_ptr, inv_ptr, dq_ptr, dd_ptr, n_q, n_d, q_len, dim, d_len,
                      sg0, sq0, sq1, sqm0, sqm1, sd0, sd1, JB: tl.constexpr, LQ: tl.constexpr, BD: tl.constexpr):
    """Program (query, block of JB documents), from each query token's argmax: dq gathers the
    chosen document tokens, dd scatters the query's token vectors to them (atomic adds, as dq's
    partial sums over document blocks are): n_q x n_d x q_len row reads and adds, whatever the
    documents' widths. Against a dense dd (per tile of BK document tokens, the one-hot matrix of
    the argmaxes times the query tokens, a tf32 product; split over query blocks or not), on an
    H200, the loss's forward + backward: 1.68 vs 2.32-2.45 ms at batch 192 x width 176, 2.89 vs
    8.97-11.49 ms at 384 x 512 (dq and dd then separate kernels; benchmarks/maxsim_check.py,
    ``benchmarks/results/fused-maxsim-2026-11-29``)."""
    i = tl.program_id(0).to(tl.int64)
    j0 = tl.program_id(1) * JB
    t = tl.arange(0, LQ)
    tin = t < q_len
    cols = tl.arange(0, BD)
    cin = cols < dim
    qmv = (tl.load(qm_ptr + i * sqm0 + t * sqm1, mask=tin, other=0) != 0) & tin
    inv = tl.load(inv_ptr + i)
    qv = tl.load(q_ptr + i * sq0 + t[:, None] * sq1 + cols[None, :], mask=qmv[:, None] & cin[None, :],
                 other=0.0).to(tl.float32) * inv
    acc = tl.zeros((LQ, BD), tl.float32)
    for j in range(j0, tl.minimum(j0 + JB, n_d)):
        g = tl.load(g_ptr + i * sg0 + j)
        a = tl.load(a_ptr + (i * n_d + j) * q_len + t, mask=tin, other=-1).to(tl.int64)
        ok = (qmv & (a >= 0))[:, None] & cin[None, :]
        jj = i * 0 + j  # int64 offsets
        dv = tl.load(d_ptr + jj * sd0 + a[:, None] * sd1 + cols[None, :], mask=ok, other=0.0)
        acc += (g * inv) * dv.to(tl.float32)
        tl.atomic_add(dd_ptr + (jj * d_len + a[:, None]) * dim + cols[None, :], g * qv, mask=ok, sem="relaxed")
    tl.atomic_add(dq_ptr + (i * q_len + t[:, None]) * dim + cols[None, :], acc, mask=tin[:, None] & cin[None, :])


_FWD, _BWD = map(CachedKernel, (maxsim_fwd_kernel, maxsim_bwd_kernel))  # triton_launch.py
FWD_ROWS = 0  # query-token rows a forward program holds; 0: by the batch (benchmarks/maxsim_check.py sweeps it)
FWD_DOCS = 0  # documents a forward program scores (its queries loaded once); 0: by the work (_fwd_docs)


def _fwd_rows(n_q: int, n_d: int) -> int:
    """128 rows a program from n_q x n_d = 2^17 pairs, else 64: fewer reloads of each document
    against more programs (H200: 64 faster at 192 x 192, 1.68 vs 1.83 ms; 128 at 384 x 384,
    2.45-2.89 vs 3.28-3.92 ms)."""
    return FWD_ROWS or (128 if n_q * n_d >= 1 << 17 else 64)


def _fwd_docs(n_q: int, n_d: int, d_len: int) -> int:
    """4 documents a program from n_q x n_d x d_len = 12M (the trainer's threshold for the kernels),
    else 1 (H200, benchmarks/maxsim_check.py, the loss forward + backward: 4 documents 2.13 vs 2.43
    ms at 384 x 384 x 176, 2.59 vs 2.88 at 384 x 384 x 512, 1.44 vs 1.76 at 192 x 192 x 512;
    1 document 1.89 vs 2.08 at 192 x 192 x 176)."""
    return FWD_DOCS or (4 if n_q * n_d * d_len >= 12_000_000 else 1)


def _blocks(q_len: int, dim: int, rows: int = 64) -> tuple[int, int, int, int]:
    """(QB, LQ, BK, BD): ``rows`` query-token rows a program (whole queries), 64 document tokens a tile."""
    lq = max(16, triton.next_power_of_2(q_len))
    qb = max(1, rows // lq)
    return qb, lq, 64, max(16, triton.next_power_of_2(dim))


def _precision(dtype: torch.dtype) -> str:
    """The products' precision: tf32 for float32 inputs where torch's own products use it (the
    einsum this replaces); for bf16/fp16 inputs (exact in tf32) always."""
    return "ieee" if dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32 else "tf32"


def _u8(mask: torch.Tensor) -> torch.Tensor:
    return mask.view(torch.uint8) if mask.dtype == torch.bool else mask


def _unit_rows(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def forward(q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor, need_arg: bool = True
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(scores (n_q, n_d) float32, argmax (n_q, n_d, q_len) int32 (-1: no real document token;
    empty unless ``need_arg``: scoring without gradients, e.g. a teacher's, keeps no argmax),
    inv (n_q,) float32 = 1 / the query's real tokens) for q (n_q, q_len, dim), d (n_d, d_len,
    dim) and their masks."""
    q, d = _unit_rows(q), _unit_rows(d)
    n_q, q_len, dim = q.shape
    n_d, d_len, _ = d.shape
    qm, dm = _u8(q_mask), _u8(d_mask)
    inv = 1.0 / q_mask.sum(1, dtype=torch.float32)
    pos = torch.arange(1, d_len + 1, device=d.device, dtype=torch.int32)  # one past each document's last real token
    dend = (pos[None, :] * (d_mask != 0)).amax(1).to(torch.int32) if d_len else torch.zeros(n_d, dtype=torch.int32,
                                                                                              device=d.device)
    scores = torch.empty((n_q, n_d), device=q.device, dtype=torch.float32)
    arg = torch.empty((n_q, n_d, q_len) if need_arg else (0,), device=q.device, dtype=torch.int32)
    if n_q and n_d:
        qb, lq, bk, bd = _blocks(q_len, dim, _fwd_rows(n_q, n_d))
        jd = _fwd_docs(n_q, n_d, d_len)
        _FWD[(triton.cdiv(n_q, qb), triton.cdiv(n_d, jd))](
            q, qm, d, dm, dend, inv, scores, arg, n_q, n_d, q_len, dim,
            q.stride(0), q.stride(1), qm.stride(0), qm.stride(1), d.stride(0), d.stride(1), dm.stride(0), dm.stride(1),
            QB=qb, LQ=lq, BK=bk, BD=bd, JD=jd, PREC=_precision(q.dtype), STORE_ARG=need_arg,
            num_warps=8 if qb * lq >= 128 else 4)
    return scores, arg, inv


def backward(g: torch.Tensor, q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, arg: torch.Tensor,
             inv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dq, dd) in q's and d's dtypes for the gradient ``g`` (n_q, n_d) of ``forward``'s scores."""
    q, d = _unit_rows(q), _unit_rows(d)
    g = g.float()
    g = g if g.stride(1) == 1 else g.contiguous()
    n_q, q_len, dim = q.shape
    n_d, d_len, _ = d.shape
    qm = _u8(q_mask)
    dq = torch.zeros((n_q, q_len, dim), device=q.device, dtype=torch.float32)
    dd = torch.zeros((n_d, d_len, dim), device=d.device, dtype=torch.float32)
    if n_q and n_d:
        qb, lq, bk, bd = _blocks(q_len, dim)
        jb = 32
        _BWD[(n_q, triton.cdiv(n_d, jb))](
            g, q, qm, d, arg, inv, dq, dd, n_q, n_d, q_len, dim, d_len, g.stride(0), q.stride(0), q.stride(1),
            qm.stride(0), qm.stride(1), d.stride(0), d.stride(1), JB=jb, LQ=lq, BD=bd, num_warps=4)
    return dq.to(q.dtype), dd.to(d.dtype)
