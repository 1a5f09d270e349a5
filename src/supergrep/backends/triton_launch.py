"""Our Triton kernels launched without Triton's per-call binder.

``kernel[grid](*args, **meta)`` runs Triton's JIT dispatch on every call: the current device, the
binder that specialises each argument, a string cache key, a dict lookup, the launch metadata and
hook chains, then the compiled launcher. On the GPU machine's host that is 19-34 us a launch
(``benchmarks/results/cpp-wrapper-2026-11-28/launch.json``) for ~60 launches a training step that
waits on its host. ``CachedKernel`` keeps each compiled kernel under a key of its own, computed
from the same properties Triton specialises on (each tensor's dtype and 16-byte alignment; each
integer's ==1, divisibility by 16 and width; the constexprs and options), and calls the compiled
launcher directly. The key is at least as fine as Triton's, so a hit always finds the kernel
Triton would have chosen; a miss goes through ``kernel[grid]`` and stores what it compiled.

Off with ``SUPERGREP_TRITON_LAUNCH=jit`` (or ``triton_launch.ENABLED = False`` at run time: the
benchmarks' A/B switch); Triton's interpreter, and launch hooks (Proton), always take the JIT path.
"""

from __future__ import annotations

import os

import torch
import triton

ENABLED = os.environ.get("SUPERGREP_TRITON_LAUNCH", "cached").strip().lower() != "jit"


def _int_key(v: int) -> int:
    # Triton: 1 becomes a constant, multiples of 16 an alignment hint, the width i32 / i64 / u64
    spec = 1 if v == 1 else (2 if v % 16 == 0 else 0)
    width = 0 if -0x80000000 <= v < 0x80000000 else (4 if -0x8000000000000000 <= v < 0x8000000000000000 else 8)
    return spec + width


def arg_key(a) -> object:
    """What Triton's specialisation of one argument depends on (or finer)."""
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.data_ptr() % 16 == 0)
    if isinstance(a, bool):
        return ("b", a)
    if isinstance(a, int):
        return _int_key(a)
    if isinstance(a, float):
        return "f"
    return ("o", a)  # None, strings, dtypes: by value


def _hooks_active() -> bool:
    rt = triton.knobs.runtime if hasattr(triton, "knobs") else None
    if rt is None:
        return False
    for hook in (getattr(rt, "launch_enter_hook", None), getattr(rt, "launch_exit_hook", None)):
        if hook is not None and getattr(hook, "calls", True):  # a HookChain (triton 3.5+) is empty by default
            return True
    return False


class CachedKernel:
    """``CachedKernel(kernel)[grid](*args, **meta)`` launches like ``kernel[grid](*args, **meta)``;
    ``meta`` holds every constexpr the positional ``args`` do not (and options such as
    ``num_warps``), always passed by name in the same order at a call site."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.jit = isinstance(kernel, triton.runtime.jit.JITFunction)  # not Triton's interpreter
        self.names = list(getattr(kernel, "arg_names", ()))
        self.cache: dict = {}
        self.hits = self.misses = 0

    def __getitem__(self, grid):
        return lambda *args, **meta: self.launch(grid, args, meta)

    def launch(self, grid: tuple, args: tuple, meta: dict):
        if not (ENABLED and self.jit) or _hooks_active():
            return self.kernel[grid](*args, **meta)
        device = torch._C._cuda_getDevice()  # Triton launches on the current device's current stream
        key = (device, tuple(meta.items()), *map(arg_key, args))
        entry = self.cache.get(key)
        if entry is None:
            self.misses += 1
            compiled = self.kernel[grid](*args, **meta)
            rest = self.names[len(args):]
            if compiled is not None and all(n in meta for n in rest):  # a defaulted constexpr: JIT every time
                self.cache[key] = (compiled, tuple(meta[n] for n in rest))
            return compiled
        self.hits += 1
        compiled, tail = entry
        g0 = grid[0]
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        stream = torch._C._cuda_getCurrentRawStream(device)
        compiled.run(g0, g1, g2, stream, compiled.function, compiled.packed_metadata, None, None, None, *args, *tail)
        return compiled
