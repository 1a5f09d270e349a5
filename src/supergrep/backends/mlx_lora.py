"""LoRA for MLX: the same layer, names and files as ``torch_lora`` (after mlx-lm's
``tuner/lora.py``: ``from_base`` wraps a Linear, ``fuse()`` returns a plain one).

``y = x W^T + b + scale * dropout(x) A^T B^T`` with A (r, in) and B (out, r) stored exactly as
PEFT stores them (``base_model.model.<path>.lora_A.weight``), B starting at zero.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_unflatten

from supergrep.backends.adapters import (
    LoRAConfig,
    adapter_keys,
    lora_a_init,
    module_paths,
    select_targets,
)
from supergrep.backends.mlx_models import linear_paths
from supergrep.errors import ModelError


class LoRALinear(nn.Module):
    """A frozen Linear plus a trainable low-rank update (``lora_A``, ``lora_B``, float32)."""

    def __init__(self, base: nn.Linear, r: int, alpha: float, dropout: float = 0.0,
                 init_a: np.ndarray | None = None):
        super().__init__()
        out_f, in_f = base.weight.shape
        self.base = base
        self.scale = alpha / r
        if init_a is None:
            bound = 1.0 / np.sqrt(in_f)
            init_a = np.random.default_rng().uniform(-bound, bound, (r, in_f))
        self.lora_A = mx.array(np.asarray(init_a, dtype=np.float32))  # (r, in)
        self.lora_B = mx.zeros((out_f, r), dtype=mx.float32)  # (out, r): a new adapter changes nothing
        self.dropout = nn.Dropout(dropout) if dropout > 0 else None
        self.enabled = True  # False: behave as the base layer (the distillation teacher)

    @classmethod
    def from_base(cls, base: nn.Linear, r: int, alpha: float, dropout: float = 0.0,
                  init_a: np.ndarray | None = None) -> LoRALinear:
        return cls(base, r, alpha, dropout, init_a)

    def __call__(self, x: mx.array) -> mx.array:
        out = self.base(x)
        if not self.enabled:
            return out
        h = self.dropout(x) if self.dropout is not None else x
        a, b = self.lora_A.astype(x.dtype), self.lora_B.astype(x.dtype)
        return out + ((h @ a.T) @ b.T) * self.scale

    def fuse(self) -> nn.Linear:
        """A plain Linear with the update folded in (computed in float32)."""
        w = self.base.weight
        out_f, in_f = w.shape
        fused = nn.Linear(in_f, out_f, bias="bias" in self.base)
        fused.weight = (w.astype(mx.float32) + self.scale * (self.lora_B @ self.lora_A)).astype(w.dtype)
        if "bias" in self.base:
            fused.bias = self.base.bias
        return fused


def _get(model: nn.Module, path: str):
    obj = model
    for part in path.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def linear_to_lora_layers(model: nn.Module, cfg: LoRAConfig, model_type: str, seed: int | None = None) -> list[str]:
    """Wrap every Linear that ``adapters.select_targets`` picks (the same rule as torch).

    Args:
        seed: Draw each A with ``adapters.lora_a_init(seed, path, ...)``, the numbers the
            torch trainer draws for the same seed; None: fresh random numbers.

    Returns:
        The adapted module paths, sorted.
    """
    chosen = select_targets(linear_paths(model), cfg, model_type)
    wrapped = []
    for name in sorted(chosen):
        base = _get(model, name)
        init_a = None if seed is None else lora_a_init(seed, name, cfg.r, base.weight.shape[1])
        wrapped.append((name, LoRALinear.from_base(base, cfg.r, cfg.lora_alpha, cfg.lora_dropout, init_a)))
    model.update_modules(tree_unflatten(wrapped))
    return sorted(chosen)


def lora_modules(model: nn.Module) -> dict[str, LoRALinear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, LoRALinear)}


def adapter_state(model: nn.Module) -> dict[str, np.ndarray]:
    """The adapter weights in PEFT naming, float32 NumPy."""
    out: dict[str, np.ndarray] = {}
    for name, m in lora_modules(model).items():
        ka, kb = adapter_keys(name)
        out[ka] = np.array(m.lora_A.astype(mx.float32))
        out[kb] = np.array(m.lora_B.astype(mx.float32))
    return out


def _check_shapes(name: str, a, b, in_f: int, out_f: int) -> None:
    r = a.shape[0]
    if tuple(a.shape) != (r, in_f) or tuple(b.shape) != (out_f, r):
        raise ModelError(f"adapter shape mismatch at {name}: A {tuple(a.shape)}, B {tuple(b.shape)} for a "
                         f"Linear {in_f} -> {out_f}")


def load_adapter_state(model: nn.Module, state: dict) -> int:
    """Copy adapter weights into an already-wrapped model; every key must find its module and
    every module its keys (checked before anything is copied)."""
    mods = lora_modules(model)
    paths = module_paths(list(state))
    missing, extra = sorted(set(mods) - set(paths)), sorted(set(paths) - set(mods))
    if missing or extra:
        raise ModelError(f"adapter does not fit the model: no weights for {missing[:3]}, "
                         f"weights for unknown modules {extra[:3]} ({len(missing)} / {len(extra)} in all)")
    for name in paths:
        ka, kb = adapter_keys(name)
        out_f, in_f = mods[name].base.weight.shape
        _check_shapes(name, state[ka], state[kb], in_f, out_f)
    for name in paths:
        ka, kb = adapter_keys(name)
        mods[name].lora_A = mx.array(np.asarray(state[ka], dtype=np.float32))
        mods[name].lora_B = mx.array(np.asarray(state[kb], dtype=np.float32))
    return len(paths)


def fold_adapter_weights(model: nn.Module, cfg: LoRAConfig, state: dict) -> int:
    """Fold adapter weights straight into a plain (unwrapped) model's Linear weights, in
    float32. Every key is matched to its layer before any weight changes.

    Returns:
        The number of projections merged (= the adapter's A/B pairs, or it raises).
    """
    paths = module_paths(list(state))  # every A has its B; any key order
    if not paths:
        raise ModelError("the adapter holds no LoRA weights")
    layers = {}
    for name in paths:
        try:
            lin = _get(model, name)
        except (KeyError, IndexError, ValueError, TypeError):
            raise ModelError(f"adapter weight for {name}, which this model does not have") from None
        if not isinstance(lin, nn.Linear):
            raise ModelError(f"adapter weight for {name}, which is not a Linear layer")
        ka, kb = adapter_keys(name)
        out_f, in_f = lin.weight.shape
        _check_shapes(name, state[ka], state[kb], in_f, out_f)
        layers[name] = lin
    for name, lin in layers.items():
        ka, kb = adapter_keys(name)
        a = mx.array(state[ka]).astype(mx.float32)
        b = mx.array(state[kb]).astype(mx.float32)
        lin.weight = (lin.weight.astype(mx.float32) + cfg.scale * (b @ a)).astype(lin.weight.dtype)
    mx.eval([lin.weight for lin in layers.values()])
    return len(layers)


def fuse_lora(model: nn.Module) -> int:
    """Replace every LoRALinear by its fused Linear; returns how many were fused."""
    mods = lora_modules(model)
    model.update_modules(tree_unflatten([(n, m.fuse()) for n, m in mods.items()]))
    left = lora_modules(model)
    if left:
        raise ModelError(f"{len(left)} LoRA layers were left unfused: {sorted(left)[:3]}")
    return len(mods)


# transformers' class for each model type's encoder (what a merged directory's config names).
ENCODER_ARCHITECTURES = {"bert": "BertModel", "roberta": "RobertaModel", "xlm-roberta": "XLMRobertaModel",
                         "camembert": "CamembertModel", "mpnet": "MPNetModel", "t5": "T5EncoderModel",
                         "mt5": "MT5EncoderModel"}


def merge_into_base(spec, cfg: LoRAConfig, state: dict):
    """Fold an adapter into ``spec``'s base in MLX, for ``supergrep merge --backend mlx``.

    Returns:
        (projections merged, Linear layers the targets select in the base, ``save(directory)``
        writing ``config.json`` + ``model.safetensors`` under Hugging Face's names, loadable by
        transformers and by this backend).
    """
    import json

    from mlx.utils import tree_flatten

    from supergrep.backends.adapters import matches
    from supergrep.backends.mlx_models import (
        _weight_files,
        load_transformer,
        read_config,
        read_weights,
    )

    model = load_transformer(spec, mx.float32)
    targets = cfg.targets_for(spec.model_type)
    in_base = [n for n in linear_paths(model) if not n.startswith("pooler") and matches(n, targets)]
    merged = fold_adapter_weights(model, cfg, state)

    def save(directory) -> None:
        from pathlib import Path

        directory = Path(directory)
        weights = dict(tree_flatten(model.parameters()))
        original = read_weights(_weight_files(spec.transformer_path))
        for k, v in original.items():  # the pooler is no part of the token vectors: carried as is
            name = k.split(".", 1)[1] if k.split(".", 1)[0] in ("bert", "roberta", "mpnet") else k
            if name.startswith("pooler."):
                weights[name] = v
        mx.save_safetensors(str(directory / "model.safetensors"), weights, metadata={"format": "pt"})
        config = read_config(spec.transformer_path)
        config["architectures"] = [ENCODER_ARCHITECTURES.get(spec.model_type, "AutoModel")]
        (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    return merged, len(in_base), save
