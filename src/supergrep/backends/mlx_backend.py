"""Apple MLX backend: encode on Apple Silicon (Metal), NVIDIA GPUs (``mlx[cuda13]``) or CPU
(``mlx[cpu]``), from the same model directories as the torch backend, without torch.

``forward`` runs the encoder, the Dense head(s) and the L2 normalisation as one graph and copies
the result back once. On a GPU the graph is compiled (``mx.compile`` fuses the element-wise
work; it is traced once per input shape, so widths are padded up to a multiple of
``PAD_WIDTH``: a few shapes, not one per batch); on the CPU it runs eagerly, which measured as
fast there without the tracing cost.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import mlx.core as mx
import numpy as np

from supergrep.backends.mlx_models import build_dense, load_encoder
from supergrep.errors import UsageError

if TYPE_CHECKING:
    from supergrep.encoder.spec import ModelSpec

PAD_WIDTH = 32  # compiled (GPU) forward: extra right padding is masked, real tokens' vectors unchanged


def gpu_kind() -> str | None:
    """"metal", "cuda" or None (no GPU in this MLX build)."""
    if not mx.is_available(mx.gpu):
        return None
    metal = getattr(mx, "metal", None)
    return "metal" if metal is not None and metal.is_available() else "cuda"


def pick_device(device: str = "auto") -> mx.Device:
    """auto: the GPU when this MLX build has one (Metal or CUDA), else the CPU. ``mps``,
    ``cuda``, ``cuda:N`` and ``gpu`` all name MLX's GPU device."""
    device = (device or "auto").strip().lower()
    kind = gpu_kind()
    if device == "auto":
        return mx.Device(mx.gpu if kind else mx.cpu, 0)
    if device == "cpu":
        return mx.Device(mx.cpu, 0)
    m = re.fullmatch(r"(?:cuda|gpu)(?::(\d+))?|mps", device)
    if m is None:
        raise UsageError(f"unknown device '{device}'; use auto, cpu, gpu, mps, cuda or cuda:N")
    if kind is None:
        raise UsageError(f"--device {device} requested but this MLX build has no GPU (mlx[cpu]); use --device "
                         f"cpu, or install mlx (macOS) / mlx[cuda13] (Linux + NVIDIA)")
    index = int(m.group(1) or 0)
    count = mx.device_count(mx.gpu)
    if index >= count:
        raise UsageError(f"--device {device} requested but MLX sees {count} GPU(s)")
    return mx.Device(mx.gpu, index)


def device_name(device: mx.Device) -> str:
    return "cpu" if device.type == mx.cpu else (gpu_kind() or "gpu")


class MLXBackend:
    name = "mlx"

    def __init__(self, spec: ModelSpec, device: str = "auto", threads: int = 0):
        self._device = pick_device(device)
        mx.set_default_device(self._device)
        self.device = device_name(self._device)
        # fp32 on CPU; bf16 on a GPU (as the torch backend on CUDA; T5 overflows fp16).
        self._dtype = mx.float32 if self.device == "cpu" else mx.bfloat16
        self.dtype = "float32" if self._dtype == mx.float32 else "bfloat16"
        self.head = [build_dense(d, self._dtype) for d in spec.dense]  # cheap checks first
        self.model = load_encoder(spec, self._dtype)
        self.model.eval()
        for layer in self.head:
            layer.eval()
        self.dim = spec.dim
        self.compiled = self.device != "cpu"
        self._forward = mx.compile(self._encode) if self.compiled else self._encode

    def _encode(self, ids: mx.array, mask: mx.array) -> mx.array:
        h = self.model(ids, mask)  # (B, L, H)
        for layer in self.head:
            h = layer(h)
        h = h.astype(mx.float32)  # (B, L, dim)
        return h / mx.maximum(mx.sqrt(mx.sum(h * h, axis=-1, keepdims=True)), 1e-12)

    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        b, n = input_ids.shape
        width = -(-n // PAD_WIDTH) * PAD_WIDTH if self.compiled else n
        ids = np.zeros((b, width), np.int32)  # (B, width)
        ids[:, :n] = input_ids
        mask = np.zeros((b, width), bool)  # (B, width), True = attended
        mask[:, :n] = attention_mask.astype(bool)
        out = self._forward(mx.array(ids), mx.array(mask))  # (B, width, dim)
        return np.array(out[:, :n], copy=False)
