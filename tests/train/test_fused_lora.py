"""Fused LoRA projections (q,k,v / wi_0,wi_1 / o in one pass) == the plain LoRALinear modules."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from supergrep.backends.torch_fused_lora import fusable, fused_lora_linear
from supergrep.backends.torch_lora import LoRALinear

R, ALPHA = 4, 12.0  # scale 3: a dropped or doubled scale cannot pass


def _mods(outs, d_in, bias=False, seed=0, r=R, alpha=ALPHA, dropout=0.0):
    torch.manual_seed(seed)
    mods = []
    for out in outs:
        base = nn.Linear(d_in, out, bias=bias)
        base.requires_grad_(False)  # frozen, as linear_to_lora_layers' callers leave it
        m = LoRALinear(base, r, alpha, dropout)
        with torch.no_grad():
            m.lora_B.normal_()  # LoRALinear starts B at zero, which would hide B bugs
        mods.append(m)
    return mods


def _run(fn, x, mods, g):
    """Output and the gradients of x, every A and every B under a random upstream gradient."""
    for m in mods:
        m.lora_A.grad = m.lora_B.grad = None
    x = x.detach().requires_grad_(True)
    y = fn(x, mods)
    (y.float() * g).sum().backward()
    return y, x.grad, [m.lora_A.grad for m in mods], [m.lora_B.grad for m in mods]


def _reference(x, mods):
    return torch.cat([m(x) for m in mods], dim=-1)


def _x(kind, d_in, seed):
    g = torch.Generator().manual_seed(seed)
    if kind == "flat":
        return torch.randn(5, d_in, generator=g)
    if kind == "btd":
        return torch.randn(2, 7, d_in, generator=g)
    if kind == "transposed":  # (2, 7, d) view of a (7, 2, d) tensor
        return torch.randn(7, 2, d_in, generator=g).transpose(0, 1)
    return torch.randn(2, 7, 2 * d_in, generator=g)[..., ::2]  # strided last dim


CASES = {
    "o-square": ((16,), 16, False, "flat"),
    "qkv": ((16, 16, 16), 16, False, "btd"),
    "wi0-wi1": ((40, 40), 16, False, "btd"),
    "bert-qkv-bias": ((16, 16, 16), 16, True, "btd"),
    "uneven-outs-bias": ((16, 8, 24), 16, True, "transposed"),
    "strided-x": ((16, 16, 16), 16, False, "sliced"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_forward_and_every_gradient_match_the_plain_modules(case):
    outs, d_in, bias, kind = CASES[case]
    seed = 1 + list(CASES).index(case)
    mods = _mods(outs, d_in, bias, seed=seed)
    assert fusable(mods)
    x = _x(kind, d_in, seed)
    assert kind in ("flat", "btd") or not x.is_contiguous()
    g = torch.randn(*x.shape[:-1], sum(outs), generator=torch.Generator().manual_seed(seed + 100))
    ref = _run(_reference, x, mods, g)
    got = _run(fused_lora_linear, x, mods, g)
    assert got[0].shape == ref[0].shape == (*x.shape[:-1], sum(outs))
    assert got[0].dtype == torch.float32
    torch.testing.assert_close(got[0], ref[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], ref[1], atol=1e-5, rtol=1e-5)
    for i in range(len(outs)):
        torch.testing.assert_close(got[2][i], ref[2][i], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got[3][i], ref[3][i], atol=1e-5, rtol=1e-5)
    for m in mods:  # frozen base: nothing for it
        assert m.base.weight.grad is None
        assert m.base.bias is None or m.base.bias.grad is None


def test_no_grad_forward_matches():
    mods = _mods((16, 16, 16), 16, True, seed=11)
    x = _x("btd", 16, 11)
    with torch.no_grad():
        torch.testing.assert_close(fused_lora_linear(x, mods), _reference(x, mods), atol=1e-5, rtol=1e-5)


def _rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def test_bf16_autocast_matches_the_autocast_reference():
    mods = _mods((16, 16, 16), 16, True, seed=21)
    x = _x("btd", 16, 21)
    g = torch.randn(2, 7, 48, generator=torch.Generator().manual_seed(22))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = _run(_reference, x, mods, g)
        got = _run(fused_lora_linear, x, mods, g)
    assert ref[0].dtype == got[0].dtype == torch.bfloat16
    assert got[1].dtype == torch.float32  # autograd casts back to the inputs' / params' dtype
    assert all(t.dtype == torch.float32 for t in got[2] + got[3])
    torch.testing.assert_close(got[0], ref[0], rtol=2e-2, atol=2e-2 * float(ref[0].detach().abs().max()))
    assert _rel(got[1], ref[1]) < 2e-2
    for i in range(3):
        assert _rel(got[2][i], ref[2][i]) < 2e-2
        assert _rel(got[3][i], ref[3][i]) < 2e-2


def test_torch_compile_dynamic_matches_eager():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    mods = _mods((16, 16, 16), 16, True, seed=31)
    compiled = torch.compile(fused_lora_linear, dynamic=True, fullgraph=True)
    for shape, seed in (((2, 7, 16), 32), ((3, 5, 16), 33)):  # a second shape: no recompile per N
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
        g = torch.randn(*shape[:-1], 48, generator=torch.Generator().manual_seed(seed + 1))
        eager = _run(fused_lora_linear, x, mods, g)
        comp = _run(compiled, x, mods, g)
        torch.testing.assert_close(comp[0], eager[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(comp[1], eager[1], atol=1e-5, rtol=1e-5)
        for i in range(3):
            torch.testing.assert_close(comp[2][i], eager[2][i], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(comp[3][i], eager[3][i], atol=1e-5, rtol=1e-5)
    assert counters["stats"]["unique_graphs"] == 1  # one graph for both token counts


def _disabled():
    mods = _mods((16, 16), 16)
    mods[1].enabled = False
    return mods


def _qat():
    mods = _mods((16, 16), 16)
    mods[0].weight_fake_quant = lambda m, x: m.base(x)
    return mods


def _trainable_base():
    mods = _mods((16, 16), 16)
    mods[0].base.weight.requires_grad_(True)
    return mods


REFUSED = {
    "dropout": lambda: _mods((16, 16), 16, dropout=0.1),
    "disabled": _disabled,
    "qat": _qat,
    "mixed-r": lambda: _mods((16,), 16, r=4, alpha=8.0) + _mods((16,), 16, r=8, alpha=16.0),
    "mixed-scale": lambda: _mods((16,), 16, alpha=8.0) + _mods((16,), 16, alpha=16.0),
    "mixed-in": lambda: _mods((16,), 16) + _mods((16,), 24),
    "mixed-bias": lambda: _mods((16,), 16, bias=True) + _mods((16,), 16, bias=False),
    "plain-linear": lambda: _mods((16,), 16) + [nn.Linear(16, 16)],
    "trainable-base": _trainable_base,
    "empty": lambda: [],
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_fusable_refuses_what_the_fused_path_does_not_model(case):
    assert not fusable(REFUSED[case]())


def test_fusable_accepts_matching_projections():
    assert fusable(_mods((16, 16, 16), 16))
    assert fusable(_mods((40, 40), 16, bias=True))
    assert fusable(_mods((16,), 16, dropout=0.0))


# -- float8 products (LoRALinear.fp8, train config fp8_products) --------------------------------
# torch's CPU build runs torch._scaled_mm with row scales too, so the float8 path is checked here
# against the exact float32 modules; on a GPU it is the same code with the tensor cores' fast
# accumulation. e4m3 keeps 3 mantissa bits: a product's relative error is ~2-3% per element and
# averages down over the inner size, so output and gradients land within a few percent, while a
# dropped scale, a transposed weight or a missing LoRA term would be off by O(1).

FP8_CASES = {
    "qkv": ((32, 32, 32), 32, False, "btd"),
    "bert-qkv-bias": ((32, 32, 32), 32, True, "btd"),
    "wi0-wi1": ((48, 48), 32, False, "flat"),
    "o-padded-rows": ((32,), 48, True, "transposed"),  # 32 + r rows: padded to 48 for float8
}


def _fp8(mods):
    for m in mods:
        m.fp8 = True
    return mods


@pytest.mark.parametrize("case", list(FP8_CASES))
def test_fp8_products_track_the_exact_modules(case):
    outs, d_in, bias, kind = FP8_CASES[case]
    mods = _mods(outs, d_in, bias, seed=41)
    x = _x(kind, d_in, 42)
    g = torch.randn(*x.shape[:-1], sum(outs), generator=torch.Generator().manual_seed(43))
    ref = _run(_reference, x, mods, g)
    got = _run(fused_lora_linear, x, _fp8(mods), g)
    assert _rel(got[0], ref[0]) < 0.06
    assert _rel(got[1], ref[1]) < 0.06
    for i in range(len(outs)):
        assert _rel(got[2][i], ref[2][i]) < 0.06
        assert _rel(got[3][i], ref[3][i]) < 0.06
    # ... and it is the float8 path: not bit-equal to the float32 fused product
    plain = _run(fused_lora_linear, x, [m for m in _mods(outs, d_in, bias, seed=41)], g)
    assert not torch.equal(got[0], plain[0])


def test_fp8_single_module_forward_goes_through_the_fused_product():
    (m,) = _fp8(_mods((32,), 32, True, seed=51))
    x = torch.randn(6, 32, generator=torch.Generator().manual_seed(52))
    ref = _reference(x, _mods((32,), 32, True, seed=51))
    got = m(x)
    assert _rel(got, ref) < 0.06 and not torch.equal(got, ref)


def test_fp8_falls_back_where_float8_cannot_take_the_shapes():
    mods = _fp8(_mods((16, 8), 24, seed=61))  # inner sizes 24 and 24: not multiples of 16
    x = _x("flat", 24, 62)
    g = torch.randn(5, 24, generator=torch.Generator().manual_seed(63))
    got = _run(fused_lora_linear, x, mods, g)
    plain = _run(fused_lora_linear, x, _mods((16, 8), 24, seed=61), g)
    torch.testing.assert_close(got[0], plain[0])
    torch.testing.assert_close(got[1], plain[1])


def test_fusable_refuses_mixed_fp8():
    mods = _mods((16, 16), 16)
    mods[0].fp8 = True
    assert not fusable(mods)


def test_set_fp8_products_switches_every_lora_projection():
    from supergrep.backends.torch_train import set_fp8_products

    model = nn.Sequential(*_mods((16, 16), 16), nn.Linear(16, 16))
    assert set_fp8_products(model, True) == 2
    assert all(m.fp8 for m in model if isinstance(m, LoRALinear))
    assert set_fp8_products(model, False) == 2 and not any(m.fp8 for m in model if isinstance(m, LoRALinear))


def test_fp8_compiles_with_dynamic_token_counts():
    """torch.compile (dynamic shapes) of the float8 path: the training step compiles it; its
    operands must stay outside the autograd function and _scaled_mm's B column-major."""
    torch._dynamo.reset()
    qkv = _fp8(_mods((32, 32, 32), 32, seed=71))
    o = _fp8(_mods((32,), 96, True, seed=72))

    def two(x, _mods_unused=None):
        return fused_lora_linear(fused_lora_linear(x, qkv), o)

    compiled = torch.compile(two, dynamic=True)
    for n, seed in ((40, 73), (24, 74)):
        x = torch.randn(n, 32, generator=torch.Generator().manual_seed(seed))
        g = torch.randn(n, 32, generator=torch.Generator().manual_seed(seed + 10))
        eager = _run(lambda x, _: two(x), x, qkv + o, g)
        comp = _run(lambda x, _: compiled(x), x, qkv + o, g)
        assert _rel(comp[0], eager[0]) < 1e-2
        assert _rel(comp[1], eager[1]) < 1e-2
        for i in range(4):
            assert _rel(comp[2][i], eager[2][i]) < 1e-2 and _rel(comp[3][i], eager[3][i]) < 1e-2


def test_fp8_delayed_scaling_uses_the_previous_amax():
    """fp8_scaling "delayed": the forward's input takes its scale from the last call's amax (a
    buffer), so the cast needs no reduction first; this call's amax is stored for the next."""
    from supergrep.backends.torch_train import set_fp8_products

    model = nn.Sequential(*_mods((32, 32, 32), 32, seed=81))
    assert set_fp8_products(model, True, "delayed") == 3
    mods = list(model)
    assert float(mods[0].fp8_amax) == 0 and "fp8_amax" not in model.state_dict().__str__()
    x = 50 * _x("btd", 32, 82)  # beyond e4m3's 448 nowhere, well beyond 1 everywhere
    g = torch.randn(2, 7, 96, generator=torch.Generator().manual_seed(83))
    ref = _run(_reference, x, mods, g)
    _run(fused_lora_linear, x, mods, g)  # the first call: no amax yet (scale 1), stores x's amax
    assert float(mods[0].fp8_amax) == float(x.abs().amax())
    got = _run(fused_lora_linear, x, mods, g)
    assert _rel(got[0], ref[0]) < 0.06 and _rel(got[1], ref[1]) < 0.06
    for i in range(3):
        assert _rel(got[2][i], ref[2][i]) < 0.06 and _rel(got[3][i], ref[3][i]) < 0.06
    compiled = torch.compile(lambda x, ms: fused_lora_linear(x, ms), dynamic=True)
    comp = _run(compiled, x, mods, g)
    assert _rel(comp[0], got[0]) < 1e-2 and float(mods[0].fp8_amax) == float(x.abs().amax())
    set_fp8_products(model, False)
    assert not hasattr(mods[0], "fp8_amax")


QUANT_CHECK = r"""
import json, torch
from supergrep.backends import triton_fp8_quant as k
from supergrep.backends.torch_fp8 import quantize_rows, quantize_rows_op
out = {}
for cols in (100, 768, 2304, 4096):
    x = (torch.randn(9, cols, generator=torch.Generator().manual_seed(cols)) * 3).to(torch.bfloat16)
    x[1] = 0  # a row of zeros: scale 1
    x[2, 5] = 1e4  # one large value: the rest of its row goes small
    wide = torch.cat([x, x[:, :16]], dim=1)[:, :cols]  # a strided view, as a wider GEMM output's slice
    ref_q, ref_s = quantize_rows(x)
    for name, inp in (("plain", x), ("view", wide)):
        q32, s = k.quantize_rows(inp, out_fp32=True)
        q, s8 = quantize_rows_op(inp)
        out[f"{cols}-{name}"] = [torch.equal(s, ref_s), torch.equal(s8, ref_s),
                                 torch.equal(q32, (x.float() / ref_s).clamp(-448, 448)),
                                 q.dtype == torch.float8_e4m3fn and q.is_contiguous() and list(q.shape) == [9, cols]]
print(json.dumps(out))
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton (its CPU interpreter runs the kernel)")
def test_the_row_quantisation_kernel_matches_quantize_rows_in_the_interpreter():
    """The Triton row quantiser (fp8_quantize: kernel) computes quantize_rows' scales and scaled
    values bit for bit, strided views included. The float8 cast itself is the GPU's (Triton's
    interpreter rounds it differently): benchmarks/fp8_lora_check.py compares the bytes there."""
    _all_checks_pass_in_the_interpreter(QUANT_CHECK, 8)


def _all_checks_pass_in_the_interpreter(script: str, n_cases: int) -> None:
    """Run ``script`` under Triton's CPU interpreter; its last line is a JSON dict of lists of
    checks, every one of which must hold."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(out) == n_cases
    for key, checks in out.items():
        assert all(checks), (key, checks)


def _warm_run_counting(compiled, x, mods, g, op: str):
    """``_run`` of a compiled function once to compile it (tracing calls ops' fake forms), then
    again under the profiler: (its results, how many times ``op`` ran)."""
    _run(compiled, x, mods, g)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        got = _run(compiled, x, mods, g)
    return got, sum(e.name == op for e in prof.events())


def test_fp8_kernel_quantisation_compiles_and_matches_the_fused_form():
    """fp8_quantize "kernel": the quantisations as an opaque op (here its CPU form) inside a
    compiled forward and backward give the compiled-in quantisation's results."""
    from supergrep.backends.torch_train import set_fp8_products

    torch._dynamo.reset()
    model = nn.Sequential(*_mods((32, 32, 32), 32, seed=91))
    mods = list(model)
    x = _x("btd", 32, 92)
    g = torch.randn(2, 7, 96, generator=torch.Generator().manual_seed(93))
    set_fp8_products(model, True)
    fused = _run(fused_lora_linear, x, mods, g)
    assert set_fp8_products(model, True, "row", "kernel") == 3 and all(m.fp8_quantize == "kernel" for m in mods)
    compiled = torch.compile(lambda x, ms: fused_lora_linear(x, ms), dynamic=True)
    got, calls = _warm_run_counting(compiled, x, mods, g, "supergrep::fp8_quantize_rows")
    assert calls == 2  # the op ran in the compiled graphs: x's quantisation in forward, the gradient's in backward
    assert _rel(got[0], fused[0]) < 1e-3 and _rel(got[1], fused[1]) < 1e-3
    for i in range(3):
        assert _rel(got[2][i], fused[2][i]) < 1e-3 and _rel(got[3][i], fused[3][i]) < 1e-3
    with pytest.raises(ValueError, match="compiled, kernel or gated"):
        set_fp8_products(model, True, "row", "triton")


# -- fp8_quantize "gated": T5's gated GELU backward and its quantisation as one op ----------------

GATED_CHECK = r"""
import json, torch
from supergrep.backends import triton_gated_gelu as k
from supergrep.backends.torch_fp8 import gated_gelu_backward, gated_gelu_backward_fp8, quantize_rows
out = {}
for width in (24, 64, 2048):
    gen = torch.Generator().manual_seed(width)
    h = (torch.randn(7, 2 * width + 16, generator=gen) * 3).to(torch.bfloat16)  # + LoRA's u columns
    d = (torch.randn(7, width + 16, generator=gen) * 1e-3).to(torch.bfloat16)[:, :width]  # a strided view
    d[1] = 0  # a row of zeros: scale 1
    h[2, 3] = 40.0  # tanh saturates
    h[3, 4] = -40.0
    ref = gated_gelu_backward(h, d, width)
    g, q32, s = k.gated_gelu_backward_fp8(h, d, width, out_fp32=True)
    g8, q8, s8 = gated_gelu_backward_fp8(h, d, width)
    rs = quantize_rows(g)[1]
    out[str(width)] = [
        float((g.float() - ref.float()).abs().max() / ref.float().abs().max()) < 1e-2,  # bf16 rounding at most
        torch.equal(s, rs), torch.equal(q32, (g.float() / rs).clamp(-448, 448)),
        torch.equal(g8, g), torch.equal(s8, s), q8.dtype == torch.float8_e4m3fn and q8.is_contiguous(),
        list(g.shape) == [7, 2 * width] and g.dtype == torch.bfloat16, bool(torch.all(g[1] == 0)),
        bool(torch.isfinite(g).all())]
print(json.dumps(out))
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton (its CPU interpreter runs the kernel)")
def test_the_gated_gelu_backward_kernel_matches_torch_in_the_interpreter():
    """The Triton gated-GELU backward (fp8_quantize: gated) gives torch's gradient (to bf16
    rounding), and its scales and scaled values are exactly quantize_rows of the bf16 gradient it
    wrote; strided inputs, rows of zeros and saturated tanh included."""
    _all_checks_pass_in_the_interpreter(GATED_CHECK, 3)


GATED_FWD_CHECK = r"""
import json, torch
from supergrep.backends import triton_gated_gelu as k
from supergrep.backends.torch_fp8 import gated_gelu, gated_gelu_forward_fp8, quantize_rows
out = {}
for width in (24, 64, 2048):
    gen = torch.Generator().manual_seed(width)
    h = (torch.randn(7, 2 * width + 16, generator=gen) * 3).to(torch.bfloat16)  # + LoRA's u columns
    h[1, width:] = 0  # a row whose activation is all zeros: scale 1
    h[2, 3] = 40.0  # tanh saturates
    h[3, 4] = -40.0
    ref = gated_gelu(h, width)
    a, q32, s = k.gated_gelu_forward_fp8(h, width, out_fp32=True)
    a8, q8, s8 = gated_gelu_forward_fp8(h, width)
    rs = quantize_rows(a)[1]
    out[str(width)] = [
        float((a.float() - ref.float()).abs().max() / ref.float().abs().max()) < 1e-2,  # bf16 rounding at most
        torch.equal(s, rs), torch.equal(q32, (a.float() / rs).clamp(-448, 448)),
        torch.equal(a8, a), torch.equal(s8, s), q8.dtype == torch.float8_e4m3fn and q8.is_contiguous(),
        list(a.shape) == [7, width] and a.dtype == torch.bfloat16, bool(torch.all(a[1] == 0)),
        bool(torch.isfinite(a).all())]
print(json.dumps(out))
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton (its CPU interpreter runs the kernel)")
def test_the_gated_gelu_forward_kernel_matches_torch_in_the_interpreter():
    """The Triton gated-GELU forward with the activation's float8 rows (GATED_FORWARD_KERNEL) gives
    torch's activation (to bf16 rounding), and its scales and scaled values are exactly
    quantize_rows of the activation it wrote; a strided input, a zero row and saturated tanh."""
    _all_checks_pass_in_the_interpreter(GATED_FWD_CHECK, 3)


def test_gated_quant_out_gives_the_activation_its_float8_rows_and_the_same_gradients():
    """fused_lora_linear(gated=True, quant_out=True): the activation as without it, its float8 rows
    exactly quantize_rows of it, from one op; the next projection fed those rows (x_quant) gives
    the output and gradients of the path that quantises the activation itself."""
    from supergrep.backends.torch_fp8 import quantize_rows

    x = _x("btd", 32, 112)
    g = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(113))
    mods = _gated_fp8(121, "gated")
    from supergrep.backends.torch_train import set_fp8_products

    (wo,) = _mods((32,), 48, seed=122)  # the activation (48 wide) -> 32
    set_fp8_products(nn.Sequential(wo), True, "row", "gated")
    plain = _run(lambda x, ms: fused_lora_linear(fused_lora_linear(x, ms, gated=True), [wo]), x, mods, g)

    def with_quant(x, ms):
        a, aq, a_scale = fused_lora_linear(x, ms, gated=True, quant_out=True)
        q, s = quantize_rows(a.reshape(-1, a.shape[-1]).detach())
        assert torch.equal(aq.float(), q.float()) and torch.equal(a_scale, s) and not aq.requires_grad
        return fused_lora_linear(a, [wo], x_quant=(aq, a_scale))

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        got = _run(with_quant, x, mods, g)
    assert sum(e.name == "supergrep::gated_gelu_fwd_fp8" for e in prof.events()) == 1
    assert _rel(got[0], plain[0]) < 1e-6 and _rel(got[1], plain[1]) < 1e-6
    for j in (2, 3):
        for i in range(2):
            assert got[j][i].abs().max() > 0 and _rel(got[j][i], plain[j][i]) < 1e-6
    # compiled with dynamic token counts: the op stays one opaque call, the results the eager ones
    torch._dynamo.reset()

    def chained(x, ms):
        a, aq, a_scale = fused_lora_linear(x, ms, gated=True, quant_out=True)
        return fused_lora_linear(a, [wo], x_quant=(aq, a_scale))

    compiled = torch.compile(chained, dynamic=True)
    for n, seed in ((40, 114), (24, 115)):
        xn = torch.randn(n, 32, generator=torch.Generator().manual_seed(seed))
        gn = torch.randn(n, 32, generator=torch.Generator().manual_seed(seed + 10))
        eager = _run(chained, xn, mods, gn)
        comp, calls = _warm_run_counting(compiled, xn, mods, gn, "supergrep::gated_gelu_fwd_fp8")
        assert calls == 1
        assert _rel(comp[0], eager[0]) < 1e-2 and _rel(comp[1], eager[1]) < 1e-2


def _gated_reference(x, mods):
    from supergrep.backends.torch_fp8 import gated_gelu

    y = torch.cat([m(x) for m in mods], dim=-1)
    return gated_gelu(y.reshape(-1, y.shape[-1]), y.shape[-1] // 2).reshape(*y.shape[:-1], -1)


def _gated_fp8(seed, quantize):
    from supergrep.backends.torch_train import set_fp8_products

    model = nn.Sequential(*_mods((48, 48), 32, seed=seed))
    set_fp8_products(model, True, "row", quantize)
    return list(model)


def test_gated_fp8_path_tracks_the_exact_modules_and_the_compiled_quantisation():
    """fused_lora_linear(gated=True) with fp8_quantize "gated": the output and every gradient land
    where the exact float32 modules' do (within float8's error), and where the same float8 path
    with the gradient quantised by quantize_rows lands (to rounding): the op computes that
    gradient and its float8 form, and ran once, in the backward."""
    from supergrep.backends.torch_fused_lora import gated_fusable

    x = _x("btd", 32, 102)
    g = torch.randn(2, 7, 48, generator=torch.Generator().manual_seed(103))
    ref = _run(_gated_reference, x, _mods((48, 48), 32, seed=101), g)
    mods = _gated_fp8(101, "gated")
    act = nn.GELU(approximate="tanh")
    assert gated_fusable(mods, act)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        got = _run(lambda x, ms: fused_lora_linear(x, ms, gated=True), x, mods, g)
    assert sum(e.name == "supergrep::gated_gelu_bwd_fp8" for e in prof.events()) == 1
    compiled_q = _run(lambda x, ms: _gated_reference_fp8(x, ms), x, _gated_fp8(101, "compiled"), g)
    # float8's error compounds through the gate's product (~5-13% here, the same on both float8
    # paths), where a dropped term or a wrong derivative would be off by O(1)
    for i in range(2):
        assert _rel(got[i], ref[i]) < 0.2
        assert _rel(got[i], compiled_q[i]) < 1e-5
    for j in (2, 3):
        for i in range(2):
            assert _rel(got[j][i], ref[j][i]) < 0.2
            assert _rel(got[j][i], compiled_q[j][i]) < 1e-5


def _gated_reference_fp8(x, mods):
    from supergrep.backends.torch_fp8 import gated_gelu

    y = fused_lora_linear(x, mods)
    return gated_gelu(y.reshape(-1, y.shape[-1]), y.shape[-1] // 2).reshape(*y.shape[:-1], -1)


def test_gated_fp8_path_compiles_with_dynamic_token_counts():
    torch._dynamo.reset()
    mods = _gated_fp8(111, "gated")
    compiled = torch.compile(lambda x, ms: fused_lora_linear(x, ms, gated=True), dynamic=True)
    for n, seed in ((40, 112), (24, 113)):
        x = torch.randn(n, 32, generator=torch.Generator().manual_seed(seed))
        g = torch.randn(n, 48, generator=torch.Generator().manual_seed(seed + 10))
        eager = _run(lambda x, ms: fused_lora_linear(x, ms, gated=True), x, mods, g)
        comp, calls = _warm_run_counting(compiled, x, mods, g, "supergrep::gated_gelu_bwd_fp8")
        assert calls == 1
        assert _rel(comp[0], eager[0]) < 1e-2 and _rel(comp[1], eager[1]) < 1e-2
        for i in range(2):
            assert _rel(comp[2][i], eager[2][i]) < 1e-2 and _rel(comp[3][i], eager[3][i]) < 1e-2


def test_an_opaque_producers_gradient_is_quantised_by_the_row_kernel_under_gated():
    """opaque_grad (the gradient comes out of one of our custom ops): with fp8_quantize "gated"
    its row quantisation is the kernel's op (nothing for Inductor to fuse it into), in the
    backward only, with the compiled quantisation's results; other modes keep theirs."""
    x = _x("btd", 32, 132)
    g = torch.randn(2, 7, 96, generator=torch.Generator().manual_seed(133))
    runs = {}
    for mode, opaque in (("compiled", True), ("gated", False), ("gated", True)):
        from supergrep.backends.torch_train import set_fp8_products

        model = nn.Sequential(*_mods((32, 32, 32), 32, seed=131))
        set_fp8_products(model, True, "row", mode)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            runs[mode, opaque] = _run(lambda x, ms, o=opaque: fused_lora_linear(x, ms, opaque_grad=o), x, list(model), g)
        runs[mode, opaque] += (sum(e.name == "supergrep::fp8_quantize_rows" for e in prof.events()),)
    assert runs["compiled", True][4] == 0 and runs["gated", False][4] == 0 and runs["gated", True][4] == 1
    ref = runs["compiled", True]
    for got in (runs["gated", False], runs["gated", True]):
        torch.testing.assert_close(got[0], ref[0])
        torch.testing.assert_close(got[1], ref[1])


def test_gated_fusable_takes_only_what_the_kernel_computes():
    from supergrep.backends.torch_fused_lora import gated_fusable
    from supergrep.backends.torch_train import set_fp8_products

    tanh = nn.GELU(approximate="tanh")
    assert gated_fusable(_gated_fp8(121, "gated"), tanh)
    assert not gated_fusable(_gated_fp8(121, "gated"), nn.GELU())  # erf GELU: another derivative
    assert not gated_fusable(_gated_fp8(121, "gated"), nn.ReLU())
    assert not gated_fusable(_gated_fp8(121, "compiled"), tanh)
    assert not gated_fusable(_mods((48, 48), 32, seed=121), tanh)  # no float8
    uneven = nn.Sequential(*_mods((48, 32), 32, seed=121))
    set_fp8_products(uneven, True, "row", "gated")
    assert not gated_fusable(list(uneven), tanh)
