"""`supergrep export coreml`: conversion and the saved spec (any OS), prediction (macOS only)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

pytest.importorskip("coremltools")


@pytest.fixture(scope="module")
def package(tmp_path_factory, tiny_projected):
    from supergrep.export.coreml import export_coreml

    out = tmp_path_factory.mktemp("coreml") / "tiny.mlpackage"
    return export_coreml(tiny_projected, out, max_batch=8)


def test_conversion_writes_a_package_with_flexible_shapes_and_metadata(package, tiny_projected):
    from supergrep.encoder import resolve_model
    from supergrep.export.coreml import import_coremltools

    ct = import_coremltools()
    assert package.output.is_dir() and package.bytes_after > 0
    assert package.max_length == 48  # the model's document_max_tokens
    spec = ct.utils.load_spec(str(package.output))
    assert spec.WhichOneof("Type") == "mlProgram"
    inputs = {i.name: i.type.multiArrayType for i in spec.description.input}
    assert set(inputs) == {"input_ids", "attention_mask"}
    for arr in inputs.values():
        assert arr.dataType == ct.proto.FeatureTypes_pb2.ArrayFeatureType.INT32
        ranges = [(r.lowerBound, r.upperBound) for r in arr.shapeRange.sizeRanges]
        assert ranges == [(1, 8), (1, 48)]  # batch 1..max_batch, length 1..max_length
    assert [o.name for o in spec.description.output] == ["vectors"]
    meta = dict(spec.description.metadata.userDefined)
    src = resolve_model(tiny_projected)
    assert json.loads(meta["supergrep.source"])["fingerprint"] == src.fingerprint()
    assert json.loads(meta["supergrep.settings"]) == src.settings.to_dict()
    assert meta["supergrep.dim"] == "8"
    assert json.loads(meta["supergrep.tokenizer"])["pad_id"] == 0
    tok = package.output.with_name("tiny.tokenizer.json")
    assert json.loads(tok.read_text())["model"]["type"] == "WordPiece"


def test_the_traced_program_computes_the_backend_forward(tiny_projected):
    """What coremltools converts (the 4-D-mask module) gives the torch backend's vectors, padding
    included; on macOS the prediction test below checks the converted program itself."""
    import torch

    from supergrep.backends.torch_backend import TorchBackend
    from supergrep.encoder import resolve_model
    from supergrep.export.onnx_graph import token_vectors_module

    spec = resolve_model(tiny_projected)
    module, mask = token_vectors_module(spec, mask="4d")
    ids = np.array([[101, 2000, 2001, 102, 0], [101, 3000, 102, 0, 0]], np.int64)
    am = (ids != 0).astype(np.int64)
    with torch.inference_mode():
        got = module(torch.from_numpy(ids), torch.from_numpy(am)).numpy()
    want = TorchBackend(spec, device="cpu").forward(ids, am)
    assert mask == "4d" and got.shape == (2, 5, 8)
    assert np.abs(got[am == 1] - want[am == 1]).max() < 1e-4


@pytest.mark.skipif(sys.platform != "darwin", reason="Core ML prediction needs macOS")
def test_prediction_matches_torch_on_macos(package, tiny_projected):  # pragma: no cover - macOS only
    from supergrep.backends.torch_backend import TorchBackend
    from supergrep.encoder import resolve_model
    from supergrep.export.coreml import import_coremltools

    ct = import_coremltools()
    model = ct.models.MLModel(str(package.output))
    ids = np.array([[101, 2000, 2001, 102], [101, 3000, 102, 0]], np.int32)
    am = (ids != 0).astype(np.int32)
    got = model.predict({"input_ids": ids, "attention_mask": am})["vectors"]
    want = TorchBackend(resolve_model(tiny_projected), device="cpu").forward(ids.astype(np.int64), am.astype(np.int64))
    cos = np.sum(got[am == 1] * want[am == 1], axis=-1)
    assert cos.min() >= 0.99  # float16 compute


def test_errors_are_one_line_usage_errors(tmp_path, package, tiny_projected, onnx_dirs):
    from supergrep.errors import UsageError
    from supergrep.export.coreml import export_coreml

    with pytest.raises(UsageError, match=r"\*\.mlpackage"):
        export_coreml(tiny_projected, tmp_path / "model.onnx")
    with pytest.raises(UsageError, match="--force"):
        export_coreml(tiny_projected, package.output)
    with pytest.raises(UsageError, match="--precision"):
        export_coreml(tiny_projected, tmp_path / "x.mlpackage", precision="int8")
    with pytest.raises(UsageError, match="ONNX export"):
        export_coreml(onnx_dirs["fp32"], tmp_path / "y.mlpackage")
