"""Broken model directories give a one-line ModelError that says what to do."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from supergrep.encoder import Encoder, resolve_model
from supergrep.errors import ModelError
from tiny_models import IDENTITY, random_dense, save_dense


def _raises(match: str, fn, *args, **kwargs) -> str:
    with pytest.raises(ModelError, match=match) as err:
        fn(*args, **kwargs)
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 400, msg
    return msg


def _copy(zoo, name, tmp_path):
    return shutil.copytree(zoo.path(name), tmp_path / name)


def test_missing_directory(tmp_path):
    msg = _raises("does not exist", resolve_model, tmp_path / "nope")
    assert "--model-path" in msg
    (tmp_path / "file").write_text("x")
    _raises("is a file, not a directory", resolve_model, tmp_path / "file")


def test_directory_without_config(tmp_path):
    (tmp_path / "empty").mkdir()
    msg = _raises("is not a model directory", resolve_model, tmp_path / "empty")
    assert "config.json" in msg


def test_invalid_json_in_modules_json(zoo, tmp_path):
    path = _copy(zoo, "st", tmp_path)
    (path / "modules.json").write_text('[{"idx": 0, "type": ')
    _raises(r"modules.json: invalid JSON .* damaged", resolve_model, path)
    (path / "modules.json").write_text('{"idx": 0}')
    _raises("expected a list of module objects", resolve_model, path)


def test_invalid_config_json(zoo, tmp_path):
    path = _copy(zoo, "bert", tmp_path)
    (path / "config.json").write_text("{")
    _raises(r"config.json: invalid JSON", resolve_model, path)
    (path / "config.json").write_text('{"model_type": "bert"}')
    _raises("no model_type/hidden size", resolve_model, path)


def test_transformer_module_without_config(zoo, tmp_path):
    path = _copy(zoo, "st", tmp_path)
    mods = json.loads((path / "modules.json").read_text())
    mods[0]["path"] = "0_Transformer"
    (path / "modules.json").write_text(json.dumps(mods))
    (path / "0_Transformer").mkdir()
    _raises("0_Transformer has no config.json", resolve_model, path)


def test_unsupported_module(zoo, tmp_path):
    path = _copy(zoo, "st", tmp_path)
    mods = json.loads((path / "modules.json").read_text())
    mods.insert(1, {"idx": 1, "name": "x", "path": "x", "type": "sentence_transformers.models.LSTM"})
    for i, m in enumerate(mods):
        m["idx"] = i
    (path / "modules.json").write_text(json.dumps(mods))
    _raises("unsupported module 'sentence_transformers.models.LSTM'", resolve_model, path)


def test_dense_weight_shape_mismatch(zoo, tmp_path):
    path = _copy(zoo, "t5-encoder-json-safetensors", tmp_path)
    save_dense(path / "2_Dense", random_dense(32, 8)[0])  # weight (8, 32)...
    cfg = json.loads((path / "2_Dense" / "config.json").read_text())
    cfg["out_features"] = 16  # ...config says 16
    (path / "2_Dense" / "config.json").write_text(json.dumps(cfg))
    spec = resolve_model(path)
    msg = _raises(r"Dense weight has shape \(8, 32\), expected \(16, 32\)", Encoder, spec, device="cpu")
    assert "do not match" in msg


def test_dense_bias_missing(zoo, tmp_path):
    path = _copy(zoo, "t5-encoder-json-safetensors", tmp_path)
    cfg = json.loads((path / "2_Dense" / "config.json").read_text())
    cfg["bias"] = True
    (path / "2_Dense" / "config.json").write_text(json.dumps(cfg))
    _raises("bias=true but the weights have no bias", Encoder, resolve_model(path), device="cpu")


@pytest.mark.parametrize("activation", ["torch.nn.modules.activation.Softmax", "my_pkg.MyActivation", "Linear"])
def test_unsupported_activation(zoo, tmp_path, activation):
    path = _copy(zoo, "t5-encoder-json-safetensors", tmp_path)
    cfg = json.loads((path / "2_Dense" / "config.json").read_text())
    cfg["activation_function"] = activation
    (path / "2_Dense" / "config.json").write_text(json.dumps(cfg))
    msg = _raises("unsupported Dense activation", resolve_model, path)
    assert "Tanh" in msg  # says what is supported


def test_dense_without_weights_or_config(zoo, tmp_path):
    path = _copy(zoo, "t5-encoder-json-safetensors", tmp_path)
    (path / "2_Dense" / "model.safetensors").unlink()
    spec = resolve_model(path)
    _raises("Dense layer has no model.safetensors or pytorch_model.bin", spec.fingerprint)
    _raises("Dense layer has no model.safetensors", Encoder, spec, device="cpu")
    (path / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 32}))
    _raises("needs in_features and out_features", resolve_model, path)


class NotATensor:
    pass


def test_pickled_objects_are_not_loaded(zoo, tmp_path):
    """Legacy .bin weights are read with weights_only=True: arbitrary pickles are refused."""
    path = _copy(zoo, "t5-encoder-json-safetensors", tmp_path)
    (path / "2_Dense" / "model.safetensors").unlink()
    torch.save({"linear.weight": random_dense(32, 16)[0], "x": NotATensor()}, path / "2_Dense" / "pytorch_model.bin")
    msg = _raises("pytorch_model.bin: cannot be read as weights", Encoder, resolve_model(path), device="cpu")
    assert "safetensors" in msg


def test_missing_transformer_weights(zoo, tmp_path):
    path = _copy(zoo, "bert", tmp_path)
    (path / "model.safetensors").unlink()
    spec = resolve_model(path)
    _raises("no weights .* found; the model directory is incomplete", spec.fingerprint)
    _raises("no weights", Encoder, spec, device="cpu")


def test_weights_of_another_architecture(zoo, tmp_path):
    path = _copy(zoo, "bert", tmp_path)
    shutil.copy(zoo.path("roberta") / "model.safetensors", path / "model.safetensors")
    vocab = json.loads((path / "config.json").read_text())["vocab_size"]
    (path / "config.json").write_text(json.dumps({
        "model_type": "t5", "architectures": ["T5EncoderModel"], "vocab_size": vocab,
        "d_model": 32, "num_layers": 2, "num_heads": 2, "d_kv": 16, "d_ff": 64}))
    _raises("the weights do not match config.json|weight shapes do not match", Encoder,
            resolve_model(path), device="cpu")


def test_corrupt_weights(zoo, tmp_path):
    path = _copy(zoo, "bert", tmp_path)
    (path / "model.safetensors").write_bytes(b"\x00garbage")
    _raises("cannot load the model .* copy the model directory again", Encoder, resolve_model(path), device="cpu")
    shutil.copy(zoo.path("mpnet") / "model.safetensors", path / "model.safetensors")  # other shapes
    _raises("weight shapes do not match|weights do not match", Encoder, resolve_model(path), device="cpu")


def test_dense_in_features_must_match_hidden_size(zoo, tmp_path):
    path = _copy(zoo, "st", tmp_path)
    save_dense(path / "2_Dense", random_dense(16, 8)[0], activation=IDENTITY)
    _raises("in_features is 16 but the transformer's hidden size is 32", resolve_model, path)
