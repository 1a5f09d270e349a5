"""PyTorch + Hugging Face transformers backend (CUDA, Apple MPS or CPU)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from supergrep.errors import ModelError, UsageError

if TYPE_CHECKING:
    from supergrep.encoder.spec import DenseSpec, ModelSpec

log = logging.getLogger(__name__)

# Models come from local directories only: never let transformers reach for the Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

T5_TYPES = {"t5", "mt5", "umt5", "t5gemma"}


def pick_device(device: str = "auto") -> str:
    """CUDA > MPS > CPU for "auto"; otherwise validate the requested device."""
    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return "mps"
        return "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {device} requested but CUDA is not available; use --device cpu")
    if device == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise UsageError("--device mps requested but MPS is not available; use --device cpu")
    if device != "cpu" and not device.startswith("cuda") and device != "mps":
        raise UsageError(f"unknown device '{device}'; use auto, cpu, cuda, cuda:N or mps")
    return device


def pick_dtype(device: str) -> torch.dtype:
    """fp32 on CPU (fp16 matmuls there are slow and lossy); bf16 on GPUs that have it, else fp16."""
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device == "mps":
        return torch.float16
    return torch.float32


def load_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """Weights from safetensors, or a legacy .bin without unpickling arbitrary objects."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(str(path), map_location="cpu", weights_only=True)


def build_dense(d: DenseSpec) -> torch.nn.Module:
    """A sentence-transformers Dense layer (``linear.weight``, optional ``linear.bias``, activation)."""
    state = load_state_dict(d.weight_file())
    weight = state.get("linear.weight", state.get("weight"))
    if weight is None or tuple(weight.shape) != (d.out_features, d.in_features):
        shape = None if weight is None else tuple(weight.shape)
        raise ModelError(
            f"{d.path}: Dense weight has shape {shape}, expected ({d.out_features}, {d.in_features})"
        )
    linear = torch.nn.Linear(d.in_features, d.out_features, bias=d.bias)
    with torch.no_grad():
        linear.weight.copy_(weight)
        if d.bias:
            bias = state.get("linear.bias", state.get("bias"))
            if bias is None:
                raise ModelError(f"{d.path}: Dense config says bias=true but the weights have none")
            linear.bias.copy_(bias)
    if d.activation == "identity":
        return linear
    act = getattr(torch.nn, d.activation, None)
    if act is None:
        raise ModelError(f"{d.path}: unsupported Dense activation '{d.activation}'")
    return torch.nn.Sequential(linear, act())


def load_transformer(spec: ModelSpec, dtype: torch.dtype) -> torch.nn.Module:
    """The base encoder; for T5-family models only the encoder stack is loaded."""
    import transformers

    kwargs = {"local_files_only": True, "dtype": dtype}
    path = str(spec.transformer_path)
    try:
        if spec.model_type in T5_TYPES:
            return transformers.T5EncoderModel.from_pretrained(path, **kwargs)
        try:
            return transformers.AutoModel.from_pretrained(path, attn_implementation="sdpa", **kwargs)
        except (ValueError, ImportError):  # architectures without SDPA support
            return transformers.AutoModel.from_pretrained(path, **kwargs)
    except OSError as exc:
        raise ModelError(f"cannot load the model in {path}: {exc}") from None


class TorchBackend:
    name = "torch"

    def __init__(self, spec: ModelSpec, device: str = "auto", threads: int = 0):
        if threads > 0:
            torch.set_num_threads(threads)
        self.device = pick_device(device)
        self._dtype = pick_dtype(self.device)
        self.dtype = str(self._dtype).removeprefix("torch.")
        self.model = load_transformer(spec, self._dtype).to(self.device).eval()
        layers = [build_dense(d) for d in spec.dense]
        self.head = torch.nn.Sequential(*layers).to(self.device, self._dtype).eval()
        self.dim = spec.dim

    @torch.inference_mode()
    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        ids = torch.from_numpy(np.ascontiguousarray(input_ids, dtype=np.int64)).to(self.device)
        mask = torch.from_numpy(np.ascontiguousarray(attention_mask, dtype=np.int64)).to(self.device)
        hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, L, H)
        vecs = self.head(hidden).float()  # (B, L, dim)
        vecs = torch.nn.functional.normalize(vecs, p=2, dim=-1)
        return vecs.cpu().numpy()
