"""``torch.compile`` as supergrep's compiled paths use it (the training step and index-time encoding)."""

from __future__ import annotations

import torch


def compile_dynamic(fn, mode: str | None = None, backend="inductor"):
    """``torch.compile(fn, dynamic=True)`` with Python floats specialised (Dynamo's
    ``specialize_float``, off by default in torch 2.11) for ``fn`` alone. Unspecialised, floats
    such as the loss's temperature and margin or an attention scale enter the graph as 0-d CPU
    tensors: the backward copies them through a CPU kernel each step, and under CUDA graphs that
    backward segfaulted reading them (torch 2.11, H100: ``benchmarks/cudagraph_probe.py``). They
    are constants of a run, so specialising costs no recompiles. Only the token counts (and the
    other sizes) stay dynamic.

    ``mode``: torch.compile's, or "cpp-wrapper": the default mode with Inductor's C++ wrapper
    (``cpp_wrapper``: the compiled graph's kernel launches and allocations run in generated C++
    instead of generated Python; the training step's ~1,200 launches cost ~23 ms of Python a
    step on the GPU machine's host, docs/performance.md #38). Longer first compiles."""
    if mode == "cpp-wrapper":
        compiled = torch.compile(fn, dynamic=True, backend=backend, options={"cpp_wrapper": True})
    else:
        compiled = torch.compile(fn, dynamic=True, mode=mode, backend=backend)
    return torch._dynamo.config.patch(specialize_float=True)(compiled)
