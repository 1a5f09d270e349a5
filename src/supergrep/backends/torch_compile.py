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
    other sizes) stay dynamic."""
    compiled = torch.compile(fn, dynamic=True, mode=mode, backend=backend)
    return torch._dynamo.config.patch(specialize_float=True)(compiled)
