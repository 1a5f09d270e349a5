"""Large array casts and copies on the host: ``cast`` through torch when it is already loaded,
``pack`` (stack + cast) spread over threads.

NumPy casts float32 <-> float16 with scalar code on x86 (5-9 ns a value on the machines we
measured) and copies with one thread. In a GPU ``index`` run of 216K lines (H100 machine, MiniLM)
the store's float32 -> float16 cast alone took 6.3 s of 24 s
(benchmarks/results/gpu-h100-2026-11-24b-hostcopy/). torch's CPU kernels are vectorised and
multi-threaded and give the same bits (round to nearest even). torch is only used when something
else (a torch encoder) has imported it: importing it here would add seconds to a search or an
ONNX index run whose arrays are small anyway.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# Below this many values NumPy is fast enough and torch's dispatch is not worth it.
TORCH_FROM = 1 << 16

_TORCH_DTYPES = ("float16", "float32")  # the same names in NumPy and torch
# pack() without torch: at least this many values before its copies are spread over threads
# (NumPy releases the GIL inside each copy/cast loop).
THREADS_FROM = 1 << 20
_WORKERS = min(8, os.cpu_count() or 1)
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


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


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="sg-pack")
        return _POOL


def pack(parts: Sequence[np.ndarray], dtype, dim: int) -> np.ndarray:
    """The rows of ``parts`` (each (n_i, dim)) stacked into one new C-contiguous (sum n_i, dim)
    array of ``dtype``: ``np.concatenate(parts).astype(dtype)`` in one pass, with the same bits.

    The index stores each batch's vectors this way (``SegmentStore``): stacking first and
    casting after wrote and read the float32 batch once more, into a fresh array of up to ~1 GB
    (on the 2-core machine that concatenate took 3x the cast). Here each part is cast straight
    into its rows of the output, the parts spread over up to 8 threads (NumPy releases the GIL
    in its copy loops). Not through torch: ``torch.cat`` into a float16 output was slower than
    the old concatenate + cast on the GPU machine's 16 cores (5.2-5.8 s against 2.9-3.0 s for a
    whole index of torch/_inductor, docs/performance.md).

    >>> pack([np.ones((2, 3), np.float32), np.zeros((1, 3), np.float32)], np.float16, 3).tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    """
    dtype = np.dtype(dtype)
    for p in parts:
        if p.ndim != 2 or p.shape[1] != dim:
            raise ValueError(f"vectors have shape {p.shape}, the index stores (n, {dim})")
    rows = [len(p) for p in parts]
    n = sum(rows)
    out = np.empty((n, dim), dtype)
    if n == 0:
        return out
    starts = np.concatenate([[0], np.cumsum(rows)]).tolist()

    def copy(first: int, last: int) -> None:
        for i in range(first, last):
            np.copyto(out[starts[i]:starts[i + 1]], parts[i], casting="unsafe")

    if n * dim < THREADS_FROM or _WORKERS < 2 or len(parts) < 2:
        copy(0, len(parts))
        return out
    # contiguous runs of parts with about the same number of rows each
    cuts = np.searchsorted(np.asarray(starts), np.linspace(0, n, _WORKERS + 1)).tolist()
    cuts[0], cuts[-1] = 0, len(parts)
    jobs = [_pool().submit(copy, a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]
    for job in jobs:
        job.result()
    return out


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_MALLOC_TUNED: list[bool] = []


def tune_malloc_for_serving() -> bool:
    """glibc only: serve a search's multi-megabyte temporaries from the heap, not fresh mmaps.

    glibc hands every allocation above 128 KiB to mmap and back to the kernel on free (its
    threshold adapts upwards only after such a block is freed), so each query of a fresh search
    process page-faulted its gathers and score arrays in anew: on a 100K-chunk compressed index
    p50 14.3-21.8 ms against 10.0-13.7 ms with the blocks kept (bench search, alternated;
    docs/benchmarks.md, "Page faults"). Long-lived searching processes (the daemon and ``bench
    search``) call this once: blocks up to 32 MiB (glibc's maximum) come from the
    heap, and up to 128 MiB of freed heap stays mapped for the next query. Returns whether it
    applied (not on macOS or musl)."""
    if _MALLOC_TUNED:
        return _MALLOC_TUNED[0]
    ok = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            mallopt = ctypes.CDLL(None).mallopt
            ok = bool(mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(_M_TRIM_THRESHOLD, 128 << 20))
        except (OSError, AttributeError):
            ok = False
    _MALLOC_TUNED.append(ok)
    return ok
