"""ONNX export + the onnxruntime backend: parity with torch, dynamic axes, the torch-free
tokenizer, compatible fingerprints, and loading through --model-path / --backend."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

DOCS = ["def add(a, b):\n    return a + b", "class Cache:\n    def get(self, key): ...",
        "x" * 300, "open the config file and parse it " * 20]


def test_fp32_export_matches_torch_and_shares_its_fingerprint(onnx_dirs, tiny_projected):
    from supergrep.encoder import Encoder, resolve_model

    spec = resolve_model(onnx_dirs["fp32"])
    src = resolve_model(tiny_projected)
    assert spec.onnx_file is not None and spec.dim == src.dim == 8 and spec.form == "onnx-fp32"
    assert spec.settings == src.settings
    meta = json.loads((onnx_dirs["fp32"] / "supergrep_model.json").read_text())
    assert meta["parity"]["mean_cos"] > 0.9999 and meta["source"]["compatible"]
    enc = Encoder(spec, backend="onnx", device="cpu")
    ref = Encoder(src, backend="torch", device="cpu")
    for a, b in zip(ref.encode_documents(DOCS), enc.encode_documents(DOCS), strict=True):
        assert a.shape == b.shape and np.abs(a - b).max() < 1e-4
    assert src.fingerprint() in enc.compatible_fingerprints


def test_int8_export_is_smaller_and_close(onnx_dirs):
    from supergrep.encoder import Encoder, resolve_model

    fp32 = (onnx_dirs["fp32"] / "model.onnx").stat().st_size
    int8 = (onnx_dirs["int8"] / "model.onnx").stat().st_size
    assert int8 < 0.5 * fp32
    meta = json.loads((onnx_dirs["int8"] / "supergrep_model.json").read_text())
    assert meta["onnx"]["int8"] and meta["form"] == "onnx-int8"
    assert meta["onnx"]["float_layers"] == ["encoder.layer.0.output.dense", "encoder.layer.1.output.dense"]
    assert meta["parity"]["mean_cos"] > 0.95
    import onnx

    graph = onnx.load(str(onnx_dirs["int8"] / "model.onnx")).graph
    inits = {i.name: i.data_type for i in graph.initializer}
    float_weights = [n.input[1] for n in graph.node if n.op_type == "MatMul" and n.input[1] in inits]
    assert float_weights == []  # the float layers' weights are stored as float16, cast at load
    casts = [n for n in graph.node if n.op_type == "Cast" and inits.get(n.input[0]) == onnx.TensorProto.FLOAT16]
    assert len(casts) == 2  # the two FFN output projections of the tiny model
    vecs = Encoder(resolve_model(onnx_dirs["int8"]), backend="onnx", device="cpu").encode_queries(["find x"])[0]
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1, atol=1e-4)


def test_dynamic_batch_and_length(onnx_dirs):
    from supergrep.backends.onnx_backend import OnnxBackend
    from supergrep.encoder import resolve_model

    be = OnnxBackend(resolve_model(onnx_dirs["fp32"]), device="cpu")
    for batch, length in ((1, 3), (5, 40), (3, 48)):
        ids = np.full((batch, length), 1000, np.int64)
        mask = np.ones_like(ids)
        mask[0, length // 2:] = 0
        out = be.forward(ids, mask)
        assert out.shape == (batch, length, 8) and out.dtype == np.float32


def test_exported_tokenizer_needs_neither_transformers_nor_torch(onnx_dirs):
    code = (
        "import sys\n"
        "from supergrep.encoder import Encoder, resolve_model\n"
        f"e = Encoder(resolve_model({str(onnx_dirs['int8'])!r}), backend='onnx', device='cpu')\n"
        "e.encode_queries(['open a file']); e.encode_documents(['def f(): pass'])\n"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_exported_tokenizer_gives_the_same_ids(onnx_dirs, tiny_projected):
    from supergrep.encoder import resolve_model
    from supergrep.encoder.tokenize import ExportedTokenizer, RoleTokenizer

    got = RoleTokenizer(resolve_model(onnx_dirs["fp32"]))
    ref = RoleTokenizer(resolve_model(tiny_projected))
    assert isinstance(got.tok, ExportedTokenizer)
    texts = ["Hello World  ünïcode", "def f(x):\n\treturn x[0]", "", "[MASK] [CLS] odd"]
    for role in ("query", "document"):
        assert got(texts, role) == ref(texts, role)
    assert (got.pad_id, got.mask_id, got.skip_ids) == (ref.pad_id, ref.mask_id, ref.skip_ids)


def test_the_torch_backend_refuses_an_onnx_directory(onnx_dirs):
    from supergrep.encoder import Encoder, resolve_model
    from supergrep.errors import UsageError

    with pytest.raises(UsageError, match="--backend onnx"):
        Encoder(resolve_model(onnx_dirs["fp32"]), backend="torch", device="cpu")


def test_the_onnx_backend_refuses_a_torch_directory_and_a_gpu(onnx_dirs, tiny_model):
    from supergrep.encoder import Encoder, resolve_model
    from supergrep.errors import UsageError

    with pytest.raises(UsageError, match="export onnx"):
        Encoder(resolve_model(tiny_model), backend="onnx", device="cpu")
    with pytest.raises(UsageError, match="runs on the CPU"):
        Encoder(resolve_model(onnx_dirs["fp32"]), backend="onnx", device="cuda")


def test_a_quantized_directory_exports_with_its_rounded_weights(tmp_path, tiny_projected):
    from supergrep.encoder import Encoder, resolve_model
    from supergrep.export.onnx_graph import export_onnx
    from supergrep.export.quantized import quantize_model

    q4 = quantize_model(tiny_projected, tmp_path / "q4", bits=4, check=False).output
    rep = export_onnx(q4, tmp_path / "q4-onnx")
    a = Encoder(resolve_model(q4), backend="torch", device="cpu").encode_documents(DOCS[:2])
    b = Encoder(resolve_model(rep.output), backend="onnx", device="cpu").encode_documents(DOCS[:2])
    for x, y in zip(a, b, strict=True):
        assert np.abs(x - y).max() < 1e-4  # the ONNX graph runs the int4 grid's values


def test_export_errors(tmp_path, onnx_dirs, tiny_model):
    from supergrep.errors import UsageError
    from supergrep.export.onnx_graph import export_onnx
    from supergrep.export.quantized import LayerRule

    with pytest.raises(UsageError, match="already an ONNX export"):
        export_onnx(onnx_dirs["fp32"], tmp_path / "again")
    with pytest.raises(UsageError, match="only applies with --int8"):
        export_onnx(tiny_model, tmp_path / "x", layer_rules=[LayerRule.parse("encoder.*=0")])
    with pytest.raises(UsageError, match="matches no quantizable MatMul"):
        export_onnx(tiny_model, tmp_path / "y", int8=True, layer_rules=[LayerRule.parse("decoder.*=0")])
    assert not (tmp_path / "y").exists()


def test_layernorm_and_gelu_stay_unfused_where_onnxruntime_runs_them_slower(onnx_dirs, tmp_path):
    """onnxruntime's SkipLayerNormalization and BiasGelu CPU kernels ran slower than the plain
    ops (minilm-l3's int8 forward 1.21-1.26x faster without them): the export leaves them out,
    attention stays fused, and the session does not fuse them back (SLOW_FUSIONS are names
    onnxruntime knows: it ignores unknown ones silently, so the optimized graph is checked)."""
    import onnx
    import onnxruntime as ort

    from supergrep.backends.onnx_backend import SLOW_FUSIONS

    for form in ("fp32", "int8"):
        ops = {n.op_type for n in onnx.load(str(onnx_dirs[form] / "model.onnx")).graph.node}
        assert not ops & {"SkipLayerNormalization", "BiasGelu"}, (form, ops)
        assert ops & {"Attention", "QAttention"} and "LayerNormalization" in ops, (form, ops)

    def session_ops(disabled: list[str]) -> set[str]:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.optimized_model_filepath = str(tmp_path / "opt.onnx")
        ort.InferenceSession(str(onnx_dirs["fp32"] / "model.onnx"), so, providers=["CPUExecutionProvider"],
                             disabled_optimizers=disabled)
        return {n.op_type for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node}

    assert "SkipLayerNormalization" in session_ops([])  # what the session would do on its own
    assert not session_ops(SLOW_FUSIONS) & {"SkipLayerNormalization", "BiasGelu"}
