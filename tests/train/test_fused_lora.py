"""Fused LoRA projections (q,k,v / wi_0,wi_1 / o in one pass) == the plain LoRALinear modules."""

from __future__ import annotations

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
