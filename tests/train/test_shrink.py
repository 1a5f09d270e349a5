"""`supergrep shrink`: a layer-dropped student distilled from its base, and every loader of it."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from cli_runner import run_main
from supergrep.encoder.encoder import Encoder
from supergrep.encoder.spec import resolve_model
from supergrep.train.shrink import LAYERS_FILE, ShrinkConfig, shrink_model

TEXTS = ["def parse_config(path):\n    return toml.load(open(path))", "merge two sorted lists into one",
         "class Cache:\n    def get(self, key): return self.data[key]"]


def make_deep_bert(path: Path) -> Path:
    """A 4-layer tiny BERT (MiniLM's tokenizer), initialised wide enough (std 0.2) that its
    layers change the vectors: dropping two of them costs a measurable token cosine."""
    import torch
    from transformers import BertConfig, BertModel

    from supergrep.encoder.spec import default_model_dir

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=512, initializer_range=0.2)
    BertModel(cfg).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(default_model_dir() / name, path / name)
    return path


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    return make_deep_bert(tmp_path_factory.mktemp("deep") / "bert4")


def _cfg(pairs: Path, model: Path, output: Path, **kw) -> ShrinkConfig:
    base = dict(pairs=pairs, output=output, layers=(0, 2), model_path=str(model), val_pairs=40, steps=40,
                batch_size=8, lr=3e-3, max_document_tokens=64, device="cpu")
    return ShrinkConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def shrunk(tmp_path_factory, pairs_file, teacher):
    out = tmp_path_factory.mktemp("shrunk") / "student"
    return out, shrink_model(_cfg(pairs_file, teacher, out))


def test_distillation_lowers_the_loss_and_raises_token_cosine(shrunk):
    _, report = shrunk
    start, student = report.start, report.student
    assert report.losses[-1]["loss"] < report.losses[0]["loss"]
    # held out: the loss falls and the vectors move towards the teacher's (a random model's
    # rankings are near-ties, so its ranking term alone is noise here)
    assert student.token_loss + student.rank_loss < start.token_loss + start.rank_loss
    assert student.token_cos_mean > start.token_cos_mean + 0.3
    assert student.token_cos_min > start.token_cos_min
    assert report.teacher["mrr"] > 0 and 0 <= student.agreement_at_10 <= 1


def test_the_directory_holds_the_base_by_reference_and_only_the_kept_layers(shrunk, teacher):
    import torch
    from safetensors.torch import load_file

    from supergrep.backends.torch_backend import TorchBackend

    out, report = shrunk
    meta = json.loads((out / "supergrep_model.json").read_text())
    assert Path(meta["base"]) == teacher.resolve() and meta["layers"] == {"keep": [0, 2], "of": 4, "file": LAYERS_FILE}
    assert sorted(p.name for p in out.iterdir()) == [LAYERS_FILE, "supergrep_model.json"]
    stored = load_file(str(out / LAYERS_FILE))
    assert {t.dtype for t in stored.values()} == {torch.float16}
    assert all(k.startswith("encoder.layer.0.") or k.startswith("encoder.layer.1.") for k in stored)

    spec = resolve_model(out)
    assert spec.layers.keep == (0, 2) and spec.dim == 32 and spec.path == out.resolve()
    model = TorchBackend(spec, device="cpu").model
    base = TorchBackend(resolve_model(teacher), device="cpu").model
    assert len(model.encoder.layer) == 2 and model.config.num_hidden_layers == 2
    got, want = model.state_dict(), base.state_dict()
    for k, v in got.items():
        if k in stored:
            assert torch.equal(v, stored[k].float()), k  # the trained layers, as written
        elif not k.startswith("encoder.layer."):
            assert torch.equal(v, want[k]), k  # embeddings (and the rest): the teacher's own
    assert not torch.equal(got["encoder.layer.1.attention.self.query.weight"],
                           want["encoder.layer.2.attention.self.query.weight"])  # it did train
    # another model's fingerprint: an index of the base is not silently searched with it
    assert spec.fingerprint() != resolve_model(teacher).fingerprint()
    vecs = Encoder(spec, backend="torch", device="cpu").encode_documents(TEXTS)
    assert all(v.shape[1] == 32 and np.allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5) for v in vecs)


def test_onnx_export_of_a_shrunk_model_matches_torch(shrunk, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from supergrep.export.onnx_graph import export_onnx

    out, _ = shrunk
    rep = export_onnx(out, tmp_path / "onnx")
    assert rep.parity.mean_cos > 0.9999
    assert json.loads((tmp_path / "onnx" / "config.json").read_text())["num_hidden_layers"] == 2
    ref = Encoder(resolve_model(out), backend="torch", device="cpu").encode_documents(TEXTS)
    got = Encoder(resolve_model(tmp_path / "onnx"), backend="onnx", device="cpu").encode_documents(TEXTS)
    for a, b in zip(ref, got, strict=True):
        assert a.shape == b.shape and (a * b).sum(1).min() > 0.9999


def test_mlx_loads_the_same_student(shrunk):
    pytest.importorskip("mlx.core", reason="MLX is not installed")
    out, _ = shrunk
    spec = resolve_model(out)
    ref = Encoder(spec, backend="torch", device="cpu").encode_documents(TEXTS)
    got = Encoder(spec, backend="mlx", device="cpu").encode_documents(TEXTS)
    for a, b in zip(ref, got, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-4)


def test_a_t5_student_keeps_the_position_bias_and_projection(tmp_path, pairs_file, tiny_t5):
    """Dropping T5's block 0 moves its relative position bias to the new first block."""
    out = tmp_path / "t5"
    report = shrink_model(_cfg(pairs_file, tiny_t5, out, layers=(1,), steps=4))
    assert report.layers == [1]
    spec = resolve_model(out)
    vecs = Encoder(spec, backend="torch", device="cpu").encode_documents(TEXTS)
    assert vecs[0].shape[1] == 16  # the base's 2_Dense projection, applied as it was
    from supergrep.backends.torch_backend import TorchBackend

    model = TorchBackend(spec, device="cpu").model
    assert len(model.encoder.block) == 1 and model.encoder.block[0].layer[0].SelfAttention.has_relative_attention_bias
    if importlib.util.find_spec("mlx") is not None:  # MLX renumbers the keys and moves the bias alike
        got = Encoder(spec, backend="mlx", device="cpu").encode_documents(TEXTS)
        for a, b in zip(vecs, got, strict=True):
            np.testing.assert_allclose(a, b, atol=1e-4)


def test_quantizing_a_shrunk_model_writes_a_model_of_its_layers(shrunk, tmp_path):
    from supergrep.backends.torch_backend import TorchBackend
    from supergrep.export.quantized import quantize_model

    out, _ = shrunk
    quantize_model(out, tmp_path / "q8", bits=8, check=False)
    assert json.loads((tmp_path / "q8" / "config.json").read_text())["num_hidden_layers"] == 2
    assert len(TorchBackend(resolve_model(tmp_path / "q8"), device="cpu").model.encoder.layer) == 2
    ref = Encoder(resolve_model(out), backend="torch", device="cpu").encode_documents(TEXTS)
    got = Encoder(resolve_model(tmp_path / "q8"), backend="torch", device="cpu").encode_documents(TEXTS)
    for a, b in zip(ref, got, strict=True):
        assert (a * b).sum(1).mean() > 0.99


@pytest.mark.parametrize("layers,message", [
    ("0,9", "layer 9 does not exist: the model has layers 0-3"),
    ("1,1", "layer 1 is listed twice"),
    ("", "--layers is empty"),
    ("0,x", "expected comma-separated layer numbers"),
    ("2,0", "not in increasing order"),
    ("0,1,2,3", "nothing to drop"),
])
def test_bad_layers_are_one_line_errors_with_exit_2(tmp_path, pairs_file, teacher, layers, message):
    r = run_main(["shrink", pairs_file, "-o", tmp_path / "s", "--model-path", teacher, "--layers", layers,
                  "--device", "cpu"])
    assert r.exit_code == 2 and message in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


def test_malformed_pairs_name_the_line(tmp_path, teacher):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "parse a file", "code": "def f(): pass"}\n{"query": \n')
    r = run_main(["shrink", bad, "-o", tmp_path / "s", "--model-path", teacher, "--layers", "0,2", "--device", "cpu"])
    assert r.exit_code == 2 and "bad.jsonl:2" in r.output and len(r.output.strip().splitlines()) == 1


def test_an_interrupted_write_leaves_the_old_directory_and_no_temporary(shrunk, tmp_path, pairs_file, teacher,
                                                                         monkeypatch):
    import safetensors.torch

    out = tmp_path / "student"
    shutil.copytree(shrunk[0], out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    stale = tmp_path / ".student.999999999.tmp"  # left by a run that was killed (no such process)
    stale.mkdir()

    def killed(state, path, metadata=None):
        Path(path).write_bytes(b"half a file")
        raise KeyboardInterrupt  # Ctrl-C (or a kill) in the middle of writing

    monkeypatch.setattr(safetensors.torch, "save_file", killed)
    with pytest.raises(KeyboardInterrupt):
        shrink_model(_cfg(pairs_file, teacher, out, steps=2, force=True))
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert resolve_model(out).layers.keep == (0, 2)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_refuses_a_busy_output_and_an_adapter_or_shrunk_base(tmp_path, pairs_file, teacher, shrunk):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("x")
    r = run_main(["shrink", pairs_file, "-o", tmp_path / "busy", "--model-path", teacher, "--device", "cpu"])
    assert r.exit_code == 2 and "--force" in r.output and (tmp_path / "busy" / "keep.txt").read_text() == "x"
    r = run_main(["shrink", pairs_file, "-o", tmp_path / "again", "--model-path", shrunk[0], "--layers", "0",
                  "--device", "cpu"])
    assert r.exit_code == 2 and "already layer-dropped" in r.output


def test_a_directory_whose_base_changed_is_refused(shrunk, tmp_path, tiny_model):
    """The stored layers belong to one base: pointed at another, loading says so."""
    out = tmp_path / "moved"
    shutil.copytree(shrunk[0], out)
    meta = json.loads((out / "supergrep_model.json").read_text())
    meta["base"] = str(tiny_model)  # a 2-layer model
    (out / "supergrep_model.json").write_text(json.dumps(meta))
    with pytest.raises(Exception, match="made from a 4-layer model"):
        resolve_model(out)
