"""T5's gated activation and the float8 quantisation of its output in one pass: a Triton kernel
for float8 encoding (``torch_fp8.py``).

Why: in the gated feed-forward block (T5 v1.1, XTR) ``g = [wi_0 x, wi_1 x]`` (N, 2 W) is followed
by ``a = act(g[:, :W]) * g[:, W:]``, and with ``Fp8Linear`` layers ``wo`` quantises ``a`` per row
(amax / 448 scale, float8 e4m3). Inductor compiles the activation and the row amax into a looped
reduction that reads ``g`` twice: 7.7 ms of a ~50 ms xtr-base call of 131K tokens (12 layers, an
H100 profile). Here each program loads its rows of ``g`` once (both halves), computes
``y = act(a) * b`` in float32, rounds it to ``g``'s dtype (``a`` is a tensor of that dtype in the
old path), takes the row's amax and writes ``y / scale`` as float8 and the float32 scale: 8 KB read
and 2 KB written per xtr-base token, ~0.45 ms a layer predicted against ~0.64 (not yet measured).

``gated_act_quant(g, act)`` runs the kernel as a ``torch.library`` custom op (``torch.compile``
keeps it as one opaque call) on CUDA, and in Triton's CPU interpreter under TRITON_INTERPRET=1;
elsewhere ``gated_act_quant_reference``, the same computation in torch. ``act_name`` maps a T5
``DenseReluDense.act`` module to the kernel's activation, or None where the kernel has none (the
caller then runs the unfused path).

Numerics against the path it replaces (``quantize_rows(act(g[:, :W]) * g[:, W:])``): for the same
``y`` the same float32 scales (``amax / 448``) and float8 values (``y / scale``, both quotients
rounded to nearest as torch's are). ``y`` is the activation in float32 rounded once to ``g``'s
dtype, as the reference computes it; the eager old path rounds every intermediate of the
activation to bf16, and Inductor's compiled one rounds none (it elides the bf16 round trip of
``a``; it also divides with Triton's approximate ``/``), so neither matches the kernel bit for bit:
the three agree to float8's resolution, a value now and then one float8 step apart.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from supergrep.backends.torch_fp8 import FP8, FP8_MAX, quantize_rows

try:  # CUDA builds of torch ship Triton; elsewhere (macOS, CPU-only installs) the reference runs
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the installation
    triton = None

# The kernel's activations (its ACT constexpr), by the name ``act_name`` gives them
ACTS = {"gelu_tanh": 0, "gelu": 1, "relu": 2}


def act_name(act: nn.Module) -> str | None:
    """The kernel's name for the activation module ``act`` (a T5 ``DenseReluDense.act``):
    "gelu_tanh" for HF's ``NewGELUActivation`` ("gelu_new", T5 v1.1's and XTR's "gated-gelu") and
    ``GELUTanh`` ("gelu_pytorch_tanh"), "gelu" for ``GELUActivation`` ("gelu", erf), "relu";
    None for anything else (exact types: a subclass may compute something else)."""
    kind = type(act)
    if kind is nn.ReLU:
        return "relu"
    if kind is nn.GELU:
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(act.approximate)
    try:
        from transformers import activations as hf
    except ImportError:  # pragma: no cover - T5 models come from transformers
        return None
    # PytorchGELUTanh: GELUTanh's name in older transformers
    names = ("NewGELUActivation", "GELUTanh", "PytorchGELUTanh")
    if kind in tuple(getattr(hf, n) for n in names if hasattr(hf, n)):
        return "gelu_tanh"
    if kind is getattr(hf, "GELUActivation", None):
        # nn.functional.gelu, or its erf formula in Python (use_gelu_python): both exact
        return "gelu"
    return None


def _act_reference(x: torch.Tensor, act: str) -> torch.Tensor:
    if act == "gelu_tanh":
        return nn.functional.gelu(x, approximate="tanh")
    if act == "gelu":
        return nn.functional.gelu(x)
    if act == "relu":
        return nn.functional.relu(x)
    raise ValueError(f"no gated activation {act!r}; choose from {', '.join(ACTS)}")


def gated_act_quant_reference(g: torch.Tensor, act: str) -> tuple[torch.Tensor, torch.Tensor]:
    """What the kernel computes, in torch: ``y = act(a) * b`` in float32 for ``a, b`` the halves of
    ``g`` (N, 2 W), rounded to g's dtype, then ``quantize_rows(y)``: (y / s as float8 (N, W),
    s = amax / 448 per row (N, 1) float32, 1 for a row of zeros)."""
    width = g.shape[-1] // 2
    y = _act_reference(g[..., :width].float(), act) * g[..., width:].float()
    return quantize_rows(y.to(g.dtype))


if triton is not None:
    _MAX = tl.constexpr(FP8_MAX)  # a global inside @triton.jit must be a constexpr

    @triton.jit
    def gated_act_quant_kernel(
        G,
        XQ,
        XS,
        n_rows,
        width,
        stride_g,
        stride_q,
        ACT: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_W: tl.constexpr,
    ):
        """BLOCK_M rows of g (each 2 * width wide, a then b) -> float8 rows of act(a) * b and their
        float32 scales. One load of each element; masked columns read 0, so act(0) * 0 = 0 adds
        nothing to the amax."""
        rows = tl.program_id(0).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_W)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & (cols < width)[None, :]
        ptrs = G + rows[:, None] * stride_g + cols[None, :]
        a = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(ptrs + width, mask=mask, other=0.0).to(tl.float32)
        if ACT == 0:  # gelu, tanh approximation: 0.5 a (1 + tanh(z)) = a * sigmoid(2 z)
            z = 0.7978845608028654 * (a + 0.044715 * a * a * a)
            h = a / (1.0 + tl.exp(-2.0 * z))  # a large negative a: exp -> inf, h -> -0
        elif ACT == 1:  # gelu, exact (erf)
            h = 0.5 * a * (1.0 + tl.erf(a * 0.7071067811865476))
        else:  # relu
            h = tl.maximum(a, 0.0)
        # rounded to g's dtype, as the old path's `a` (a tensor of that dtype) is
        y = (h * b).to(G.dtype.element_ty).to(tl.float32)
        amax = tl.max(tl.abs(y), axis=1)
        scale = tl.where(amax > 0, tl.div_rn(amax, tl.full(amax.shape, _MAX, tl.float32)), 1.0)
        # y / scale rounded to nearest, as torch divides (a float8 value depends on it: a bf16 y
        # over s often lies within a float32 ulp of a float8 midpoint), without a division an
        # element (~9 instructions on sm_90): q = y * (1 / s), then one residual step, exact for
        # a correctly rounded 1 / s (Markstein) while |y / s| <= 448 and s is normal
        inv = tl.div_rn(tl.full(scale.shape, 1.0, tl.float32), scale)[:, None]
        s = scale[:, None]
        q = y * inv
        q = tl.fma(tl.fma(-q, s, y), inv, q)
        q = tl.minimum(tl.maximum(q, -_MAX), _MAX)
        tl.store(XQ + rows[:, None] * stride_q + cols[None, :], q.to(tl.float8e4nv), mask=mask)
        tl.store(XS + rows, scale, mask=row_ok)


def kernel_options(block_w: int) -> tuple[int, int]:
    """(rows per program, warps): ~2048 columns a program (one xtr-base row), 8 warps from 2048
    elements; ``SUPERGREP_GATED_QUANT=rows,warps`` overrides, for a sweep on a GPU (none measured
    yet; 8 warps is what Inductor picks for a 2048-wide persistent reduction). Compiled offline for
    sm_90 at xtr-base's width: 128-bit loads, ~330 instructions a thread a row (gelu_tanh; ~460
    with erf), ~0.35 ms a layer of 131K tokens at the H100's issue rate, under the ~0.45 ms its
    memory traffic takes."""
    env = os.environ.get("SUPERGREP_GATED_QUANT")
    if env:
        rows, warps = (int(x) for x in env.split(","))
        if rows < 1 or rows & (rows - 1):
            raise ValueError(f"SUPERGREP_GATED_QUANT={env!r}: rows must be a power of two")
        return rows, warps
    rows = max(1, 2048 // block_w)
    return rows, 8 if rows * block_w >= 2048 else 4


def launch(g: torch.Tensor, act: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel on ``g`` (N, 2 W): (xq (N, W) float8 e4m3, xs (N, 1) float32)."""
    if g.stride(-1) != 1:  # any row stride is fine; the columns must be contiguous
        g = g.contiguous()
    n, width = g.shape[0], g.shape[1] // 2
    xq = torch.empty((n, width), dtype=FP8, device=g.device)
    xs = torch.empty((n, 1), dtype=torch.float32, device=g.device)
    if n == 0:
        return xq, xs
    block_w = triton.next_power_of_2(width)
    rows, warps = kernel_options(block_w)
    args = (g, xq, xs, n, width, g.stride(0), xq.stride(0))
    meta = dict(ACT=ACTS[act], BLOCK_M=rows, BLOCK_W=block_w, num_warps=warps)
    gated_act_quant_kernel[(triton.cdiv(n, rows),)](*args, **meta)
    return xq, xs


@torch.library.custom_op("supergrep::gated_act_quant", mutates_args=())
def _gated_act_quant(g: torch.Tensor, act: str) -> tuple[torch.Tensor, torch.Tensor]:
    return launch(g, act)


@_gated_act_quant.register_fake
def _(g, act):
    n, width = g.shape[0], g.shape[1] // 2
    return g.new_empty((n, width), dtype=FP8), g.new_empty((n, 1), dtype=torch.float32)


def gated_act_quant(g: torch.Tensor, act: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize_rows(act(g[:, :W]) * g[:, W:])`` for ``g`` (N, 2 W) in one pass: (xq (N, W)
    float8 e4m3, xs (N, 1) float32 scales), ready for ``torch_fp8.fp8_linear_quantized``.
    ``act``: a name of ``ACTS`` (``act_name``). The Triton kernel on CUDA (and in Triton's CPU
    interpreter under TRITON_INTERPRET=1); elsewhere the reference. Inference only (no gradient)."""
    if act not in ACTS:
        raise ValueError(f"no gated activation {act!r}; choose from {', '.join(ACTS)}")
    if g.dim() != 2 or g.shape[1] % 2:
        raise ValueError(f"g must be (N, 2 W), not {tuple(g.shape)}")
    if triton is not None and (g.is_cuda or os.environ.get("TRITON_INTERPRET") == "1"):
        return _gated_act_quant(g, act)
    return gated_act_quant_reference(g, act)
