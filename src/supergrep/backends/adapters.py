"""LoRA adapter configuration and files (framework-free; here, below ``encoder``, because the
torch and MLX LoRA layers both read it).

Files follow PEFT's layout so other tools can read them: ``adapter_config.json`` (``r``,
``lora_alpha``, ``lora_dropout``, ``target_modules``, ...) and ``adapter_model.safetensors`` with
keys ``base_model.model.<module path>.lora_A.weight`` (r, in) and ``...lora_B.weight`` (out, r).
The effective weight of an adapted Linear is ``W + (alpha / r) * B @ A``.

``target_modules`` uses PEFT's matching rule: a Linear is adapted when its dotted path equals
a target or ends with ``"." + target``. Defaults per architecture adapt every attention and MLP
projection; a target that matches nothing is an error (the seeds' converter silently merged 14
of 24 projections, and their trainer once filtered every gradient away).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from supergrep.errors import ModelError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
KEY_PREFIX = "base_model.model."

# model_type -> the Linear layers adapted by default: attention q/k/v/o and the MLP.
DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "bert": ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"),
    "roberta": ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"),
    "xlm-roberta": ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"),
    "electra": ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"),
    "mpnet": ("q", "k", "v", "o", "intermediate.dense", "output.dense"),
    "distilbert": ("q_lin", "k_lin", "v_lin", "out_lin", "lin1", "lin2"),
    "t5": ("q", "k", "v", "o", "wi_0", "wi_1", "wi", "wo"),
    "mt5": ("q", "k", "v", "o", "wi_0", "wi_1", "wi", "wo"),
    "umt5": ("q", "k", "v", "o", "wi_0", "wi_1", "wi", "wo"),
}


@dataclass(frozen=True)
class LoRAConfig:
    """Low-rank adapters on the frozen base (Hu et al., 2021)."""

    r: int = 16
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0
    target_modules: tuple[str, ...] = field(default_factory=tuple)

    @property
    def scale(self) -> float:
        return self.lora_alpha / self.r

    def targets_for(self, model_type: str) -> tuple[str, ...]:
        if self.target_modules:
            return self.target_modules
        if model_type not in DEFAULT_TARGETS:
            raise ModelError(
                f"no default LoRA targets for model type '{model_type}'; set lora.target_modules "
                f"(Linear layer names) in the training config"
            )
        return DEFAULT_TARGETS[model_type]

    def write(self, directory: Path, model_type: str, base: str = "") -> None:
        data = {
            "peft_type": "LORA",
            "task_type": "FEATURE_EXTRACTION",
            "r": self.r,
            "lora_alpha": self.lora_alpha,
            "lora_dropout": self.lora_dropout,
            "target_modules": list(self.targets_for(model_type)),
            "bias": "none",
            "base_model_name_or_path": base,
            "supergrep_model_type": model_type,
        }
        (Path(directory) / ADAPTER_CONFIG).write_text(json.dumps(data, indent=2) + "\n")

    @classmethod
    def read(cls, directory: Path) -> LoRAConfig:
        path = Path(directory) / ADAPTER_CONFIG
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise ModelError(f"{path} is missing: not an adapter directory") from None
        except ValueError as exc:
            raise ModelError(f"{path}: invalid JSON ({exc})") from None
        try:
            return cls(r=int(data["r"]), lora_alpha=float(data["lora_alpha"]),
                       lora_dropout=float(data.get("lora_dropout", 0.0)),
                       target_modules=tuple(data.get("target_modules") or ()))
        except (KeyError, TypeError, ValueError):
            raise ModelError(f"{path}: needs integer r and numeric lora_alpha") from None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["target_modules"] = list(self.target_modules)
        return d


def matches(name: str, targets: tuple[str, ...]) -> str | None:
    """The target a module path matches (PEFT's rule), or None.

    >>> matches("encoder.layer.0.attention.output.dense", ("output.dense", "query"))
    'output.dense'
    >>> matches("pooler.dense", ("output.dense",)) is None
    True
    """
    for t in targets:
        if name == t or name.endswith("." + t):
            return t
    return None


def adapter_keys(module_path: str) -> tuple[str, str]:
    """The (A, B) weight keys of one adapted module in ``adapter_model.safetensors``."""
    return f"{KEY_PREFIX}{module_path}.lora_A.weight", f"{KEY_PREFIX}{module_path}.lora_B.weight"


def module_paths(keys) -> list[str]:
    """Module paths named by adapter weight keys; every A must have its B and vice versa."""
    a = {k[len(KEY_PREFIX) : -len(".lora_A.weight")] for k in keys if k.endswith(".lora_A.weight")}
    b = {k[len(KEY_PREFIX) : -len(".lora_B.weight")] for k in keys if k.endswith(".lora_B.weight")}
    other = [k for k in keys if not (k.endswith(".lora_A.weight") or k.endswith(".lora_B.weight"))]
    if other or a != b:
        lonely = sorted(a ^ b)[:3]
        raise ModelError(
            f"adapter weights are inconsistent: unexpected keys {other[:3]} / unpaired A/B for {lonely}"
        )
    return sorted(a)
