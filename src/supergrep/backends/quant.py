"""Group-wise weight quantization in NumPy: the on-disk format of `supergrep quantize`.

A weight ``W`` of shape ``(rows, cols)`` (a Linear's ``(out, in)`` or an Embedding's
``(vocab, hidden)``) is cut along ``cols`` into groups of ``group_size`` columns (the last
group zero-padded), and every group of every row gets its own scale (and, asymmetric, a zero
point):

- symmetric: ``q = clip(round(w / s), -qmax, qmax)``, ``s = max|w| / qmax``,
  ``qmax = 2**(bits-1) - 1`` (127 for int8, 7 for int4); ``w ~= s * q``;
- asymmetric: ``q = clip(round(w / s) + z, 0, 2**bits - 1)``, ``s = (max - min) / (2**bits - 1)``,
  ``z = round(-min / s)``; ``w ~= s * (q - z)``.

Stored in safetensors, per quantized tensor ``NAME``: ``NAME.qweight`` (int8 ``(rows,
padded_cols)`` for 8 bits; uint8 ``(rows, padded_cols / 2)`` for 4 bits, two values per byte,
low nibble first, stored with an offset of 8 (symmetric) so they are unsigned),
``NAME.scales`` float16 ``(rows, n_groups)`` and, asymmetric, ``NAME.zeros`` uint8
``(rows, n_groups)``. The original shape, bits, group size and symmetry of every tensor are in
the model's ``supergrep_model.json`` (``quantization.tensors``). No framework is imported here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from supergrep.errors import ModelError

QUANT_FILE = "model.quantized.safetensors"
BITS = (4, 8)


@dataclass(frozen=True)
class QuantParams:
    """How one tensor is quantized."""

    bits: int
    group_size: int
    symmetric: bool

    def to_dict(self) -> dict:
        return {"bits": self.bits, "group_size": self.group_size, "symmetric": self.symmetric}


def _groups(w: np.ndarray, group_size: int) -> tuple[np.ndarray, int]:
    """(rows, n_groups, group_size) view of ``w`` zero-padded to whole groups; and the padding."""
    rows, cols = w.shape
    pad = (-cols) % group_size
    if pad:
        w = np.concatenate([w, np.zeros((rows, pad), w.dtype)], axis=1)
    return w.reshape(rows, -1, group_size), pad


def quantize(w: np.ndarray, p: QuantParams) -> dict[str, np.ndarray]:
    """Quantize a 2-D float weight group-wise.

    Args:
        w: (rows, cols) float weight.
        p: Bits (4 or 8), group size (columns per scale) and symmetry.

    Returns:
        {"qweight": ..., "scales": ..., ["zeros": ...]} as described in the module docstring.

    >>> w = np.array([[0.5, -1.0, 0.25, 0.0]], np.float32)
    >>> q = quantize(w, QuantParams(8, 4, True))
    >>> q["qweight"].tolist(), round(float(q["scales"][0, 0]) * 127, 3)  # scale = 1/127 (float16)
    ([[64, -127, 32, 0]], 1.0)
    >>> bool(np.abs(dequantize(q, w.shape, QuantParams(8, 4, True)) - w).max() < 0.004)
    True
    """
    if p.bits not in BITS:
        raise ValueError(f"bits must be 4 or 8, not {p.bits}")
    if p.group_size <= 0 or p.group_size % 2:
        raise ValueError(f"group_size must be a positive even number, not {p.group_size}")
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 2:
        raise ValueError(f"expected a 2-D weight, got shape {w.shape}")
    g, _ = _groups(w, p.group_size)  # (rows, n_groups, group_size)
    out: dict[str, np.ndarray] = {}
    if p.symmetric:
        qmax = 2 ** (p.bits - 1) - 1
        scale = np.abs(g).max(axis=2) / qmax  # (rows, n_groups)
        scale = _storable(scale)
        safe = np.where(scale > 0, scale, 1.0)[..., None]
        q = np.clip(np.rint(g / safe), -qmax, qmax).astype(np.int8)
    else:
        qmax = 2**p.bits - 1
        lo, hi = np.minimum(g.min(axis=2), 0.0), np.maximum(g.max(axis=2), 0.0)  # 0 stays exact
        scale = _storable((hi - lo) / qmax)
        safe = np.where(scale > 0, scale, 1.0)
        zero = np.clip(np.rint(-lo / safe), 0, qmax).astype(np.uint8)  # (rows, n_groups)
        q = np.clip(np.rint(g / safe[..., None]) + zero[..., None], 0, qmax).astype(np.uint8)
        out["zeros"] = zero
    q = q.reshape(w.shape[0], -1)  # (rows, padded_cols)
    out["qweight"] = pack_int4(q, p.symmetric) if p.bits == 4 else q
    out["scales"] = scale.astype(np.float16)
    return out


def _storable(scale: np.ndarray) -> np.ndarray:
    """Scales as they will be stored (float16), so quantizing and dequantizing agree exactly;
    tiny scales are raised to float16's smallest normal rather than flushed to zero."""
    s = scale.astype(np.float32)
    tiny = np.float32(np.finfo(np.float16).tiny)
    s = np.where((s > 0) & (s < tiny), tiny, s)
    return s.astype(np.float16).astype(np.float32)


def dequantize(parts: dict[str, np.ndarray], shape: tuple[int, int], p: QuantParams) -> np.ndarray:
    """The float32 ``(rows, cols)`` weight that ``parts`` (from :func:`quantize`) stands for."""
    rows, cols = shape
    q = parts["qweight"]
    q = unpack_int4(q, p.symmetric) if p.bits == 4 else q
    scale = parts["scales"].astype(np.float32)  # (rows, n_groups)
    n_groups = scale.shape[1]
    if q.shape != (rows, n_groups * p.group_size):
        raise ModelError(f"quantized weight has shape {q.shape}, expected {(rows, n_groups * p.group_size)}")
    g = q.reshape(rows, n_groups, p.group_size).astype(np.float32)
    if not p.symmetric:
        g = g - parts["zeros"].astype(np.float32)[..., None]
    w = (g * scale[..., None]).reshape(rows, -1)
    return np.ascontiguousarray(w[:, :cols])


def pack_int4(q: np.ndarray, symmetric: bool) -> np.ndarray:
    """Two 4-bit values per byte, low nibble first (symmetric values stored with offset 8).

    >>> pack_int4(np.array([[1, -2, 7, -7]], np.int8), True).tolist()  # 9 | 6 << 4, 15 | 1 << 4
    [[105, 31]]
    >>> unpack_int4(pack_int4(np.array([[1, -2, 7, -7]], np.int8), True), True).tolist()
    [[1, -2, 7, -7]]
    """
    u = (q.astype(np.int16) + (8 if symmetric else 0)).astype(np.uint8)
    if u.shape[-1] % 2:
        raise ValueError("4-bit packing needs an even number of columns")
    return (u[..., 0::2] & 0x0F) | ((u[..., 1::2] & 0x0F) << 4)


def unpack_int4(packed: np.ndarray, symmetric: bool) -> np.ndarray:
    """Inverse of :func:`pack_int4`: int8 (symmetric) or uint8 values."""
    lo = packed & 0x0F
    hi = packed >> 4
    u = np.stack([lo, hi], axis=-1).reshape(*packed.shape[:-1], -1)
    if symmetric:
        return (u.astype(np.int16) - 8).astype(np.int8)
    return u.astype(np.uint8)


def load_dequantized(path, tensors: dict[str, dict]) -> dict[str, np.ndarray]:
    """Every tensor of a quantized safetensors file as float32 NumPy arrays.

    Args:
        path: The ``model.quantized.safetensors`` file.
        tensors: ``quantization.tensors`` from ``supergrep_model.json``: name -> {"shape",
            "bits", "group_size", "symmetric"} for each quantized tensor; every other tensor in
            the file is stored as it is.

    Raises:
        ModelError: the file is missing, unreadable or does not match the record.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        raw = load_file(str(path))
    except FileNotFoundError:
        raise ModelError(f"{path} is missing; the quantized model directory is incomplete") from None
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelError(f"{path}: cannot be read ({exc}); quantize the model again") from None
    out: dict[str, np.ndarray] = {}
    for name, meta in tensors.items():
        parts = {k: raw.pop(f"{name}.{k}") for k in ("qweight", "scales", "zeros") if f"{name}.{k}" in raw}
        if "qweight" not in parts or "scales" not in parts:
            raise ModelError(f"{path}: no quantized weights for {name}; quantize the model again")
        p = QuantParams(int(meta["bits"]), int(meta["group_size"]), bool(meta["symmetric"]))
        out[name] = dequantize(parts, tuple(meta["shape"]), p)
    for name, value in raw.items():
        if name.endswith((".qweight", ".scales", ".zeros")):
            raise ModelError(f"{path}: {name} is not in the model's quantization record")
        out[name] = value.astype(np.float32) if value.dtype == np.float16 else value
    return out
