"""T5 self-attention over documents laid end to end (``varlen``): one flat (N, ...) token layout,
no padding, document starts in ``cu``.

``t5_varlen_attention`` runs the Triton kernels of ``triton_t5_attention`` on CUDA (as two
``torch.library`` operators, so ``torch.compile`` keeps each as one opaque call, joined by an
autograd function) and the same attention written in torch elsewhere (CPU training and the tests).
"""

from __future__ import annotations

import os

import torch

from supergrep.backends.opdef import define_op

# Measured on an H100 at xtr-base's shape, batch 192 (benchmarks/varlen_attention.py,
# benchmarks/results/gpu-h100-2026-11-24-varlen/attn-dense): 64 x 32 tiles, 4 warps, 2 stages were
# the fastest forward + backward (1.47 ms a layer vs FlexAttention's 2.55); reading the bias as
# coalesced tiles of a dense (H, W, W) matrix halved the forward against gathering it per score
# from the (H, 2 dist + 1) table (0.30 vs 0.62 ms).
_BLOCKS = {"block_m": 64, "block_n": 32, "num_warps": 4, "num_stages": 2}
DENSE_BIAS = True


def kernel_options() -> dict:
    """The kernels' tile sizes: the defaults, or ``SUPERGREP_T5_ATTN=block_m,block_n,warps,stages``
    (for benchmarks/varlen_attention.py's sweep)."""
    env = os.environ.get("SUPERGREP_T5_ATTN")
    if not env:
        return dict(_BLOCKS)
    m, n, w, s = (int(x) for x in env.split(","))
    return {"block_m": m, "block_n": n, "num_warps": w, "num_stages": s}


# The backward kernels' own tiles, (block_m, block_n, num_warps, num_stages) each (None: _BLOCKS).
# An H200 sweep at one mixed-length batch-192 draw (benchmarks/varlen_attention.py --bwd-sweep,
# benchmarks/results/attn-bwd-tiles-2026-11-28/) found dK/dV (64, 64, 4, 3) + dQ (64, 32, 4, 3)
# 1.09x on the backward alone, but slower in the step on batch-192 bucketed batches with the
# float32 bias matrix (dK/dV 2.84 vs 2.59 ms). With training's bias matrix in float16 (#50) the
# pair measured 1.025x at batch 512, 1.013x at 384, 0.996x at 192 (`bench train`, H200, 3 rounds;
# docs/performance.md #51), so they are the default for T5 (a position bias); BERT-style encoders
# (no bias, unmeasured) keep the shared tiles. A GPU whose shared memory a setting here exceeds
# gets the shared tiles.
_BWD_BLOCKS: dict[str, tuple | None] = {"dkdv": (64, 64, 4, 3), "dq": (64, 32, 4, 3)}


def bwd_kernel_options() -> dict:
    """The backward kernels' tiles: ``_BWD_BLOCKS``, or ``SUPERGREP_T5_ATTN_BWD=m,n,w,s;m,n,w,s``
    (dK/dV; dQ) for the sweep."""
    env = os.environ.get("SUPERGREP_T5_ATTN_BWD")
    if not env:
        return dict(_BWD_BLOCKS)
    dkdv, dq = (tuple(int(x) for x in part.split(",")) for part in env.split(";"))
    return {"dkdv": dkdv, "dq": dq}


def use_dense_bias() -> bool:
    """Whether the kernels read a dense (H, W, W) bias matrix built once per step (BIAS 2) instead
    of gathering from the small table per score (``SUPERGREP_T5_BIAS=dense|table`` overrides)."""
    env = os.environ.get("SUPERGREP_T5_BIAS")
    return DENSE_BIAS if not env else env == "dense"


def padded_index(cu: torch.Tensor, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(index (n_docs, max_len) into the flat tokens, valid mask): document i's position j is flat
    token cu[i] + j; positions past its length point at token 0 and are masked."""
    starts, lengths = cu[:-1].long(), (cu[1:] - cu[:-1]).long()
    pos = torch.arange(max_len, device=cu.device)
    valid = pos[None, :] < lengths[:, None]
    return torch.where(valid, starts[:, None] + pos[None, :], 0), valid


def reference_attention(qkv: torch.Tensor, cu: torch.Tensor, max_len: int, table: torch.Tensor | None, dist: int,
                        heads: int, scale: float = 1.0) -> torch.Tensor:
    """The attention in torch (differentiable), computed in float32: documents gathered into a
    padded (n_docs, heads, max_len, head_dim) layout, scores materialised, scattered back.
    ``table`` None (or empty): no position bias (BERT-style encoders)."""
    n, width = qkv.shape
    d = width // (3 * heads)
    idx, valid = padded_index(cu, max_len)
    q, k, v = qkv.float()[idx].view(idx.shape[0], max_len, 3, heads, d).permute(2, 0, 3, 1, 4)
    pos = torch.arange(max_len, device=qkv.device)
    scores = (q @ k.transpose(-1, -2)) * scale
    if table is not None and table.numel():
        if table.dim() == 3:  # a dense (H, W, W) matrix (triton_t5_attention.dense_bias)
            bias = table.float()[:, :max_len, :max_len]
        else:
            bias = table.float()[:, (pos[None, :] - pos[:, None]).clamp(-dist, dist) + dist]  # (H, T, T)
        scores = scores + bias[None]
    probs = scores.masked_fill(~valid[:, None, None, :], float("-inf")).softmax(-1)
    o = (probs @ v).permute(0, 2, 1, 3).reshape(idx.shape[0], max_len, heads * d)
    return o[valid].to(qkv.dtype)  # documents are contiguous and in order, so valid rows are the flat tokens


def _attn_impl(qkv, cu, table, max_len, dist, heads, scale):
    from supergrep.backends import triton_t5_attention as k

    return k.forward(qkv, cu, max_len, table, dist, heads, scale, **kernel_options())


def _attn_fake(qkv, cu, table, max_len, dist, heads, scale):
    n, width = qkv.shape
    return qkv.new_empty((n, width // 3)), qkv.new_empty((heads, n), dtype=torch.float32)


def _attn_bwd_impl(do, qkv, o, lse, cu, table, max_len, dist, heads, scale):
    from supergrep.backends import triton_t5_attention as k

    biased = table is not None and table.numel() > 0  # the own tiles were measured with T5's bias only
    tiles = bwd_kernel_options() if biased or os.environ.get("SUPERGREP_T5_ATTN_BWD") else {}
    return k.backward(do, qkv, o, lse, cu, max_len, table, dist, heads, scale, **kernel_options(), **tiles)


def _attn_bwd_fake(do, qkv, o, lse, cu, table, max_len, dist, heads, scale):
    return qkv.new_empty(qkv.shape)  # contiguous, as the kernels write it (qkv may be a strided view)


# Bare operators (opdef.py: no custom_op wrappers), so a compiled graph calls the kernels' Python
# directly; the autograd is _VarlenAttention's.
_attn = define_op("supergrep::t5_varlen_attn", "(Tensor qkv, Tensor cu, Tensor table, SymInt max_len, SymInt dist, "
                  "SymInt heads, float scale) -> (Tensor, Tensor)", _attn_impl, _attn_fake)
_attn_bwd = define_op("supergrep::t5_varlen_attn_bwd", "(Tensor do, Tensor qkv, Tensor o, Tensor lse, Tensor cu, "
                      "Tensor table, SymInt max_len, SymInt dist, SymInt heads, float scale) -> Tensor",
                      _attn_bwd_impl, _attn_bwd_fake)


class _VarlenAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv, cu, table, max_len, dist, heads, scale):
        o, lse = _attn(qkv, cu, table, max_len, dist, heads, scale)
        ctx.save_for_backward(qkv, o, lse, cu, table)
        ctx.args = (max_len, dist, heads, scale)
        return o

    @staticmethod
    def backward(ctx, do):
        qkv, o, lse, cu, table = ctx.saved_tensors
        return _attn_bwd(do, qkv, o, lse, cu, table, *ctx.args), None, None, None, None, None, None


def t5_varlen_attention(qkv: torch.Tensor, cu: torch.Tensor, max_len: int, table: torch.Tensor | None, dist: int,
                        heads: int, scale: float = 1.0) -> torch.Tensor:
    """Attention output (N, heads * head_dim) of the flat ``qkv`` (N, 3 * heads * head_dim).

    Args:
        cu: (n_docs + 1,) int32 start offsets of the documents in the flat layout (cu[-1] = N).
        max_len: the longest document (sizes the kernels' grid; a host integer, no sync).
        table: (heads, 2 * dist + 1) float32 position bias by clamped relative position, or the
            dense (heads, W, W) matrix of it with W >= max_len (frozen: no gradient flows into it);
            float16 is kept as it is (encoding builds its dense matrix so: half the bytes each tile
            reads), other dtypes become float32; None: no bias (BERT-style encoders, whose
            positions are in the embeddings).
        scale: on the scores (T5: 1.0; BERT: 1 / sqrt(head_dim)).
    """
    if table is None:
        table = qkv.new_empty(0, dtype=torch.float32)  # the kernels' BIAS 0
    if qkv.is_cuda or os.environ.get("TRITON_INTERPRET") == "1":  # the kernels (on a CPU: Triton's interpreter)
        bias = table.detach()
        if bias.dtype not in (torch.float32, torch.float16):  # a float16 matrix stays one (it was cast
            bias = bias.float()  # back to float32 here, every layer, from the tenth session to the twenty-seventh)
        return _VarlenAttention.apply(qkv, cu, bias.contiguous(), max_len, int(dist), int(heads), float(scale))
    return reference_attention(qkv, cu, max_len, table.detach(), dist, heads, scale)
