"""Float8 linear layers for inference (torch_fp8.py), on the CPU's float8 products."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from supergrep.backends.torch_fp8 import (
    FP8_MAX,
    Fp8Linear,
    Fp8Options,
    enable_fp8,
    fp8_linear,
    quantize_rows,
    quantize_tensor,
)


def _cos(a, b):
    return nn.functional.cosine_similarity(a.float(), b.float(), dim=-1)


def test_rows_are_scaled_to_the_float8_range():
    x = torch.randn(7, 32) * torch.logspace(-3, 3, 7)[:, None]  # rows six orders of magnitude apart
    x[3] = 0.0
    q, s = quantize_rows(x)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (7, 1)
    assert torch.allclose(q.float().abs().amax(dim=1)[[0, 1, 2, 4, 5, 6]], torch.tensor(FP8_MAX))
    assert s[3].item() == 1.0 and q[3].float().abs().sum() == 0  # zeros stay zeros, no nan
    back = q.float() * s
    rel = ((back - x).norm(dim=1) / x.norm(dim=1).clamp(min=1e-30))[[0, 1, 2, 4, 5, 6]]
    assert rel.max() < 0.05  # e4m3 keeps 3 mantissa bits: a few % per row, whatever its scale


def test_fp8_linear_is_close_to_the_float_layer():
    torch.manual_seed(0)
    lin = nn.Linear(64, 48, bias=True)
    x = torch.randn(5, 9, 64)
    ref = lin(x)
    got = Fp8Linear(lin)(x)
    assert got.shape == ref.shape and got.dtype == x.dtype
    assert _cos(got, ref).min() > 0.995
    assert not torch.equal(got, ref)  # it is really a float8 product


def test_stacked_layers_equal_one_product_each():
    """q, k, v as one product over stacked weights (the input quantised once) gives what three
    separate products give: the weight scales are per output row."""
    torch.manual_seed(1)
    mods = [Fp8Linear(nn.Linear(32, 16, bias=False)) for _ in range(3)]
    x = torch.randn(21, 32)  # 21 rows: not a multiple of 16
    both = fp8_linear(x, mods)
    sep = torch.cat([m(x) for m in mods], dim=-1)
    torch.testing.assert_close(both, sep)


def test_enable_swaps_only_eligible_layers_and_restores_them():
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10), nn.Linear(10, 16))
    model.add_module("pooler", nn.Linear(16, 16))
    x = torch.randn(4, 32)
    before = model[:4](x)
    originals = [model[0], model[2], model[3]]
    h = enable_fp8(model)
    assert len(h) == 1 and isinstance(model[0], Fp8Linear)  # 64->10, 10->16: not multiples of 16
    assert model[2] is originals[1] and type(model.pooler) is nn.Linear
    assert _cos(model[:4](x), before).min() > 0.99
    h.restore()
    assert model[0] is originals[0] and torch.equal(model[:4](x), before)


def test_t5_varlen_forward_in_float8_stays_close(tmp_path):
    """The whole T5 varlen forward (the index path) with every projection in float8: token states
    within cosine .99 of the float forward on a tiny random T5."""
    from tests.tiny_models import make_t5

    from supergrep.backends.torch_t5_varlen import varlen_forward

    transformers = pytest.importorskip("transformers")
    path = make_t5(tmp_path / "t5", dense=None)
    model = transformers.T5EncoderModel.from_pretrained(str(path)).eval()
    ids = torch.randint(5, 100, (40,))
    cu = torch.tensor([0, 7, 30, 40], dtype=torch.int32)
    with torch.no_grad():
        ref = varlen_forward(model, ids, cu, 64)
        h = enable_fp8(model)
        assert len(h) >= 7 * model.config.num_layers - 1  # q, k, v, o, wi_0, wi_1, wo per layer
        got = varlen_forward(model, ids, cu, 64)
    assert _cos(got, ref).min() > 0.99


@pytest.mark.parametrize("options", [Fp8Options("tensor"), Fp8Options("row", fast_accum=False),
                                     Fp8Options("tensor", fast_accum=False)])
def test_tensor_scaling_and_fast_accumulation_stay_close(options):
    """One scale per weight group and per input tensor (cuBLAS's tensor-scaled kernels), and fast
    accumulation: still within cosine .995 of the float layers, and siblings still stack."""
    torch.manual_seed(2)
    parent = nn.Module()
    parent.q, parent.k = nn.Linear(64, 32, bias=False), nn.Linear(64, 48, bias=False)
    with torch.no_grad():
        parent.k.weight.mul_(3.0)  # the group's scale comes from its largest weight
    x = torch.randn(21, 64)
    ref = torch.cat([parent.q(x), parent.k(x)], dim=-1)
    h = enable_fp8(parent, options=options)
    assert len(h) == 2 and parent.q.options == options
    if options.scaling == "tensor":
        assert parent.q.weight_scale.dim() == 0
        assert torch.equal(parent.q.weight_scale, parent.k.weight_scale)  # shared, so one product is exact
    both = fp8_linear(x, [parent.q, parent.k])
    torch.testing.assert_close(both, torch.cat([parent.q(x), parent.k(x)], dim=-1))
    assert _cos(both, ref).min() > 0.995


def test_tensor_scaling_uses_one_scale_for_the_whole_input():
    x = torch.randn(6, 32) * torch.logspace(-2, 2, 6)[:, None]
    q, s = quantize_tensor(x)
    assert s.dim() == 0 and s.item() == pytest.approx(x.abs().max().item() / FP8_MAX)
    assert q.float().abs().max().item() == FP8_MAX
    # the small rows lose precision against the largest one: what row scaling is for
    rel = (q.float() * s - x).norm(dim=1) / x.norm(dim=1)
    assert rel[-1] < 0.05 and rel[0] > rel[-1]


def test_options_from_the_environment(monkeypatch):
    monkeypatch.setenv("SUPERGREP_ENCODE_FP8_SCALING", "tensor")
    assert Fp8Options.from_env() == Fp8Options("tensor", fast_accum=True)  # fast accumulation unless turned off
    monkeypatch.setenv("SUPERGREP_ENCODE_FP8_FAST_ACCUM", "0")
    assert Fp8Options.from_env() == Fp8Options("tensor", fast_accum=False)
    monkeypatch.setenv("SUPERGREP_ENCODE_FP8_SCALING", "column")
    from supergrep.errors import ConfigError

    with pytest.raises(ConfigError, match="SUPERGREP_ENCODE_FP8_SCALING='column': set it to 'row' or 'tensor'"):
        Fp8Options.from_env()
