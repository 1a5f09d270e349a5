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
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

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


def select_targets(linear_paths, cfg: LoRAConfig, model_type: str) -> dict[str, str]:
    """Which Linear layers get adapters: every path (a pooler excepted) matching a target.

    The only function that decides it, for every backend (torch and MLX pass the dotted paths
    of their Linear layers, which are the same names).

    Returns:
        {module path: the target it matched}, sorted by path.

    Raises:
        ModelError: a target matched no Linear layer (nothing would be trained for it).

    >>> sorted(select_targets(["a.query", "a.key", "pooler.query"], LoRAConfig(target_modules=("query",)), "bert"))
    ['a.query']
    """
    targets = cfg.targets_for(model_type)
    chosen = {}
    for name in sorted(linear_paths):
        if not name.startswith("pooler"):
            t = matches(name, targets)
            if t is not None:
                chosen[name] = t
    used = set(chosen.values())
    # "wi" (T5 v1.0) and "wi_0"/"wi_1" (gated, v1.1) are alternatives: one of them must match.
    unused = [t for t in targets if t not in used and not (t == "wi" and "wi_0" in used)
              and not (t in ("wi_0", "wi_1") and "wi" in used)]
    if unused or not chosen:
        raise ModelError(f"LoRA targets {unused or list(targets)} match no Linear layer of this "
                         f"{model_type} model; fix lora.target_modules")
    return chosen


def _rng(seed: int, what: str) -> np.random.Generator:
    # Keyed by name, not by position: the same module gets the same numbers whatever order a
    # framework walks its modules in.
    return np.random.default_rng([seed, zlib.crc32(what.encode())])


def lora_a_init(seed: int, module_path: str, r: int, in_features: int) -> np.ndarray:
    """LoRA A (r, in_features) float32: U(-1/sqrt(in), 1/sqrt(in)), the bound of PEFT's
    ``kaiming_uniform_(a=sqrt(5))``, drawn with NumPy so the torch and MLX trainers start from
    the same numbers for the same seed.

    >>> a = lora_a_init(0, "encoder.layer.0.attention.self.query", 4, 16)
    >>> a.shape, a.dtype, bool(abs(a).max() <= 0.25)
    ((4, 16), dtype('float32'), True)
    """
    bound = 1.0 / np.sqrt(in_features)
    return _rng(seed, f"lora_A:{module_path}").uniform(-bound, bound, (r, in_features)).astype(np.float32)


def projection_init(seed: int, out_features: int, in_features: int) -> np.ndarray:
    """A new projection head (out, in) float32: a random orthogonal map scaled by
    sqrt(in / out), so dot products are roughly preserved and step 0 already retrieves
    (Johnson-Lindenstrauss). Same construction as ``torch.nn.init.orthogonal_``, in NumPy.

    >>> w = projection_init(0, 4, 16)
    >>> bool(np.allclose(w @ w.T, 4 * np.eye(4), atol=1e-5))   # rows orthogonal, norm^2 = 16/4
    True
    """
    rows, cols = out_features, in_features
    flat = _rng(seed, "projection").standard_normal((rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return (q * np.sqrt(in_features / out_features)).astype(np.float32)


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
