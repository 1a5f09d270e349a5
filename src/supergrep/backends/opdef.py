"""Our Triton kernels as torch operators with the cheapest dispatch torch offers.

``torch.library.custom_op`` wraps each call in two Python layers (an autograd kernel that walks
the arguments with pytree, a backend kernel that checks the outputs for aliasing): 29-57 us a call
on the GPU machine's host (H200 box, ``benchmarks/results/cpp-wrapper-2026-11-28/launch.json``), on
~47 calls a training step that is already waiting on its host. Defined here with
``torch.library.Library`` instead, the dispatcher goes from C++ straight to our Python function
(the autograd key falls through to torch's C++ fallback): 4.4 vs 11.6 us a call with an empty
body on this repository's 2-core CPU (``benchmarks/launch_overhead.py --device cpu``). Autograd,
where an op needs it, is a ``torch.autograd.Function`` at the call site, which ``torch.compile``
traces into the joint graph like any other; the compiled graphs then call the bare operators.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

_LIBS: dict[str, torch.library.Library] = {}


def define_op(qualname: str, schema: str, impl: Callable, fake: Callable) -> torch._ops.OpOverload:
    """Define ``qualname`` ("ns::name") with ``schema`` (the part after the name, e.g.
    ``"(Tensor x, SymInt n) -> (Tensor, Tensor)"``), ``impl`` for every backend and ``fake`` for
    tracing (shapes and dtypes only). Returns the op's default overload (calling it skips the
    overload packet's resolution). Outputs must be new tensors (no views of the inputs)."""
    ns, name = qualname.split("::")
    lib = _LIBS.get(ns)
    if lib is None:
        lib = _LIBS[ns] = torch.library.Library(ns, "FRAGMENT")
    lib.define(name + schema)
    lib.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(qualname, fake, lib=lib)
    return getattr(getattr(torch.ops, ns), name).default
