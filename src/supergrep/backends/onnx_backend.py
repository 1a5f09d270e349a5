"""onnxruntime backend: runs a `supergrep export onnx` directory on the CPU, without torch.

The graph already ends in the projection and the L2 normalisation, so ``forward`` is one
``session.run``. Import cost is onnxruntime's alone (about 0.2 s against ~5 s for torch +
transformers), which is what makes a cold `supergrep search` fast.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import numpy as np

from supergrep.errors import ModelError, UsageError

if TYPE_CHECKING:
    from supergrep.encoder.spec import ModelSpec

log = logging.getLogger(__name__)


# onnxruntime's own fusions whose CPU kernels run slower than the ops they replace (1.32, 2 cores:
# SkipLayerNormalization 3.4x slower than Add + LayerNormalization, BiasGelu than Add + Gelu);
# the export leaves them unfused for the same reason (export/onnx_graph.py, _optimize).
SLOW_FUSIONS = ["SkipLayerNormFusion", "BiasGeluFusion"]


class OnnxBackend:
    name = "onnx"

    def __init__(self, spec: ModelSpec, device: str = "auto", threads: int = 0):
        if spec.onnx_file is None:
            raise UsageError(f"{spec.path} has no ONNX graph; export one with `supergrep export onnx "
                             f"{spec.path} -o DIR` and pass --model-path DIR (or use --backend torch)")
        device = (device or "auto").strip().lower()
        if device not in ("auto", "cpu"):
            raise UsageError(f"the onnx backend runs on the CPU, not '{device}'; use --backend torch "
                             f"for cuda/mps, or --device cpu")
        try:
            import onnxruntime as ort
        except ImportError:
            raise UsageError("onnxruntime is not installed; pip install 'supergrep[export]' "
                             "or use --backend torch") from None
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = threads if threads > 0 else (os.cpu_count() or 1)
        so.inter_op_num_threads = 1
        # No busy-waiting between calls: on a small CPU the spinning pool steals the cores that
        # tokenisation and NumPy scoring need (the same reason the CLI sets OMP_WAIT_POLICY).
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(str(spec.onnx_file), so, providers=["CPUExecutionProvider"],
                                                disabled_optimizers=SLOW_FUSIONS)
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own exception types
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
            raise ModelError(f"{spec.onnx_file}: onnxruntime cannot load it ({first}); export the "
                             f"model again or upgrade onnxruntime") from None
        names = {i.name for i in self.session.get_inputs()}
        if names != {"input_ids", "attention_mask"}:
            raise ModelError(f"{spec.onnx_file}: expected inputs input_ids and attention_mask, got "
                             f"{sorted(names)}; export it with `supergrep export onnx`")
        self.device = "cpu"
        self.dtype = "int8" if "int8" in spec.form else "float32"
        self.dim = spec.dim

    def forward(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": np.ascontiguousarray(input_ids, dtype=np.int64),
                "attention_mask": np.ascontiguousarray(attention_mask, dtype=np.int64)}
        (vecs,) = self.session.run(["vectors"], feed)  # (B, L, dim), unit rows
        return np.asarray(vecs, dtype=np.float32)
