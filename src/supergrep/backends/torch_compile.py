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


def triton_kernel_op(name: str, fake):
    """Register ``fn`` (which launches Triton kernels through ``torch.library.wrap_triton``) as
    the operator ``name``: a ``torch.library.triton_op``, so that a compiled graph sees through it
    to the kernels and launches them from Inductor's own wrapper code (a custom op's Python
    dispatch and Triton's launcher cost 0.2-0.3 ms of host time a call in a training step that
    waits on the host: H200 traces, ``benchmarks/results/gated-gelu-2026-11-28/``). Under
    Triton's CPU interpreter (``TRITON_INTERPRET=1``, tests) its kernels cannot be traced, so
    there it is an opaque ``custom_op`` with ``fake`` as its shape function."""
    import os

    def register(fn):
        if os.environ.get("TRITON_INTERPRET") == "1":
            op = torch.library.custom_op(name, mutates_args=())(fn)
            op.register_fake(fake)
            return op
        return torch.library.triton_op(name, mutates_args=())(fn)

    return register
