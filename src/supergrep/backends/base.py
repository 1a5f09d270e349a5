"""The Backend protocol and the name -> factory table.

A backend owns one loaded model (transformer + projections) on one device and does exactly one
thing for inference: turn padded token ids into L2-normalised token vectors. Tokenisation,
batching and un-padding are the encoder's job (framework-free), so a new backend (MLX, ONNX)
only implements ``forward``. ``torch`` runs every model directory but ONNX exports; ``onnx``
runs only `supergrep export onnx` directories (onnxruntime, CPU).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Protocol

import numpy as np

from supergrep.errors import UsageError

if TYPE_CHECKING:
    from supergrep.encoder.spec import ModelSpec


class Backend(Protocol):
    name: str
    device: str  # e.g. "cpu", "cuda:0", "mps"
    dtype: str  # compute dtype, e.g. "float32", "bfloat16"

    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """Encode one padded batch.

        Args:
            input_ids: (batch, length) int64 token ids.
            attention_mask: (batch, length) int64, 1 = real token (attended), 0 = padding.

        Returns:
            (batch, length, dim) float32 token vectors, each of unit L2 norm (padding rows too:
            the caller drops them).
        """
        ...


class Trainer(Protocol):
    """What the training loop (``supergrep.train.loop``) needs from a backend's trainer.

    Built with ``(spec, cfg: TrainConfig, lora: LoRAConfig, loss_fn)``; ``loss_fn(ops, q, q_mask,
    d, d_mask) -> (loss, accuracy)`` comes from ``supergrep.train.losses`` and the trainer
    passes its own ops. Values returned by ``train_step``/``eval_batch`` stay on the device
    until ``to_host`` reads a window of them back in one sync.
    """

    name: str
    adapted: list[str]  # the module paths that received LoRA adapters
    oom_events: int

    def train_step(self, batch, lr: float) -> tuple[object, object]:
        """One optimizer step on a ``supergrep.train.data.Batch``: (loss, accuracy), lazily."""
        ...

    def eval_batch(self, batch) -> tuple[object, object]: ...

    def to_host(self, values: list) -> list[float]: ...

    def memory(self) -> dict: ...

    def adapter_weights(self) -> dict[str, np.ndarray]:
        """LoRA weights in PEFT naming (``base_model.model.<path>.lora_A.weight``), float32."""
        ...

    def projection(self) -> tuple[np.ndarray, bool]:
        """(head weight (out, in) float32, whether it replaces the base's own last Dense)."""
        ...

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """(tensors, JSON meta) for an exact resume: params, optimizer moments, RNG."""
        ...

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None: ...


# name -> "module:factory". Kept as strings so that importing this table imports no framework.
_BACKENDS = {
    "torch": "supergrep.backends.torch_backend:TorchBackend",
    "mlx": "supergrep.backends.mlx_backend:MLXBackend",
    "onnx": "supergrep.backends.onnx_backend:OnnxBackend",
}
# The framework each backend needs, for "auto" and for the install hint.
_NEEDS = {"torch": ("torch", "pip install torch"), "mlx": ("mlx", "pip install 'supergrep[mlx]' (Linux + NVIDIA: "
                                                              "pip install 'mlx[cuda13]')")}


def available_backends() -> list[str]:
    return sorted(_BACKENDS)


def resolve_backend(name: str) -> str:
    """"auto" -> the first of torch, mlx that is installed (so `search` runs with either one)."""
    if name != "auto":
        return name
    for candidate in ("torch", "mlx"):
        if importlib.util.find_spec(_NEEDS[candidate][0]) is not None:
            return candidate
    raise UsageError("no model framework is installed: pip install torch, or 'supergrep[mlx]'")


def load_backend(name: str, spec: ModelSpec, device: str = "auto", threads: int = 0) -> Backend:
    """Instantiate backend ``name`` ("auto": see ``resolve_backend``) for ``spec`` on ``device``."""
    name = resolve_backend(name)
    if name not in _BACKENDS:
        raise UsageError(f"unknown backend '{name}'; choose one of: {', '.join(available_backends())}")
    module, factory = _BACKENDS[name].split(":")
    framework, hint = _NEEDS.get(name, (None, ""))
    if framework is not None and importlib.util.find_spec(framework) is None:
        raise UsageError(f"--backend {name} needs {framework}, which is not installed: {hint}")
    return getattr(importlib.import_module(module), factory)(spec, device=device, threads=threads)
