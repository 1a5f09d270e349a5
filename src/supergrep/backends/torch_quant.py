"""Quantization-aware training (QAT) for the LoRA trainer: fake-quantized weights in the forward.

With ``qat_bits`` set, every LoRA layer computes ``x @ fq(W + scale * B @ A)^T + b``, where
``fq`` rounds the merged weight to the group-wise grid `supergrep quantize` will use (symmetric,
``qat_group_size`` input columns per scale) and passes gradients straight through (STE: the
backward treats ``fq`` as the identity, Bengio et al. 2013), so the adapter learns to be
accurate *after* rounding. Frozen weights that no adapter touches (the embedding tables, any
Linear outside ``lora_target_modules``) are rounded once, in place: their deployed values are
known and fixed. The projection head stays float, as `supergrep quantize` leaves it.

Cost: one merged (out, in) weight per layer per forward (MiniLM: +0.6 MFLOP per layer and
step for r=16, against ~1.8 MFLOP per token), so QAT steps take about as long as plain ones.
LoRA dropout is not applied (the update is merged), which is why the config refuses both.
"""

from __future__ import annotations

import torch
from torch import nn


def fake_quantize(w: torch.Tensor, bits: int, group_size: int) -> torch.Tensor:
    """Group-wise symmetric fake quantization with a straight-through gradient.

    Args:
        w: (rows, cols) weight; groups of ``group_size`` columns share a scale
            ``max|w| / (2**(bits-1) - 1)`` (the last group zero-padded), as in
            ``supergrep.backends.quant.quantize``.

    Returns:
        The rounded weight in the forward; ``d out / d w`` is the identity in the backward.

    >>> w = torch.tensor([[0.43, -1.0, 0.26, 0.0]], requires_grad=True)
    >>> q = fake_quantize(w, 4, 4)  # scale 1/7
    >>> [round(float(v) * 7, 3) for v in q[0]]
    [3.0, -7.0, 2.0, 0.0]
    >>> q.sum().backward(); w.grad.tolist()
    [[1.0, 1.0, 1.0, 1.0]]
    """
    rows, cols = w.shape
    pad = (-cols) % group_size
    g = nn.functional.pad(w, (0, pad)).reshape(rows, -1, group_size)  # (rows, n_groups, group)
    qmax = 2 ** (bits - 1) - 1
    scale = g.detach().abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / qmax  # (rows, n_groups, 1)
    q = (torch.clamp(torch.round(g / scale), -qmax, qmax) * scale).reshape(rows, -1)[:, :cols]
    return w + (q - w).detach()  # forward: q; backward: identity


class MergedFakeQuant:
    """The QAT forward of one LoRALinear (installed by :func:`enable_qat`)."""

    def __init__(self, bits: int, group_size: int):
        self.bits, self.group_size = bits, group_size

    def __call__(self, layer, x: torch.Tensor) -> torch.Tensor:
        w = layer.base.weight.float() + layer.scale * (layer.lora_B.float() @ layer.lora_A.float())  # (out, in)
        wq = fake_quantize(w, self.bits, self.group_size).to(x.dtype)
        bias = layer.base.bias.to(x.dtype) if layer.base.bias is not None else None
        return nn.functional.linear(x, wq, bias)


@torch.no_grad()
def _round_in_place(weight: torch.Tensor, bits: int, group_size: int) -> None:
    weight.copy_(fake_quantize(weight.float(), bits, group_size).to(weight.dtype))


def enable_qat(model: nn.Module, bits: int, group_size: int) -> dict[str, int]:
    """Fake-quantize every LoRA layer's merged weight and round the other frozen weights.

    Returns:
        {"lora": layers fake-quantized per step, "frozen": weights rounded once}.
    """
    from supergrep.backends.torch_lora import LoRALinear

    if bits not in (4, 8):
        raise ValueError(f"qat bits must be 4 or 8, not {bits}")
    counts = {"lora": 0, "frozen": 0}
    inside_lora = set()
    for name, m in model.named_modules():
        if isinstance(m, LoRALinear):
            m.weight_fake_quant = MergedFakeQuant(bits, group_size)
            counts["lora"] += 1
            inside_lora.add(f"{name}.base")
    for name, m in model.named_modules():
        if name in inside_lora or name.startswith("pooler") or ".pooler" in name:
            continue
        if isinstance(m, (nn.Linear, nn.Embedding)) and not m.weight.requires_grad:
            _round_in_place(m.weight, bits, group_size)
            counts["frozen"] += 1
    return counts
