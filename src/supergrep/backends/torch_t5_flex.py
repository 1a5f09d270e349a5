"""A T5 encoder forward over packed rows with FlexAttention (`attn_implementation: flex`).

Why: the GPU trace of the compiled xtr-base step (docs/performance.md, "Where the compiled step
goes") showed T5's attention running as the unfused math path - fp32 batched matmuls plus a
softmax that materialises every (row, head, T, T) score - because SDPA has no fused kernel
that takes T5's additive position bias under dynamic shapes: about half of the GPU's busy time.
FlexAttention compiles one fused kernel (forward and backward) whose ``score_mod`` adds the
relative position bias and whose block mask skips the blocks between different documents of a
packed row.

The layers are the HF ``T5EncoderModel``'s own modules (so LoRA-wrapped projections, layer norms,
the gated feed-forward and the dropouts are the ones the rest of the trainer sees); only the
self-attention's score computation is replaced. Differences from HF's forward, both deliberate:
no dropout on the attention probabilities (FlexAttention has none; the hidden-state dropouts
stay), and positions past ``max_distance`` share one bias (they do in T5's buckets too, so the
bias table is only ``2 * max_distance + 1`` wide).
"""

from __future__ import annotations

import math

import torch
from torch import nn


def relative_bucket(rel: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bidirectional relative-position bucket of ``rel`` = key position - query position
    (the same function as HF's ``T5Attention._relative_position_bucket``)."""
    half = num_buckets // 2
    out = (rel > 0).long() * half
    n = rel.abs()
    max_exact = half // 2
    large = max_exact + (torch.log(n.float().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
                         * (half - max_exact)).long()
    large = large.clamp(max=half - 1)
    return out + torch.where(n < max_exact, n, large)


def bias_table(encoder: nn.Module) -> tuple[torch.Tensor, int]:
    """(heads, 2 * max_distance + 1) position bias by clamped relative position, and max_distance."""
    attn = encoder.encoder.block[0].layer[0].SelfAttention
    cfg = encoder.config
    dist = int(cfg.relative_attention_max_distance)
    rel = torch.arange(-dist, dist + 1, device=attn.relative_attention_bias.weight.device)
    buckets = relative_bucket(rel, int(cfg.relative_attention_num_buckets), dist)
    return attn.relative_attention_bias(buckets).t().float(), dist


def segment_block_mask(seg: torch.Tensor):
    """FlexAttention block mask: a position attends to positions of its own document (``seg``,
    -1 = padding, which attends to padding)."""
    from torch.nn.attention.flex_attention import create_block_mask

    rows, width = seg.shape

    def same_doc(b, h, q, kv):
        return seg[b, q] == seg[b, kv]

    return create_block_mask(same_doc, B=rows, H=None, Q_LEN=width, KV_LEN=width, device=seg.device)


def _math_attention(q, k, v, seg: torch.Tensor, table: torch.Tensor, dist: int) -> torch.Tensor:
    """The same attention written out (scores materialised): FlexAttention has no backward on
    CPU, so CPU training and the tests take this path."""
    width = q.shape[2]
    pos = torch.arange(width, device=q.device)
    bias = table[:, (pos[None, :] - pos[:, None]).clamp(-dist, dist) + dist]  # (H, T, T)
    scores = q.float() @ k.float().transpose(-1, -2) + bias[None]
    same = seg[:, None, :, None] == seg[:, None, None, :]
    probs = scores.masked_fill(~same, float("-inf")).softmax(-1)
    return (probs @ v.float()).to(v.dtype)


def packed_forward(encoder: nn.Module, ids: torch.Tensor, seg: torch.Tensor, block_mask=None) -> torch.Tensor:
    """Last hidden states (rows, T, d_model) of HF T5EncoderModel ``encoder`` over packed rows
    (``seg``: each position's document, -1 padding). With ``block_mask`` (``segment_block_mask``
    of ``seg``) the attention is FlexAttention, else the materialised math (CPU)."""
    from torch.nn.attention.flex_attention import flex_attention

    stack = encoder.encoder
    table, dist = bias_table(encoder)

    def add_bias(score, b, h, q, kv):
        return score + table[h, (kv - q).clamp(-dist, dist) + dist]

    rows, width = ids.shape
    h = stack.dropout(stack.embed_tokens(ids))
    for block in stack.block:
        sa_layer, ff_layer = block.layer[0], block.layer[-1]
        sa = sa_layer.SelfAttention
        heads, dk = sa.n_heads, sa.key_value_proj_dim
        x = sa_layer.layer_norm(h)

        q, k, v = (p(x).view(rows, width, heads, dk).transpose(1, 2) for p in (sa.q, sa.k, sa.v))
        # T5 does not scale scores by 1/sqrt(d_k) (scale 1.0)
        if block_mask is not None:
            o = flex_attention(q, k, v, score_mod=add_bias, block_mask=block_mask, scale=1.0)
        else:
            o = _math_attention(q, k, v, seg, table, dist)
        o = o.transpose(1, 2).reshape(rows, width, heads * dk)
        h = h + sa_layer.dropout(sa.o(o))
        h = ff_layer(h)
    return stack.dropout(stack.final_layer_norm(h))
