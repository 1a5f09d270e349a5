"""Group-wise quantization: the math (round trip, error bounds, packing), `supergrep quantize`
on tiny models (sizes, overrides, tied weights, loading through --model-path) and its errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from supergrep.backends.quant import QuantParams, dequantize, pack_int4, quantize, unpack_int4
from supergrep.errors import UsageError


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("cols", [64, 100, 7])
def test_round_trip_error_is_at_most_half_a_step_per_group(bits, symmetric, cols):
    rng = np.random.default_rng(bits + cols)
    w = (rng.standard_normal((9, cols)) * rng.uniform(0.01, 3, size=(9, 1))).astype(np.float32)
    w[3] = 0.0  # an all-zero row must survive
    p = QuantParams(bits, 32, symmetric)
    parts = quantize(w, p)
    got = dequantize(parts, w.shape, p)
    assert got.shape == w.shape and got.dtype == np.float32
    scales = parts["scales"].astype(np.float32)  # (rows, n_groups)
    step = np.repeat(scales, 32, axis=1)[:, :cols]
    assert np.all(np.abs(got - w) <= step / 2 + 1e-6 * (np.abs(w) + 1))
    assert np.all(got[3] == 0)
    if bits == 4:
        assert parts["qweight"].dtype == np.uint8 and parts["qweight"].shape[1] == parts["scales"].shape[1] * 16
    else:
        assert parts["qweight"].dtype == (np.int8 if symmetric else np.uint8)


def test_int8_is_much_closer_than_int4():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 256)).astype(np.float32)
    err = {}
    for bits in (8, 4):
        p = QuantParams(bits, 64, True)
        err[bits] = np.linalg.norm(dequantize(quantize(w, p), w.shape, p) - w) / np.linalg.norm(w)
    assert err[8] < 0.01 < err[4] < 0.15


def test_int4_packing_is_exact_for_every_value():
    v = np.arange(-8, 8, dtype=np.int8).reshape(2, 8)
    assert unpack_int4(pack_int4(v, True), True).tolist() == v.tolist()
    u = np.arange(0, 16, dtype=np.uint8).reshape(1, 16)
    assert unpack_int4(pack_int4(u, False), False).tolist() == u.tolist()


def test_bad_params_are_refused():
    w = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError):
        quantize(w, QuantParams(3, 4, True))
    with pytest.raises(ValueError):
        quantize(w, QuantParams(8, 5, True))


# -- supergrep quantize on tiny models ---------------------------------------------------------


@pytest.fixture(scope="module")
def quantized(tmp_path_factory, tiny_projected):
    from supergrep.export.quantized import quantize_model

    root = tmp_path_factory.mktemp("quantized")
    return {bits: quantize_model(tiny_projected, root / f"q{bits}", bits=bits) for bits in (8, 4)}


def test_quantized_directory_loads_with_model_path_and_keeps_settings(quantized, tiny_projected):
    from supergrep.encoder import Encoder, resolve_model

    src = resolve_model(tiny_projected)
    for bits, rep in quantized.items():
        spec = resolve_model(rep.output)
        assert spec.layout == "supergrep" and spec.form == f"q{bits}g64"
        assert spec.settings == src.settings and spec.dim == src.dim == 8
        assert spec.quantization["bits"] == bits and len(spec.dense) == 1  # the projection stays float
        meta = json.loads((rep.output / "supergrep_model.json").read_text())
        assert meta["source"]["fingerprint"] == src.fingerprint()
        assert "embeddings.word_embeddings.weight" in meta["quantization"]["tensors"]
        assert not any("pooler" in k for k in meta["quantization"]["tensors"])
        vecs = Encoder(spec, device="cpu").encode_documents(["def f(x):\n    return x + 1"])[0]
        assert vecs.shape[1] == 8 and np.allclose(np.linalg.norm(vecs, axis=1), 1, atol=1e-5)


def test_sizes_and_parity(quantized):
    q8, q4 = quantized[8], quantized[4]
    # The tiny model is mostly its 30522 x 32 embedding table, quantized too.
    assert q8.ratio <= 0.30 and q4.ratio < q8.ratio
    assert q8.parity.mean_cos >= 0.99 and q8.parity.compatible
    assert q4.parity.mean_cos < q8.parity.mean_cos
    assert q8.quantized == {8: 15}  # 12 Linear + 3 Embedding


def test_compatible_quantization_shares_indexes_with_its_source(quantized, tiny_projected):
    from supergrep.encoder import resolve_model

    src = resolve_model(tiny_projected)
    spec = resolve_model(quantized[8].output)
    fp = spec.fingerprint()
    assert fp != src.fingerprint() and spec.compatible_fingerprints(fp) == [fp, src.fingerprint()]


def test_layer_overrides_and_no_embeddings(tmp_path, tiny_model):
    from supergrep.export.quantized import LayerRule, quantize_model

    rules = [LayerRule.parse("encoder.layer.**=4"), LayerRule.parse("re:layer\\.1\\.output=0")]
    rep = quantize_model(tiny_model, tmp_path / "mixed", bits=8, rules=rules, embeddings=False, check=False)
    tensors = json.loads((rep.output / "supergrep_model.json").read_text())["quantization"]["tensors"]
    assert "embeddings.word_embeddings.weight" not in tensors
    assert tensors["encoder.layer.0.output.dense.weight"]["bits"] == 4
    assert "encoder.layer.1.output.dense.weight" not in tensors  # kept float by the regex
    assert rep.quantized == {4: 11} and rep.kept_float == 4  # 3 embeddings + 1 Linear


def test_tied_weights_are_stored_once(tmp_path):
    from supergrep.encoder import Encoder, resolve_model
    from supergrep.export.quantized import quantize_model
    from tiny_models import make_t5

    t5 = make_t5(tmp_path / "t5", arch="encoder", tokenizer="json", dense="safetensors")
    rep = quantize_model(t5, tmp_path / "t5-q8", bits=8)
    meta = json.loads((rep.output / "supergrep_model.json").read_text())
    assert meta["quantization"]["aliases"]  # shared <-> encoder.embed_tokens
    assert rep.parity.mean_cos > 0.99
    Encoder(resolve_model(rep.output), device="cpu").encode_queries(["open a file"])


@pytest.mark.parametrize("kwargs, needle", [
    ({"bits": 3}, "--bits must be 8 or 4"),
    ({"group_size": 0}, "--group-size"),
    ({"group_size": 7}, "--group-size"),
])
def test_bad_options(tmp_path, tiny_model, kwargs, needle):
    from supergrep.export.quantized import quantize_model

    with pytest.raises(UsageError, match=needle):
        quantize_model(tiny_model, tmp_path / "out", **kwargs)


@pytest.mark.parametrize("text, needle", [
    ("encoder.layer.*", "PATTERN=BITS"),
    ("encoder.*=2", "BITS must be 0"),
    ("re:layer[=8", "bad regular expression"),
])
def test_bad_layer_rules(text, needle):
    from supergrep.export.quantized import LayerRule

    with pytest.raises(UsageError, match=needle):
        LayerRule.parse(text)


def test_a_rule_that_matches_nothing_is_an_error(tmp_path, tiny_model):
    from supergrep.export.quantized import LayerRule, quantize_model

    with pytest.raises(UsageError, match="matches no Linear"):
        quantize_model(tiny_model, tmp_path / "out", rules=[LayerRule.parse("decoder.*=4")])
    assert not (tmp_path / "out").exists()


def test_refuses_a_non_empty_output_and_an_already_quantized_input(tmp_path, quantized, tiny_model):
    from supergrep.export.quantized import quantize_model

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("keep me")
    with pytest.raises(UsageError, match="--force"):
        quantize_model(tiny_model, tmp_path / "full")
    with pytest.raises(UsageError, match="already quantized"):
        quantize_model(quantized[8].output, tmp_path / "again")


def test_damaged_quantized_weights_are_a_model_error(tmp_path, quantized):
    import shutil

    from supergrep.encoder import Encoder, resolve_model
    from supergrep.errors import ModelError

    bad = tmp_path / "bad"
    shutil.copytree(quantized[8].output, bad)
    (bad / "model.quantized.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ModelError, match="cannot be read"):
        Encoder(resolve_model(bad), device="cpu")
    (bad / "model.quantized.safetensors").unlink()
    with pytest.raises(ModelError, match="missing"):
        resolve_model(bad)
