"""Encoder: shapes, norms, row counts, and vectors equal to a reference computed directly with
transformers + the Dense weights, for every layout."""

from __future__ import annotations

import numpy as np
import pytest

from supergrep.encoder import Encoder, resolve_model
from tiny_models import T5_MODELS, hf_tokenizer, reference_vectors

DOCS = [
    "def parse_config(path):\n    return json.load(open(path))",
    "class Index:\n    def search(self, query): ...",
    "x = a[0] + b.value  # read, then write!",
    "open file",
    "search the vector index for a query token " * 12,
]
QUERIES = ["parse a json config file", "search index"]
ALL = ["bert", "mpnet", "roberta", *T5_MODELS, "st", "pylate", "supergrep"]


def _check_unit_rows(mats, dim):
    for m in mats:
        assert m.dtype == np.float32 and m.ndim == 2 and m.shape[1] == dim
        assert m.flags.c_contiguous
        np.testing.assert_allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-5)


def _expected_ids(spec, hf, text, role):
    """Token ids the model should see, computed from the model's own tokenizer."""
    s = spec.settings
    n = s.query_max_tokens if role == "query" else s.document_max_tokens
    prefix = s.query_prefix if role == "query" else s.document_prefix
    if spec.layout == "pylate":  # prefix token inserted after [CLS] (PyLate)
        plain = hf(text.strip(), truncation=True, max_length=n - 1)["input_ids"]
        return plain[:1] + [hf.convert_tokens_to_ids(prefix)] + plain[1:]
    return hf((prefix + text).strip(), truncation=True, max_length=n)["input_ids"]


@pytest.mark.parametrize("name", ALL)
def test_documents_match_reference(zoo, name):
    enc = zoo.encoder(name)
    spec = enc.spec
    hf = hf_tokenizer(spec.transformer_path)
    out = enc.encode_documents(DOCS)
    assert len(out) == len(DOCS)
    _check_unit_rows(out, spec.dim)
    skip = {hf.convert_tokens_to_ids(w) for w in spec.settings.skiplist}
    for text, got in zip(DOCS, out, strict=True):
        ids = _expected_ids(spec, hf, text, "document")
        keep = [t not in skip for t in ids]
        want = reference_vectors(spec.transformer_path, ids, [d.path for d in spec.dense])[keep]
        assert got.shape == want.shape  # one row per real token, skiplist removed
        np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("name", ALL)
def test_queries_match_reference(zoo, name):
    enc = zoo.encoder(name)
    spec = enc.spec
    s = spec.settings
    hf = hf_tokenizer(spec.transformer_path)
    out = enc.encode_queries(QUERIES)
    _check_unit_rows(out, spec.dim)
    for text, got in zip(QUERIES, out, strict=True):
        ids = _expected_ids(spec, hf, text, "query")
        attention = [1] * len(ids)
        if s.query_expansion:  # pad with [MASK] to query_length, not attended
            n = s.query_max_tokens
            ids = ids + [hf.mask_token_id] * (n - len(ids))
            attention = attention + [int(s.attend_to_expansion_tokens)] * (n - len(attention))
        want = reference_vectors(spec.transformer_path, ids, [d.path for d in spec.dense], attention)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_pylate_query_expansion_and_truncation(zoo):
    enc = zoo.encoder("pylate")
    q = enc.encode_queries(["a", "open the file " * 20])
    assert [m.shape[0] for m in q] == [12, 12]  # always query_length rows
    # the expansion rows differ from each other only through position: not all identical
    assert not np.allclose(q[0][3], q[0][4])
    d = enc.encode_documents(["open the file " * 20])[0]
    assert d.shape[0] == 20  # document_length (no punctuation to skip)


def test_attend_to_expansion_tokens_changes_real_token_vectors(zoo, tmp_path):
    import dataclasses

    base = zoo.encoder("pylate")
    spec = dataclasses.replace(base.spec, settings=dataclasses.replace(
        base.spec.settings, attend_to_expansion_tokens=True))
    enc = Encoder(spec, device="cpu")
    a = base.encode_queries(["open file"])[0]
    b = enc.encode_queries(["open file"])[0]
    assert a.shape == b.shape == (12, 16)
    assert not np.allclose(a[:3], b[:3], atol=1e-4)
    hf = hf_tokenizer(spec.transformer_path)
    ids = _expected_ids(spec, hf, "open file", "query")
    ids = ids + [hf.mask_token_id] * (12 - len(ids))
    want = reference_vectors(spec.transformer_path, ids, [d.path for d in spec.dense], [1] * 12)
    np.testing.assert_allclose(b, want, atol=1e-5)


def test_skiplist_removes_rows(zoo):
    enc = zoo.encoder("pylate")
    hf = hf_tokenizer(enc.spec.transformer_path)
    text = "a, b. (c)"
    n_tokens = len(_expected_ids(enc.spec, hf, text, "document"))
    doc = enc.encode_documents([text])[0]
    assert n_tokens == 10 and doc.shape[0] == n_tokens - 4  # , . ( ) dropped
    assert enc.encode_queries([text])[0].shape[0] == 12  # never for queries


@pytest.mark.parametrize("name", ["bert", "t5-full-json-bin", "pylate"])
def test_batching_keeps_order_and_matches_one_by_one(zoo, name):
    enc = zoo.encoder(name)  # batch_tokens=256: several length-sorted batches
    texts = [("open file " * (i % 7 + 1)) + f"item {i}" for i in range(23)] + DOCS
    done: list[int] = []
    batched = enc.encode_documents(texts, progress=done.append)
    assert sum(done) == len(texts) and len(done) > 1
    for text, got in zip(texts, batched, strict=True):
        one = enc.encode_documents([text])[0]
        assert got.shape == one.shape
        np.testing.assert_allclose(got, one, atol=1e-5)
    queries = enc.encode_queries(texts[:9])
    for text, got in zip(texts[:9], queries, strict=True):
        np.testing.assert_allclose(got, enc.encode_queries([text])[0], atol=1e-5)


def test_empty_input_and_counts(zoo):
    enc = zoo.encoder("bert")
    assert enc.encode_documents([]) == [] and enc.encode_queries([]) == []
    assert enc.count_tokens([]) == []
    assert enc.count_tokens(["open file", ""]) == [4, 2]
    assert enc.encode_documents([""])[0].shape == (2, 32)  # [CLS] [SEP]
    assert enc.dim == 32 and enc.name == "bert"
    assert enc.backend.device == "cpu" and enc.backend.dtype == "float32"


def test_encoder_loads_the_default_spec_when_none(monkeypatch, zoo):
    monkeypatch.setenv("SUPERGREP_MODEL", str(zoo.path("mpnet")))
    enc = Encoder(device="cpu")
    assert enc.spec.model_type == "mpnet"


def test_legacy_bin_transformer_weights(zoo, tmp_path):
    """XTR ships the T5 weights as pytorch_model.bin: loaded (weights_only) like safetensors."""
    import shutil

    import torch
    from safetensors.torch import load_file

    path = tmp_path / "xtr"
    shutil.copytree(zoo.path("t5-encoder-json-safetensors"), path)
    state = load_file(str(path / "model.safetensors"))
    (path / "model.safetensors").unlink()
    torch.save(state, path / "pytorch_model.bin")
    got = Encoder(resolve_model(path), device="cpu").encode_documents(DOCS[:2])
    want = zoo.encoder("t5-encoder-json-safetensors").encode_documents(DOCS[:2])
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_dense_activation_bias_and_residual(zoo, tmp_path):
    """Tanh activation with bias (sentence-transformers), and PyLate's use_residual."""
    import json
    import shutil

    from tiny_models import IDENTITY, make_sentence_transformers

    path = make_sentence_transformers(tmp_path / "st", dense_out=32,
                                      activation="torch.nn.modules.activation.Tanh")
    enc = Encoder(resolve_model(path), device="cpu")
    hf = hf_tokenizer(path)
    ids = hf("open file")["input_ids"]
    want = reference_vectors(path, ids, [path / "2_Dense"], activation="Tanh")
    np.testing.assert_allclose(enc.encode_documents(["open file"])[0], want, atol=1e-5)

    # PyLate use_residual with in == out: y = linear(x) + x
    cfg = json.loads((path / "2_Dense" / "config.json").read_text())
    cfg.update(activation_function=IDENTITY, use_residual=True)
    (path / "2_Dense" / "config.json").write_text(json.dumps(cfg))
    spec = resolve_model(path)
    assert spec.dense[0].residual
    got = Encoder(spec, device="cpu").encode_documents(["open file"])[0]
    import torch

    from supergrep.backends.torch_backend import load_transformer

    model = load_transformer(spec, torch.float32)
    with torch.no_grad():
        h = model(input_ids=torch.tensor([ids])).last_hidden_state[0]
        from tiny_models import dense_weights

        w, b = dense_weights(path / "2_Dense")
        want = torch.nn.functional.normalize(h @ w.T + b + h, dim=-1).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5)
    shutil.rmtree(path)
