"""Encoder forwards over tokens laid end to end, no padding and no rows (`attn_implementation:
varlen`): T5/XTR (``varlen_forward``) and BERT/RoBERTa (``bert_varlen_forward``, the default
MiniLM) encoders.

Why: the flex path (``torch_t5_flex.py``) packs documents into 512-token rows and lets
FlexAttention skip whole 128 x 128 blocks between documents; at code-chunk lengths (~159 tokens)
most computed blocks straddle a document border, and attention took 36% of the step's GPU time
for ~3% of its FLOPs. Here every token is a real token (the projections, norms and dropouts run
on (N, d_model) with N = the useful tokens) and attention is a kernel that works one document at
a time (``t5_attention.py``). The projections that read the same input are one fused LoRA GEMM
each (``torch_fused_lora.py``): q, k, v together; wi_0 and wi_1 together.

The layers are the HF ``T5EncoderModel``'s own modules (LoRA-wrapped projections, layer norms,
dropouts), as in the flex path, with the same one deliberate difference from HF's forward: no
dropout on the attention probabilities. The hidden-state dropouts stay.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from supergrep.backends.t5_attention import t5_varlen_attention, use_dense_bias
from supergrep.backends.torch_fp8 import fp8_linear, is_fp8
from supergrep.backends.torch_fused_lora import (
    fp8_shapes_ok,
    fusable,
    fused_lora_linear,
    gated_fusable,
)
from supergrep.backends.torch_t5_flex import bias_table

# The gated feed-forward's activation and its float8 quantisation for wo as one Triton kernel
# (triton_gated_gelu.gated_gelu_fwd_quant_kernel) where Inductor fuses them as a looped reduction
# computing the activation twice: 1.010x the step on an H200, GPU time -0.5 ms (docs/performance.md
# #44; benchmarks/step_trace.py --ab gated_fwd). On by default wherever it applies (float8 products,
# fp8_quantize gated, no dropout); SUPERGREP_GATED_FWD_KERNEL=0 turns it off.
GATED_FORWARD_KERNEL = os.environ.get("SUPERGREP_GATED_FWD_KERNEL", "1").strip().lower() not in ("0", "false", "no", "off")

# Training under 16-bit autocast with the dense position-bias matrix in float16, as encoding has it:
# the attention's three kernels (forward, dK/dV, dQ) each read a bias tile per score tile, half the
# bytes (the bias is frozen and rounds to ~5e-4 of itself, finer than the bf16 q.k products it is
# added to). With the backward's own tiles (t5_attention._BWD_BLOCKS) 1.025x the step at batch 512
# on an H200 (50.3% MFU), 1.013x at 384, 0.996x at 192; alone 1.006x at 512 (docs/performance.md
# #50, #51). The default; SUPERGREP_T5_BIAS16=0 keeps the float32 matrix.
BIAS16_TRAINING = os.environ.get("SUPERGREP_T5_BIAS16", "1").strip().lower() not in ("0", "false", "no", "off")


def _autocast16(device: torch.device) -> bool:
    return torch.is_autocast_enabled(device.type) and torch.get_autocast_dtype(device.type) in (torch.bfloat16,
                                                                                                torch.float16)


def _quantised_input_ok(ff: nn.Module) -> bool:
    """Whether wo's float8 input can come from the activation's own op: no dropout between them,
    wo a fused float8 projection with row scaling computed on the fly."""
    drop = ff.dropout
    no_drop = isinstance(drop, nn.Identity) or (isinstance(drop, nn.Dropout) and (drop.p == 0 or not drop.training))
    return (no_drop and fusable([ff.wo]) and getattr(ff.wo, "fp8", False)
            and getattr(ff.wo, "fp8_amax", None) is None and fp8_shapes_ok(ff.wo.in_features, (ff.wo.out_features,)))


def project(x: torch.Tensor, mods: list[nn.Module], fuse: bool = True, opaque_grad: bool = False) -> torch.Tensor:
    """The outputs of ``mods`` on ``x``, concatenated on the last axis: one fused LoRA GEMM when
    they allow it (LoRA-wrapped, no LoRA dropout, no QAT), one float8 product for ``Fp8Linear``
    layers, one GEMM over the stacked weights for plain frozen Linear layers (inference), else
    one call each. ``opaque_grad``: the output feeds one of our custom ops (``fused_lora_linear``)."""
    if fuse and fusable(mods):
        return fused_lora_linear(x, mods, opaque_grad=opaque_grad)
    if is_fp8(mods):  # float8 inference (torch_fp8.py): the input quantised once for all of them
        return fp8_linear(x, mods)
    if fuse and len(mods) > 1 and all(type(m) is nn.Linear and not m.weight.requires_grad for m in mods):
        bias = None if mods[0].bias is None else torch.cat([m.bias for m in mods])
        return nn.functional.linear(x, torch.cat([m.weight for m in mods]), bias)
    outs = [m(x) for m in mods]
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-1)


def varlen_forward(encoder: nn.Module, ids: torch.Tensor, cu: torch.Tensor, max_len: int,
                   fuse: bool = True, residual_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Last hidden states (N, d_model) of HF T5EncoderModel ``encoder`` over the flat tokens
    ``ids`` (N,), sequences starting at ``cu`` (n + 1,) int32, none longer than ``max_len``.
    ``residual_dtype``: the residual stream's dtype (e.g. bf16 under bf16 autocast; None keeps
    the embedding's, float32 for float32 master weights): half the bytes of every residual add
    and layer norm pass, at the residual's rounding (train config ``residual_dtype``)."""
    stack = encoder.encoder
    table, dist = bias_table(encoder)
    if ids.is_cuda and use_dense_bias():  # once per step, shared by the 12 layers
        from supergrep.backends.triton_t5_attention import dense_bias

        # float16 when nothing is trained (encoding): half the bias bytes each tile reads, which
        # took the attention forward from 0.79 to 0.70 ms a layer on an H100 (fp8 session records)
        table = dense_bias(table.detach(), dist, max_len)
        if not torch.is_grad_enabled() or (BIAS16_TRAINING and _autocast16(ids.device)):
            table = table.half()
    h = stack.dropout(stack.embed_tokens(ids))  # (N, d_model)
    if residual_dtype is not None:
        h = h.to(residual_dtype)
    for block in stack.block:
        sa_layer, ff_layer = block.layer[0], block.layer[-1]
        sa = sa_layer.SelfAttention
        # (N, 3 * heads * d_kv); its gradient comes out of the attention backward's custom op
        qkv = project(sa_layer.layer_norm(h), [sa.q, sa.k, sa.v], fuse, opaque_grad=True)
        o = t5_varlen_attention(qkv, cu, max_len, table, dist, sa.n_heads)  # T5 does not scale scores
        h = h + sa_layer.dropout(project(o, [sa.o], fuse))
        ff = ff_layer.DenseReluDense
        x = ff_layer.layer_norm(h)
        gated = hasattr(ff, "wi_0") and fuse and torch.is_grad_enabled() and gated_fusable([ff.wi_0, ff.wi_1], ff.act)
        if gated and GATED_FORWARD_KERNEL and _quantised_input_ok(ff):
            # the activation and wo's float8 input from one op (one read of the wi outputs)
            a, aq, a_scale = fused_lora_linear(x, [ff.wi_0, ff.wi_1], gated=True, quant_out=True)
            h = h + ff_layer.dropout(fused_lora_linear(a, [ff.wo], x_quant=(aq, a_scale)))
            continue
        if gated:
            a = fused_lora_linear(x, [ff.wi_0, ff.wi_1], gated=True)  # fp8_quantize: gated
        elif hasattr(ff, "wi_0"):  # gated (T5 v1.1, XTR): act(wi_0 x) * wi_1 x
            g = project(x, [ff.wi_0, ff.wi_1], fuse)
            width = g.shape[-1] // 2
            a = ff.act(g[..., :width]) * g[..., width:]
        else:
            a = ff.act(project(x, [ff.wi], fuse))
        h = h + ff_layer.dropout(project(ff.dropout(a), [ff.wo], fuse))
    return stack.dropout(stack.final_layer_norm(h))


def bert_varlen_forward(model: nn.Module, ids: torch.Tensor, pos: torch.Tensor, cu: torch.Tensor, max_len: int,
                        position_offset: int = 0, fuse: bool = True,
                        residual_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Last hidden states (N, hidden) of an HF BERT / RoBERTa model over the flat tokens ``ids``
    (N,), ``pos`` each token's position in its own sequence (RoBERTa counts from
    ``position_offset`` = padding_idx + 1), sequences starting at ``cu``. Post-LN layers as HF's;
    no dropout on attention probabilities (the kernel has none), the hidden-state dropouts stay.
    ``residual_dtype``: each LayerNorm's output (the residual stream) cast to it (autocast runs
    LayerNorm in float32); None keeps float32."""
    cast = (lambda t: t.to(residual_dtype)) if residual_dtype is not None else (lambda t: t)  # noqa: E731
    emb = model.embeddings
    h = emb.word_embeddings(ids) + emb.position_embeddings(pos + position_offset)
    if getattr(emb, "token_type_embeddings", None) is not None:
        h = h + emb.token_type_embeddings.weight[0]  # every token is of type 0
    h = cast(emb.dropout(emb.LayerNorm(h)))
    for layer in model.encoder.layer:
        att = layer.attention
        sa = att.self
        heads = sa.num_attention_heads
        qkv = project(h, [sa.query, sa.key, sa.value], fuse, opaque_grad=True)  # (N, 3 * hidden)
        o = t5_varlen_attention(qkv, cu, max_len, None, 0, heads, sa.attention_head_size ** -0.5)
        out = att.output
        h = cast(out.LayerNorm(out.dropout(project(o, [out.dense], fuse)) + h))
        a = layer.intermediate.intermediate_act_fn(project(h, [layer.intermediate.dense], fuse))
        ffo = layer.output
        h = cast(ffo.LayerNorm(ffo.dropout(project(a, [ffo.dense], fuse)) + h))
    return h
