"""MLX pieces on their own: the loss ops against the NumPy reference, LoRA layers, the compiled
(GPU-path) forward, backend selection."""

from __future__ import annotations

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (Linux: pip install 'mlx[cpu]'; macOS: pip install mlx)")
import mlx.nn as nn  # noqa: E402

from supergrep.backends.adapters import LoRAConfig, lora_a_init  # noqa: E402
from supergrep.backends.mlx_ops import MLXOps  # noqa: E402
from supergrep.train.losses import contrastive_loss, maxsim_scores  # noqa: E402
from supergrep.train.ops import NumpyOps  # noqa: E402

pytestmark = pytest.mark.mlx


def example(seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, 3, 4))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    d = rng.standard_normal((3, 5, 4))  # 2 positives + 1 hard negative
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    qm = np.array([[True, True, False], [True, True, True]])
    dm = np.array([[True] * 5, [True, True, True, False, False], [True, False, False, False, False]])
    return q, qm, d, dm


@pytest.mark.parametrize("margin_weight", [0.0, 0.1])
def test_mlx_ops_match_the_numpy_reference_values_and_gradients(margin_weight):
    q, qm, d, dm = example()
    fn = contrastive_loss(0.07, 0.2, margin_weight)
    ref_loss, ref_acc = fn(NumpyOps(), q, qm, d, dm)
    args = [mx.array(q.astype(np.float32)), mx.array(qm), mx.array(d.astype(np.float32)), mx.array(dm)]
    np.testing.assert_allclose(np.array(maxsim_scores(MLXOps(), *args, doc_chunk=2)),
                               maxsim_scores(NumpyOps(), q, qm, d, dm), atol=1e-6)
    (loss, acc), (gq, gd) = mx.value_and_grad(lambda q_, d_: fn(MLXOps(), q_, args[1], d_, args[3]),
                                              argnums=(0, 1))(args[0], args[2])
    assert float(loss) == pytest.approx(float(ref_loss), rel=1e-5) and float(acc) == float(ref_acc)
    eps = 1e-6
    d2 = d.copy()
    d2[1, 0, 2] += eps
    num = (float(fn(NumpyOps(), q, qm, d2, dm)[0]) - float(ref_loss)) / eps
    assert float(gd[1, 0, 2]) == pytest.approx(num, rel=1e-3, abs=1e-5)
    assert np.isfinite(np.array(gq)).all() and float(mx.abs(gq[0, 2]).sum()) == 0  # masked token: no gradient


def test_mlx_ops_has_every_op_of_the_numpy_reference():
    want = {n for n in dir(NumpyOps) if not n.startswith("_")}
    assert want <= {n for n in dir(MLXOps) if not n.startswith("_")}


@pytest.mark.parametrize("weights", [(0.0, 0.0), (0.1, 0.0), (0.1, 0.7)], ids=["infonce", "margin", "distill"])
def test_mlx_loss_matches_numpy_with_every_term(weights):
    margin_weight, distill_weight = weights
    q, qm, d, dm = example()
    tq, _, td, _ = example(seed=1)
    fn = contrastive_loss(0.07, 0.2, margin_weight, distill_weight, 0.05)
    assert fn.needs_teacher == bool(distill_weight)
    ref = float(fn(NumpyOps(), q, qm, d, dm, (tq, td))[0])
    f32 = [mx.array(x.astype(np.float32)) for x in (q, d, tq, td)]
    got = float(fn(MLXOps(), f32[0], mx.array(qm), f32[1], mx.array(dm), (f32[2], f32[3]))[0])
    assert got == pytest.approx(ref, rel=1e-5)
    if distill_weight:
        assert ref != pytest.approx(float(fn(NumpyOps(), q, qm, d, dm)[0]), rel=1e-3)  # the term counts


def test_lora_layer_starts_as_the_base_and_fuses_exactly():
    from supergrep.backends.mlx_lora import LoRALinear

    base = nn.Linear(16, 8)
    layer = LoRALinear.from_base(base, r=4, alpha=8.0, init_a=lora_a_init(0, "x", 4, 16))
    x = mx.random.normal((3, 16))
    assert np.array_equal(np.array(layer(x)), np.array(base(x)))  # B = 0
    layer.lora_B = mx.random.normal((8, 4)) * 0.1
    np.testing.assert_allclose(np.array(layer.fuse()(x)), np.array(layer(x)), atol=1e-5)


def test_lora_targets_are_the_torch_ones(tiny_model):
    import torch

    from supergrep.backends.mlx_lora import linear_to_lora_layers
    from supergrep.backends.mlx_models import load_transformer
    from supergrep.backends.torch_backend import load_transformer as torch_load
    from supergrep.backends.torch_lora import linear_to_lora_layers as torch_wrap
    from supergrep.encoder import resolve_model

    spec = resolve_model(tiny_model)
    cfg = LoRAConfig(r=4, lora_alpha=8.0)
    m, t = load_transformer(spec), torch_load(spec, torch.float32)
    assert linear_to_lora_layers(m, cfg, "bert", seed=3) == torch_wrap(t, cfg, "bert", seed=3)
    from supergrep.backends.mlx_lora import adapter_state
    from supergrep.backends.torch_lora import adapter_state as torch_state

    a, b = adapter_state(m), torch_state(t)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k].numpy()) for k in a)  # the same A init


def test_compiled_forward_pads_widths_and_keeps_the_vectors(tiny_model):
    from supergrep.encoder import Encoder, resolve_model

    enc = Encoder(resolve_model(tiny_model), backend="mlx", device="cpu")
    texts = ["def f(x): return x", "open the file and read the config into a dict", "a"]
    want = enc.encode_documents(texts)
    enc.backend.compiled = True  # what a GPU does: compiled, widths padded to PAD_WIDTH
    enc.backend._forward = mx.compile(enc.backend._encode)
    got = enc.encode_documents(texts)
    assert all(np.abs(a - b).max() < 1e-5 for a, b in zip(got, want, strict=True))


def test_backend_auto_prefers_torch_then_mlx(monkeypatch):
    import importlib.util

    from supergrep.backends import base

    assert base.resolve_backend("auto") == "torch" and base.resolve_backend("mlx") == "mlx"
    assert "mlx" in base.available_backends()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert base.resolve_backend("auto") == "mlx"
