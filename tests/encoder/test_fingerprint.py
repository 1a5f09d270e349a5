"""fingerprint(): the index key. Stable for the same content, changed by anything that
changes the vectors (weights, Dense, tokenizer, settings)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import torch

from supergrep.encoder.spec import resolve_model
from tiny_models import make_bert, random_dense, save_dense


def _fp(path) -> str:
    return resolve_model(path).fingerprint()


def test_stable_and_content_addressed(zoo, tmp_path):
    a = _fp(zoo.path("pylate"))
    assert a == _fp(zoo.path("pylate")) and len(a) == 64
    copy = shutil.copytree(zoo.path("pylate"), tmp_path / "elsewhere")
    assert _fp(copy) == a  # a copied model keeps its fingerprint
    os.utime(copy / "model.safetensors")  # touched, same content
    assert _fp(copy) == a
    # the same seed rebuilt elsewhere: same bytes, same fingerprint
    assert _fp(make_bert(tmp_path / "b1", seed=3)) == _fp(make_bert(tmp_path / "b2", seed=3))


def test_changes_with_transformer_weights(tmp_path):
    path = make_bert(tmp_path / "b", seed=0)
    before = _fp(path)
    other = make_bert(tmp_path / "other", seed=1)
    shutil.copy(other / "model.safetensors", path / "model.safetensors")  # same size, new bytes
    assert (path / "model.safetensors").stat().st_size == (other / "model.safetensors").stat().st_size
    assert _fp(path) != before


def test_changes_with_dense_weights_and_shape(zoo, tmp_path):
    path = shutil.copytree(zoo.path("t5-encoder-spiece-bin"), tmp_path / "t5")
    before = _fp(path)
    w = torch.load(path / "2_Dense" / "pytorch_model.bin", weights_only=True)["linear.weight"]
    w = w.clone()
    w[0, 0] += 1.0
    torch.save({"linear.weight": w}, path / "2_Dense" / "pytorch_model.bin")
    changed = _fp(path)
    assert changed != before
    assert _fp(path) == changed
    save_dense(path / "2_Dense", random_dense(32, 8)[0], fmt="bin")
    assert _fp(path) not in (before, changed)


def test_changes_with_settings(zoo, tmp_path):
    spec = resolve_model(zoo.path("pylate"))
    base = spec.fingerprint()
    for change in ({"query_prefix": "[q] "}, {"document_max_tokens": 19}, {"query_expansion": False},
                   {"attend_to_expansion_tokens": True}, {"skiplist": (",",)}):
        other = dataclasses.replace(spec, settings=dataclasses.replace(spec.settings, **change))
        assert other.fingerprint() != base, change
    # through the config file, too
    path = shutil.copytree(zoo.path("pylate"), tmp_path / "p")
    cfg = json.loads((path / "config_sentence_transformers.json").read_text())
    cfg["query_length"] = 16
    (path / "config_sentence_transformers.json").write_text(json.dumps(cfg))
    assert _fp(path) != base
    # a setting that does not exist in the file -> same as before
    cfg["query_length"] = 12
    cfg["similarity_fn_name"] = "cosine"
    (path / "config_sentence_transformers.json").write_text(json.dumps(cfg))
    assert _fp(path) == base


def test_changes_with_tokenizer_and_config(tmp_path):
    path = make_bert(tmp_path / "b")
    before = _fp(path)
    tok = json.loads((path / "tokenizer.json").read_text())
    tok["normalizer"]["lowercase"] = not tok["normalizer"]["lowercase"]
    (path / "tokenizer.json").write_text(json.dumps(tok))
    after_tok = _fp(path)
    assert after_tok != before
    cfg = json.loads((path / "config.json").read_text())
    cfg["layer_norm_eps"] = 1e-5
    (path / "config.json").write_text(json.dumps(cfg))
    assert _fp(path) not in (before, after_tok)


def test_supergrep_settings_and_projection(zoo, tmp_path):
    path = shutil.copytree(zoo.path("supergrep"), tmp_path / "sg")
    # relative base: point it back at the zoo's bert
    data = json.loads((path / "supergrep_model.json").read_text())
    data["base"] = str(zoo.path("bert"))
    (path / "supergrep_model.json").write_text(json.dumps(data))
    before = _fp(path)
    assert before == _fp(zoo.path("supergrep"))
    data["name"] = "renamed"  # the name does not change vectors
    (path / "supergrep_model.json").write_text(json.dumps(data))
    assert _fp(path) == before
    data["settings"]["document_max_tokens"] = 30
    (path / "supergrep_model.json").write_text(json.dumps(data))
    assert _fp(path) != before
