"""``torch.compile`` as supergrep's compiled paths use it (the training step and index-time encoding)."""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)


def resolve_compile_mode(mode: str, device: torch.device) -> str | None:
    """The train config's ``compile_mode`` as ``compile_dynamic`` takes it: "auto" is Inductor's
    C++ wrapper on CUDA (1.19x the Python wrapper's samples/s for xtr-base batch 192 on an H200,
    docs/performance.md #38) and the default mode elsewhere; "default" is None."""
    if mode == "auto":
        return "cpp-wrapper" if torch.device(device).type == "cuda" else None
    return None if mode == "default" else mode


class _CppWrapperOrPython:
    """A function compiled with Inductor's C++ wrapper that falls back to the Python wrapper (with
    a warning, once) when the C++ wrapper does not build here: no C++ compiler or CUDA headers.
    Only the forward graph compiles inside the call; a backward that fails later still raises."""

    def __init__(self, fn, backend):
        self.fn, self.backend = fn, backend
        self.impl = _patched(torch.compile(fn, dynamic=True, backend=backend, options={"cpp_wrapper": True}))
        self.fallen_back = False

    def __call__(self, *args, **kwargs):
        try:
            return self.impl(*args, **kwargs)
        except torch._dynamo.exc.BackendCompilerFailed as e:
            if self.fallen_back:
                raise
            log.warning("Inductor's C++ wrapper did not build (%s); compiling with the Python wrapper instead "
                        "(train config compile_mode: default skips the attempt)", str(e).splitlines()[0][:200])
            self.fallen_back = True
            self.impl = _patched(torch.compile(self.fn, dynamic=True, backend=self.backend))
            return self.impl(*args, **kwargs)


def bind_autograd_thread_context(device: torch.device) -> None:
    """Make the CUDA context current on the autograd engine's worker thread for ``device``.

    Inductor's C++ wrapper launches its kernels with the CUDA driver API, which needs a context
    current on the calling thread; the compiled backward runs on the autograd engine's device
    thread, where nothing has made one current if no eager CUDA kernel ran there before (torch
    2.11, H200: "CUDA driver error: invalid device context" in the first backward when the C++
    wrapper was on from the start). One tiny eager backward on the device runs a runtime-API
    kernel on that thread, which binds the primary context; the thread lives as long as the
    process."""
    device = torch.device(device)
    if device.type != "cuda":
        return
    x = torch.ones(1, device=device, requires_grad=True)
    y = x * 2.0
    y.register_hook(lambda g: torch.cuda.current_stream(g.device).query() and None)  # runs on that thread
    y.sum().backward()


def _patched(compiled):
    return torch._dynamo.config.patch(specialize_float=True)(compiled)


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
    step on the GPU machine's host, docs/performance.md #38): 1.19x the training step's
    samples/s on an H200; the first compile takes minutes longer; falls back to the Python
    wrapper where it does not build."""
    if mode == "cpp-wrapper":
        return _CppWrapperOrPython(fn, backend)
    return _patched(torch.compile(fn, dynamic=True, mode=mode, backend=backend))
