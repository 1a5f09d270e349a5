"""`supergrep quantize`, `supergrep export` and `--backend` as users drive them: reports, exit
codes, one-line errors, and every form indexing and searching through --model-path/--backend."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from supergrep.cli import main


class _Main:
    name = "supergrep"

    def main(self, args=None, prog_name=None, **_):
        main(list(args or []))


def run(*args):
    return CliRunner().invoke(_Main(), [str(a) for a in args], catch_exceptions=False)


def one_line_usage_error(r, needle: str) -> None:
    assert r.exit_code == 2, r.output
    assert needle in r.output and len(r.output.strip().splitlines()) == 1, r.output


def test_quantize_reports_sizes_and_parity(tmp_path, tiny_projected):
    r = run("quantize", tiny_projected, "-o", tmp_path / "q8", "--bits", "8", "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["bytes_after"] < 0.3 * rep["bytes_before"] and rep["ratio"] == pytest.approx(
        rep["bytes_after"] / rep["bytes_before"], abs=1e-4)
    assert rep["quantized"] == {"8": 15} and rep["parity"]["mean_cos"] >= 0.99
    r = run("quantize", tiny_projected, "-o", tmp_path / "q4", "--bits", "4", "--group-size", "16",
            "--asymmetric", "--layers", "embeddings.*=8", "--no-check")
    assert r.exit_code == 0, r.output
    assert "size:" in r.output and "% of the original" in r.output
    meta = json.loads((tmp_path / "q4" / "supergrep_model.json").read_text())
    assert meta["form"] == "q4g16a" and meta["quantization"]["layers"] == ["embeddings.*=8"]
    assert meta["quantization"]["tensors"]["embeddings.word_embeddings.weight"]["bits"] == 8


@pytest.mark.parametrize("args, needle", [
    (["--bits", "3"], "--bits must be 8 or 4"),
    (["--group-size", "5"], "--group-size"),
    (["--layers", "nonsense"], "PATTERN=BITS"),
    (["--layers", "decoder.*=4"], "matches no Linear"),
])
def test_quantize_errors_are_one_line(tmp_path, tiny_model, args, needle):
    one_line_usage_error(run("quantize", tiny_model, "-o", tmp_path / "out", *args), needle)


def test_missing_model_dir_is_one_line(tmp_path):
    for cmd in (["quantize"], ["export", "onnx"], ["export", "coreml"]):
        one_line_usage_error(run(*cmd, tmp_path / "nope", "-o", tmp_path / "out.mlpackage"), "not a model directory")


def test_export_onnx_from_the_cli_then_index_and_search_with_it(tmp_path, tiny_projected, sample_project):
    pytest.importorskip("onnxruntime")
    out = tmp_path / "onnx8"
    r = run("export", "onnx", tiny_projected, "-o", out, "--int8", "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["int8"] and rep["bytes_after"] < rep["bytes_before"] and rep["parity"]["n_tokens"] > 100
    idx = ["--index-dir", tmp_path / "idx"]
    r = run("index", sample_project, "--model-path", out, "--json", *idx)  # auto: onnx for an export
    assert r.exit_code == 0, r.output
    r = run("search", "retry with backoff", sample_project, "--model-path", out, "--backend", "onnx", "--json", *idx)
    assert r.exit_code == 0 and json.loads(r.stdout)["count"] > 0
    one_line_usage_error(run("search", "x", sample_project, "--model-path", out, "--backend", "torch", *idx),
                         "--backend onnx")
    one_line_usage_error(run("export", "onnx", tiny_projected, "-o", out), "--force")
    one_line_usage_error(run("export", "onnx", tiny_projected, "-o", tmp_path / "o2", "--layers", "x=0"),
                         "only applies with --int8")


def test_an_index_built_with_torch_is_searched_with_its_onnx_export(tmp_path, tiny_projected, onnx_dirs,
                                                                     sample_project, tiny_bert_factory):
    """Compatible forms (parity >= 0.99 recorded at export) share indexes; other models do not."""
    idx = ["--index-dir", tmp_path / "idx"]
    assert run("index", sample_project, "--model-path", tiny_projected, "--backend", "torch", *idx).exit_code == 0
    for form in ("fp32", "int8"):
        r = run("search", "retry with backoff", sample_project, "--model-path", onnx_dirs[form], "--json", *idx)
        assert r.exit_code == 0, r.output
    other = tiny_bert_factory(tmp_path / "other", seed=5)
    r = run("search", "retry", sample_project, "--model-path", other, *idx)
    assert r.exit_code != 0 and "was built with model" in r.output


def test_auto_runs_the_default_model_as_int8_onnx_on_a_cpu(monkeypatch, tiny_model):
    """--backend auto: the default model's cached int8 export on a CPU-only machine; torch when
    asked, on a GPU, for other models, or when the default path is switched off."""
    pytest.importorskip("onnxruntime")
    from supergrep.cli import common
    from supergrep.config import Config
    from supergrep.encoder import spec as spec_mod
    from supergrep.encoder.spec import resolve_model

    monkeypatch.setattr(spec_mod, "default_model_dir", lambda: tiny_model)
    spec = resolve_model(tiny_model)
    cfg = Config()
    cfg.encode.device = "cpu"
    got, backend = common.choose_backend(spec, cfg)
    assert backend == "onnx" and got.form == "onnx-int8" and got.source_fingerprint == spec.fingerprint()
    assert common.choose_backend(spec, cfg)[0].path == got.path  # exported once, then reused
    cfg.encode.backend = "torch"
    assert common.choose_backend(spec, cfg) == (spec, "torch")
    cfg.encode.backend, cfg.encode.device = "auto", "cuda"
    assert common.choose_backend(spec, cfg) == (spec, "torch")
    cfg.encode.device = "cpu"
    monkeypatch.setattr(common, "DEFAULT_CPU_ONNX", False)
    assert common.choose_backend(spec, cfg) == (spec, "torch")


def test_export_coreml_from_the_cli(tmp_path, tiny_projected):
    pytest.importorskip("coremltools")
    one_line_usage_error(run("export", "coreml", tiny_projected, "-o", tmp_path / "m.onnx"), "*.mlpackage")
