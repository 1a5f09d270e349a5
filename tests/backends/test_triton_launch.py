"""CachedKernel (backends/triton_launch.py): a hit launches the kernel Triton compiled for the same
specialisation, with the arguments in signature order; anything Triton specialises on misses."""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from supergrep.backends import triton_launch  # noqa: E402
from supergrep.backends.triton_launch import CachedKernel, arg_key  # noqa: E402


class FakeCompiled:
    function, packed_metadata = "fn", "meta"

    def __init__(self):
        self.calls = []

    def run(self, *a):
        self.calls.append(a)


class FakeJit:
    """Stands in for a JITFunction: kernel[grid](...) 'compiles' (a new object per call) and launches."""

    arg_names = ["X", "n", "scale", "BLOCK", "FLAG"]

    def __init__(self):
        self.jit_launches = []

    def __getitem__(self, grid):
        def launch(*args, **meta):
            self.jit_launches.append((grid, args, meta))
            return FakeCompiled()
        return launch


@pytest.fixture
def kernel(monkeypatch):
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 0, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda dev: 1234, raising=False)
    monkeypatch.setattr(triton_launch, "ENABLED", True)
    k = CachedKernel(FakeJit())
    k.jit = True  # the fake is not a JITFunction
    return k


def test_hit_calls_the_compiled_launcher_in_signature_order(kernel):
    x = torch.zeros(64, dtype=torch.bfloat16)
    first = kernel[(4, 2)](x, 32, 0.5, BLOCK=64, FLAG=True, num_warps=4)
    assert kernel.misses == 1 and not first.calls
    again = kernel[(5,)](x, 48, 0.25, BLOCK=64, FLAG=True, num_warps=4)  # 48: still a multiple of 16
    assert again is first and kernel.hits == 1 and len(kernel.kernel.jit_launches) == 1
    assert first.calls == [(5, 1, 1, 1234, "fn", "meta", None, None, None, x, 48, 0.25, 64, True)]


@pytest.mark.parametrize("change", ["misaligned", "int_not_16", "int_one", "int_wide", "dtype", "constexpr", "option"])
def test_what_triton_specialises_on_misses(kernel, change):
    x = torch.zeros(64, dtype=torch.bfloat16)
    args, meta = [x, 32, 0.5], dict(BLOCK=64, FLAG=True, num_warps=4)
    kernel[(1,)](*args, **meta)
    if change == "misaligned":
        args[0] = x[1:]  # 2 bytes past a 16-byte boundary
    elif change == "int_not_16":
        args[1] = 33
    elif change == "int_one":
        args[1] = 1
    elif change == "int_wide":
        args[1] = 2 ** 31 + 16
    elif change == "dtype":
        args[0] = x.float()
    elif change == "constexpr":
        meta["BLOCK"] = 128
    else:
        meta["num_warps"] = 8
    kernel[(1,)](*args, **meta)
    assert kernel.misses == 2 and kernel.hits == 0


def test_arg_key_separates_what_triton_separates():
    assert arg_key(16) == arg_key(4096) != arg_key(17) != arg_key(1)
    assert arg_key(17) == arg_key(19)
    assert arg_key(True) != arg_key(1) and arg_key(0.5) == arg_key(2.0)


def test_switched_off_it_is_the_jit_launch(kernel, monkeypatch):
    monkeypatch.setattr(triton_launch, "ENABLED", False)
    x = torch.zeros(64)
    for _ in range(3):
        kernel[(1,)](x, 32, 0.5, BLOCK=64, FLAG=True)
    assert len(kernel.kernel.jit_launches) == 3 and kernel.hits == kernel.misses == 0


def test_a_defaulted_constexpr_is_never_cached(kernel):
    x = torch.zeros(64)
    for _ in range(2):
        kernel[(1,)](x, 32, 0.5, BLOCK=64)  # FLAG left to its default
    assert len(kernel.kernel.jit_launches) == 2 and not kernel.cache
