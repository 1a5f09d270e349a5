"""Large array casts and copies on the host, through torch when it is already loaded.

NumPy casts float32 <-> float16 with scalar code on x86 (5-9 ns a value on the machines we
measured) and copies with one thread. In a GPU ``index`` run of 216K lines (H100 machine, MiniLM)
the store's float32 -> float16 cast alone took 6.3 s of 24 s
(benchmarks/results/gpu-h100-2026-11-24b-hostcopy/). torch's CPU kernels are vectorised and
multi-threaded and give the same bits (round to nearest even). torch is only used when something
else (a torch encoder) has imported it: importing it here would add seconds to a search or an
ONNX index run whose arrays are small anyway.
"""

from __future__ import annotations

import sys

import numpy as np

# Below this many values NumPy is fast enough and torch's dispatch is not worth it.
TORCH_FROM = 1 << 16

_TORCH_DTYPES = ("float16", "float32")  # the same names in NumPy and torch


def cast(x: np.ndarray, dtype) -> np.ndarray:
    """A C-contiguous copy of ``x`` as ``dtype`` (always a new array, never a view of ``x``).

    >>> cast(np.array([1.0, 65520.0, 1e-8], np.float32), np.float16).tolist()
    [1.0, inf, 0.0]
    """
    dtype = np.dtype(dtype)
    torch = sys.modules.get("torch")
    if (torch is None or dtype.name not in _TORCH_DTYPES or x.dtype.name not in _TORCH_DTYPES or x.size < TORCH_FROM
            or not x.flags.writeable or not hasattr(torch, "from_numpy")):  # torch warns on read-only arrays
        return np.array(x, dtype=dtype, order="C")
    src = torch.from_numpy(np.ascontiguousarray(x))
    return src.to(getattr(torch, dtype.name), copy=True).numpy()
