"""LoRA for PyTorch: wrap Linear layers, fold adapters back into plain Linear layers.

Written here rather than taken from PEFT so that the PyTorch and MLX sides share one small,
exact definition (``y = x W^T + b + scale * dropout(x) A^T B^T``), with adapter files in PEFT's
naming (see ``supergrep.backends.adapters``), and so that merging can count and verify every
projection it folds.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from supergrep.backends.adapters import (
    LoRAConfig,
    adapter_keys,
    lora_a_init,
    module_paths,
    select_targets,
)
from supergrep.errors import ModelError


class LoRALinear(nn.Module):
    """A frozen Linear plus a trainable low-rank update.

    ``lora_B`` starts at zero, so a fresh adapter leaves the outputs unchanged.
    """

    # Quantization-aware training replaces the forward (backends/torch_quant.py: enable_qat).
    weight_fake_quant = None
    # Float8 products for the frozen projection (train config fp8_products; torch_fused_lora.py)
    fp8 = False

    def __init__(self, base: nn.Linear, r: int, alpha: float, dropout: float = 0.0, init_a=None):
        super().__init__()
        self.base = base
        self.r, self.scale = r, alpha / r
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features, dtype=torch.float32, device=base.weight.device))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, dtype=torch.float32, device=base.weight.device))
        if init_a is None:
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # PEFT's default init of A
        else:  # the NumPy init the MLX trainer shares (adapters.lora_a_init)
            with torch.no_grad():
                self.lora_A.copy_(torch.from_numpy(init_a))
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.enabled = True  # False: behave as the base layer (the distillation teacher)

    # Model code sometimes reads a projection's weight directly (T5's ``wo.weight.dtype``).
    @property
    def weight(self) -> torch.Tensor:
        return self.base.weight

    @property
    def bias(self) -> torch.Tensor | None:
        return self.base.bias

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    @classmethod
    def from_base(cls, base: nn.Linear, r: int, alpha: float, dropout: float = 0.0, init_a=None) -> LoRALinear:
        return cls(base, r, alpha, dropout, init_a)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled:
            return self.base(x)
        if self.weight_fake_quant is not None:
            return self.weight_fake_quant(self, x)
        if self.fp8:  # float8 lives in the fused path (one module is a group of one)
            from supergrep.backends.torch_fused_lora import fusable, fused_lora_linear

            if fusable([self]):
                return fused_lora_linear(x, [self])
        out = self.base(x)
        a = self.lora_A.to(x.dtype)
        b = self.lora_B.to(x.dtype)
        return out + (self.dropout(x) @ a.t() @ b.t()) * self.scale

    @torch.no_grad()
    def fuse(self) -> nn.Linear:
        """A plain Linear with the update folded in (computed in fp32)."""
        w = self.base.weight.data.float() + self.scale * (self.lora_B.float() @ self.lora_A.float())
        fused = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None,
                          device=w.device, dtype=self.base.weight.dtype)
        fused.weight.copy_(w.to(self.base.weight.dtype))
        if self.base.bias is not None:
            fused.bias.copy_(self.base.bias)
        return fused


def _set(model: nn.Module, path: str, module: nn.Module) -> None:
    parent_path, _, leaf = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    setattr(parent, leaf, module)


def linear_to_lora_layers(model: nn.Module, cfg: LoRAConfig, model_type: str, seed: int | None = None) -> list[str]:
    """Wrap every Linear that ``adapters.select_targets`` picks.

    Args:
        seed: Draw every A from ``adapters.lora_a_init(seed, path, ...)`` (the init the MLX
            trainer shares); None: torch's own RNG (PEFT's kaiming-uniform).

    Returns:
        The adapted module paths, sorted.

    Raises:
        ModelError: a target matched no Linear layer (nothing would be trained for it).
    """
    linears = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    chosen = select_targets(linears, cfg, model_type)
    for name in sorted(chosen):
        base = model.get_submodule(name)
        init_a = None if seed is None else lora_a_init(seed, name, cfg.r, base.in_features)
        _set(model, name, LoRALinear.from_base(base, cfg.r, cfg.lora_alpha, cfg.lora_dropout, init_a))
    return sorted(chosen)


def lora_modules(model: nn.Module) -> dict[str, LoRALinear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter weights in PEFT naming (fp32, on CPU)."""
    out: dict[str, torch.Tensor] = {}
    for name, m in lora_modules(model).items():
        ka, kb = adapter_keys(name)
        out[ka] = m.lora_A.detach().float().cpu().contiguous()
        out[kb] = m.lora_B.detach().float().cpu().contiguous()
    return out


def load_adapter_state(model: nn.Module, state: dict[str, torch.Tensor]) -> int:
    """Copy adapter weights into an already-wrapped model; every key must find its module."""
    mods = lora_modules(model)
    paths = module_paths(list(state))
    missing = sorted(set(mods) - set(paths))
    extra = sorted(set(paths) - set(mods))
    if missing or extra:
        raise ModelError(f"adapter does not fit the model: no weights for {missing[:3]}, "
                         f"weights for unknown modules {extra[:3]} ({len(missing)} / {len(extra)} in all)")
    with torch.no_grad():
        for name in paths:
            ka, kb = adapter_keys(name)
            m = mods[name]
            if tuple(state[ka].shape) != tuple(m.lora_A.shape) or tuple(state[kb].shape) != tuple(m.lora_B.shape):
                raise ModelError(f"adapter shape mismatch at {name}: A {tuple(state[ka].shape)} vs "
                                 f"{tuple(m.lora_A.shape)}, B {tuple(state[kb].shape)} vs {tuple(m.lora_B.shape)}")
            m.lora_A.copy_(state[ka])
            m.lora_B.copy_(state[kb])
    return len(paths)


def merge_adapter_weights(model: nn.Module, cfg: LoRAConfig, state: dict[str, torch.Tensor]) -> int:
    """Fold adapter weights straight into a plain (unwrapped) model's Linear weights.

    Returns:
        The number of projections merged; raises unless every adapter key was used.
    """
    paths = module_paths(list(state))
    if not paths:
        raise ModelError("the adapter holds no LoRA weights")
    merged = 0
    with torch.no_grad():
        for name in paths:
            try:
                lin = model.get_submodule(name)
            except AttributeError:
                raise ModelError(f"adapter weight for {name}, which this model does not have") from None
            if not isinstance(lin, nn.Linear):
                raise ModelError(f"adapter weight for {name}, which is not a Linear layer")
            ka, kb = adapter_keys(name)
            a, b = state[ka].float(), state[kb].float()
            if a.shape != (a.shape[0], lin.in_features) or b.shape != (lin.out_features, a.shape[0]):
                raise ModelError(f"adapter shape mismatch at {name}")
            w = lin.weight.data.float() + cfg.scale * (b.to(lin.weight.device) @ a.to(lin.weight.device))
            lin.weight.data.copy_(w.to(lin.weight.dtype))
            merged += 1
    if merged != len(paths):  # pragma: no cover - defensive: the loop raises first
        raise ModelError(f"merged {merged} of {len(paths)} adapter projections")
    return merged


def fuse_lora(model: nn.Module) -> int:
    """Replace every LoRALinear by its fused Linear; returns how many were fused."""
    mods = lora_modules(model)
    for name, m in mods.items():
        _set(model, name, m.fuse())
    left = lora_modules(model)
    if left:
        raise ModelError(f"{len(left)} LoRA layers were left unfused: {sorted(left)[:3]}")
    return len(mods)
