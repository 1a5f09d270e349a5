"""Fixtures for the deployment-form tests: tiny models and their exported forms, built once."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_projected(tmp_path_factory, tiny_model) -> Path:
    """supergrep's layout: the tiny BERT (MiniLM tokenizer) + an 8-d projection + settings."""
    from tiny_models import make_supergrep

    root = tmp_path_factory.mktemp("projected")
    return make_supergrep(root / "model", base=str(tiny_model), projection_out=8,
                          settings={"document_max_tokens": 48, "query_max_tokens": 16})


@pytest.fixture(scope="session")
def onnx_dirs(tmp_path_factory, tiny_projected):
    """{"fp32": dir, "int8": dir}: `supergrep export onnx` of the projected tiny model."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from supergrep.export.onnx_graph import export_onnx

    root = tmp_path_factory.mktemp("onnx")
    return {"fp32": export_onnx(tiny_projected, root / "fp32").output,
            "int8": export_onnx(tiny_projected, root / "int8", int8=True).output}
