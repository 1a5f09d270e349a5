"""Float8 (e4m3) matrix products for index-time encoding on GPUs that have them (compute
capability 8.9+: Ada, Hopper).

Why: after the float32 vectors moved to the GPU, xtr-base encoding is bound by the GPU (busy 97%,
50.9% MFU against the bf16 GEMM peak), and its bf16 GEMMs are about half of the GPU time. An
H100's float8 tensor cores do twice the bf16 rate, so the same products in float8 can take about
half as long. Inference only: the weights are quantised once (a scale per output row) and each
projection's input per token (a scale per row, computed on the fly), so a token's vectors do not
depend on the other tokens of the batch. The result is a product of bf16 accuracy over float8
inputs; how far the vectors move is measured (`bench encode --modes varlen+compile,varlen+compile+fp8`
reports the cosine to the bf16 vectors), not assumed.

``enable_fp8(model)`` swaps the encoder's ``nn.Linear`` layers for ``Fp8Linear`` in place and
returns a handle whose ``restore()`` puts the originals back (``bench encode`` compares both in
one process). Two knobs (``Fp8Options``), both measured against the default in ``bench encode``:
``scaling="tensor"`` (one scale per weight group and per input tensor: cuBLAS's tensor-scaled
kernels instead of the row-scaled one, but a token's vector then depends on the batch's largest
activation; measured slower end to end, its whole-tensor amax costs a pass of its own) and
``fast_accum`` (the float8 tensor cores' own accumulation, without the periodic promotion to
float32: on by default, 1.05x end to end on an H100 with the same cosines to bf16). ``project`` in ``torch_t5_varlen.py`` runs the projections that share an input
(q, k, v; wi_0, wi_1) as one float8 product over the stacked weights, with the input quantised once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn

from supergrep.backends.opdef import define_op

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # the largest finite e4m3fn value


@dataclass(frozen=True)
class Fp8Options:
    """How the float8 products scale and accumulate. ``scaling``: "row" (a scale per weight row and
    per input token; the default) or "tensor" (one per weight group and per input tensor);
    ``fast_accum``: accumulate in the tensor cores' own precision (faster; no measured change in
    the vectors' cosine to bf16)."""

    scaling: str = "row"
    fast_accum: bool = True

    def __post_init__(self):
        if self.scaling not in ("row", "tensor"):
            raise ValueError(f"float8 scaling must be 'row' or 'tensor', not {self.scaling!r}")

    @classmethod
    def from_env(cls) -> Fp8Options:
        """``SUPERGREP_ENCODE_FP8_SCALING=row|tensor``, ``SUPERGREP_ENCODE_FP8_FAST_ACCUM=0|1`` (1)."""
        from supergrep.errors import ConfigError

        fast = os.environ.get("SUPERGREP_ENCODE_FP8_FAST_ACCUM", "1").strip().lower() not in ("0", "false", "no", "off")
        scaling = os.environ.get("SUPERGREP_ENCODE_FP8_SCALING", "row").strip().lower() or "row"
        if scaling not in ("row", "tensor"):
            raise ConfigError(f"SUPERGREP_ENCODE_FP8_SCALING={scaling!r}: set it to 'row' or 'tensor' (or unset it)")
        return cls(scaling, fast)


def fp8_supported(device: torch.device | str) -> bool:
    """Whether ``device`` has float8 tensor cores (CUDA compute capability >= 8.9)."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(device) >= (8, 9)


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(x / s) in float8 and s = amax / 448 per row, float32 (rows of zeros get s = 1)."""
    x = x.float()
    amax = x.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    return (x / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def _triton_quant() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _use_triton(t: torch.Tensor) -> bool:
    """Whether our ops run their Triton kernels for ``t``: on CUDA, or on a CPU under Triton's
    interpreter (the tests); elsewhere their torch forms."""
    return (t.is_cuda or os.environ.get("TRITON_INTERPRET") == "1") and _triton_quant()


def _quantize_rows_impl(x):
    if _use_triton(x):
        from supergrep.backends import triton_fp8_quant

        return triton_fp8_quant.quantize_rows(x)
    q, s = quantize_rows(x)
    return q.contiguous(), s


def _quantize_rows_fake(x):
    return x.new_empty(x.shape, dtype=FP8), x.new_empty((x.shape[0], 1), dtype=torch.float32)


# a bare operator (opdef.py: the dispatcher calls the Python directly, no custom_op wrappers)
_quantize_rows_op = define_op("supergrep::fp8_quantize_rows", "(Tensor x) -> (Tensor, Tensor)", _quantize_rows_impl,
                              _quantize_rows_fake)


def quantize_rows_op(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``quantize_rows`` of a 2-D ``x`` as one opaque op (Triton's kernel on CUDA, ``quantize_rows``
    elsewhere): a compiled graph materialises x and the kernel quantises it in one read, where
    Inductor would fuse the quantisation into x's producer (``triton_fp8_quant.py`` says when
    that is faster). No autograd: for detached inputs and gradients."""
    return _quantize_rows_op(x)


GELU_K0, GELU_K1 = 0.7978845608028654, 0.044715  # sqrt(2 / pi) and the cubic term of tanh-GELU


def gated_gelu(h: torch.Tensor, width: int) -> torch.Tensor:
    """``gelu_tanh(h[:, :width]) * h[:, width:2 * width]`` (T5 v1.1's gated feed-forward, HF's
    ``gelu_new``), computed in float32 and returned in h's dtype."""
    a, b = h[..., :width].float(), h[..., width:2 * width].float()
    return (0.5 * a * (1.0 + torch.tanh(GELU_K0 * (a + GELU_K1 * a * a * a))) * b).to(h.dtype)


def gated_gelu_backward(h: torch.Tensor, d: torch.Tensor, width: int) -> torch.Tensor:
    """The gradient of ``gated_gelu(h, width)`` w.r.t. h[:, :2 * width] for the upstream gradient
    ``d``: (N, 2 * width) in h's dtype, computed in float32."""
    a, b, d = h[:, :width].float(), h[:, width:2 * width].float(), d.float()
    t = torch.tanh(GELU_K0 * (a + GELU_K1 * a * a * a))
    dgelu = 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * GELU_K0 * (1.0 + 3.0 * GELU_K1 * a * a)
    return torch.cat([d * b * dgelu, d * 0.5 * a * (1.0 + t)], dim=1).to(h.dtype)


def _gated_gelu_bwd_impl(h, d, width):
    if _use_triton(h):
        from supergrep.backends import triton_gated_gelu

        return triton_gated_gelu.gated_gelu_backward_fp8(h, d, width)
    g = gated_gelu_backward(h, d, width)
    q, s = quantize_rows(g)
    return g, q.contiguous(), s


def _gated_gelu_bwd_fake(h, d, width):
    n = h.shape[0]
    return (h.new_empty((n, 2 * width)), h.new_empty((n, 2 * width), dtype=FP8),
            h.new_empty((n, 1), dtype=torch.float32))


_gated_gelu_bwd_op = define_op("supergrep::gated_gelu_bwd_fp8", "(Tensor h, Tensor d, SymInt width) -> (Tensor, Tensor, Tensor)",
                               _gated_gelu_bwd_impl, _gated_gelu_bwd_fake)


def gated_gelu_backward_fp8(h: torch.Tensor, d: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dh, *quantize_rows(dh)) with dh = ``gated_gelu_backward(h, d, width)``, as one opaque op:
    on CUDA one Triton kernel that reads each row once (``triton_gated_gelu.py``, train config
    ``fp8_quantize: gated``), elsewhere the torch form. No autograd: for the backward."""
    return _gated_gelu_bwd_op(h, d, width)


def _gated_gelu_fwd_impl(h, width):
    if _use_triton(h):
        from supergrep.backends import triton_gated_gelu

        return triton_gated_gelu.gated_gelu_forward_fp8(h, width)
    a = gated_gelu(h, width)
    q, s = quantize_rows(a)
    return a, q.contiguous(), s


def _gated_gelu_fwd_fake(h, width):
    n = h.shape[0]
    return (h.new_empty((n, width)), h.new_empty((n, width), dtype=FP8), h.new_empty((n, 1), dtype=torch.float32))


_gated_gelu_fwd_op = define_op("supergrep::gated_gelu_fwd_fp8", "(Tensor h, SymInt width) -> (Tensor, Tensor, Tensor)",
                               _gated_gelu_fwd_impl, _gated_gelu_fwd_fake)


def gated_gelu_forward_fp8(h: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, *quantize_rows(a)) with a = ``gated_gelu(h, width)``, as one opaque op: on CUDA one Triton
    kernel that reads each row once (``triton_gated_gelu.py``), elsewhere the torch form. No
    autograd: the caller's autograd function owns the backward."""
    return _gated_gelu_fwd_op(h, width)


def quantize_tensor(x: torch.Tensor, amax: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(x / s) in float8 and one float32 scale s = amax / 448 (0-d) for the whole tensor (or for
    the given ``amax``, e.g. a weight group's)."""
    x = x.float()
    amax = x.abs().amax() if amax is None else amax.float()
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    return (x / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


class Fp8Linear(nn.Module):
    """``y = x W^T + b`` with W stored in float8 (a float32 scale per output row) and x quantised
    per row on the fly; the product accumulates in float32 (``torch._scaled_mm``) and is returned
    in x's dtype."""

    def __init__(self, linear: nn.Linear, options: Fp8Options = Fp8Options(), group_amax: torch.Tensor | None = None):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.options = options
        if options.scaling == "row":
            wq, ws = quantize_rows(linear.weight.detach())
            ws = ws.reshape(1, -1).contiguous()  # (1, out)
        else:  # one scale for the group (the parent's projections), so they stack into one product
            wq, ws = quantize_tensor(linear.weight.detach(), group_amax)
        self.register_buffer("weight_fp8", wq)  # (out, in), row-major: .t() is the column-major B
        self.register_buffer("weight_scale", ws)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fp8_linear(x, [self])


def _mm(xq: torch.Tensor, xs: torch.Tensor, wq: torch.Tensor, ws: torch.Tensor, dtype: torch.dtype,
        fast_accum: bool = False, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x W^T`` from x quantised per row (scales (rows, 1)) and W row-major (scales (1, out));
    ``bias`` (out,) in ``dtype`` rides in the product's epilogue."""
    # any row count: float8 products need multiples of 16 only in the inner and output sizes (no
    # padding here, whose size-dependent branch would recompile the compiled forward per remainder)
    return torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, bias=bias, out_dtype=dtype, use_fast_accum=fast_accum)


def fp8_linear(x: torch.Tensor, mods: list[Fp8Linear]) -> torch.Tensor:
    """The outputs of the ``Fp8Linear`` layers ``mods`` on ``x``, concatenated on the last axis:
    x quantised once, one product over the stacked weights (exact: the scales are per output row)."""
    dtype = x.dtype if x.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
    shape = x.shape
    opts = mods[0].options
    row = opts.scaling == "row"
    xq, xs = (quantize_rows if row else quantize_tensor)(x.reshape(-1, shape[-1]))
    if len(mods) == 1:
        wq, ws = mods[0].weight_fp8, mods[0].weight_scale
    else:  # tensor scaling: enable_fp8 gave siblings one shared scale, so mods[0]'s is theirs
        wq = torch.cat([m.weight_fp8 for m in mods])
        ws = torch.cat([m.weight_scale for m in mods], dim=1) if row else mods[0].weight_scale
    y = _mm(xq, xs, wq, ws, dtype, opts.fast_accum)
    biases = [m.bias for m in mods]
    if any(b is not None for b in biases):
        y = y + torch.cat([b if b is not None else y.new_zeros(m.out_features) for b, m in zip(biases, mods)]).to(dtype)
    return y.reshape(*shape[:-1], y.shape[-1]).to(x.dtype)


def is_fp8(mods: list[nn.Module]) -> bool:
    return all(isinstance(m, Fp8Linear) for m in mods)


class Fp8Handle:
    """What ``enable_fp8`` swapped, so ``restore()`` can put the original layers back."""

    def __init__(self, swapped: list[tuple[nn.Module, str, nn.Module]]):
        self.swapped = swapped

    def __len__(self) -> int:
        return len(self.swapped)

    def restore(self) -> None:
        for parent, name, original in self.swapped:
            setattr(parent, name, original)
        self.swapped = []


def enable_fp8(model: nn.Module, skip: tuple[str, ...] = ("pooler",), options: Fp8Options | None = None) -> Fp8Handle:
    """Swap every ``nn.Linear`` of ``model`` (not under a name in ``skip``) for ``Fp8Linear``.
    Layers whose sizes are not multiples of 16 (float8 products need them) stay as they are.
    With tensor scaling the swapped children of one parent (T5's q, k, v, o; wi_0, wi_1, wo)
    share one weight scale, so ``project`` can stack them into one product."""
    options = options or Fp8Options.from_env()
    swapped = []
    for pname, parent in list(model.named_modules()):
        picked = []
        for name, child in list(parent.named_children()):
            full = f"{pname}.{name}" if pname else name
            if type(child) is not nn.Linear or any(s in full for s in skip):
                continue
            if child.in_features % 16 or child.out_features % 16:
                continue
            picked.append((name, child))
        if not picked:
            continue
        amax = torch.stack([c.weight.detach().float().abs().amax() for _, c in picked]).amax()
        for name, child in picked:
            setattr(parent, name, Fp8Linear(child, options, amax))
            swapped.append((parent, name, child))
    return Fp8Handle(swapped)
