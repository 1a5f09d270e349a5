"""Integer matrix products for the compressed store's exact re-rank.

The re-rank scores decoded residuals against the query: ``(tokens, dim) @ (dim, q)``. In float32
that product and the float32 decode in front of it were ~45% + ~55% of the re-rank's time (27K
tokens: 11 ms of BLAS at ~61 GFLOP/s on one core here). As 8-bit integers the decoded tokens take
a quarter of the bytes and the product runs on the CPU's integer dot-product instructions
(VNNI on x86, SDOT on ARM): 0.15-0.19 ms per 2,048 tokens against 0.96 ms in float32
(docs/benchmarks.md, "Integer scoring").

``int_matmul(a, b)`` computes ``a @ b`` exactly in int32 for ``a`` uint8 with values in [0, 127]
and ``b`` int8 in [-127, 127]. Seven bits on the left keep every pair of products inside int16,
so kernels that add pairs before widening (AVX2's ``vpmaddubsw``, used where VNNI is missing)
cannot saturate. Every backend returns the same integers, so scores never depend on which one
ran:

- onnxruntime's ``MatMulInteger`` (uint8 x int8: MLAS's fast path; int8 x int8 measured 15x
  slower there), when onnxruntime is loaded or installed (the `export` extra; the CPU default
  encoder already loads it);
- ``torch._int_mm``, when the process has already loaded torch (a torch encoder) and not
  onnxruntime. This package never imports torch for it: importing torch costs ~1.8 s, and the
  index layer stays framework-free (import-linter);
- float32 BLAS otherwise: exact too, since every partial sum stays below 2**24 (dim * 127 *
  127 = 6.2M at 384 dimensions; ``MAX_DIM`` bounds it), at float32 speed.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

MAX_DIM = (1 << 24) // (127 * 127)  # 1,040: float32 sums of the products stay exact below this

_LOCK = threading.Lock()
_IMPL: list = []  # [callable] once chosen


def _ort_impl():
    import onnxruntime as ort
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])], "int_matmul",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [None, None]),
         helper.make_tensor_value_info("B", TensorProto.INT8, [None, None])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [None, None])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    so = ort.SessionOptions()
    # the store runs blocks on its own helper thread; one thread per call, no spinning pool
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return sess.run(None, {"A": a, "B": b})[0]  # InferenceSession.run is thread-safe

    return run


def _torch_impl():
    torch = sys.modules["torch"]  # KeyError where torch is not loaded: next backend

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        # values <= 127: the uint8 bytes read as int8 are the same numbers
        return torch._int_mm(torch.from_numpy(a.view(np.int8)), torch.from_numpy(b)).numpy()

    run(np.zeros((8, 8), np.uint8), np.zeros((8, 8), np.int8))  # fails here, not mid-search
    return run


def _numpy_impl():
    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a.astype(np.float32) @ b.astype(np.float32)).astype(np.int32)

    return run


def _choose() -> tuple[str, object]:
    order = [("onnxruntime", _ort_impl), ("torch", _torch_impl)]
    if "torch" in sys.modules and "onnxruntime" not in sys.modules:
        order.reverse()  # no 0.2 s import of onnxruntime where torch already runs the encoder
    for name, make in order:
        try:
            return name, make()
        except Exception:  # noqa: BLE001 - not installed, or this build lacks the op: next one
            continue
    return "numpy", _numpy_impl()


def _impl() -> tuple[str, object]:
    if not _IMPL:
        with _LOCK:
            if not _IMPL:
                _IMPL.append(_choose())
    return _IMPL[0]


def backend() -> str:
    """Which implementation ``int_matmul`` runs on: onnxruntime, torch or numpy."""
    return _impl()[0]


def int_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact ``a @ b`` as int32: ``a`` (n, k) uint8 in [0, 127], ``b`` (k, m) int8 in [-127, 127],
    k <= ``MAX_DIM``.

    >>> a = np.array([[1, 2, 127], [0, 0, 5]], np.uint8)
    >>> b = np.array([[3, -127], [-1, 2], [127, 1]], np.int8)
    >>> int_matmul(a, b).tolist()
    [[16130, 4], [635, 5]]
    """
    if a.shape[0] == 0 or b.shape[1] == 0:
        return np.zeros((a.shape[0], b.shape[1]), np.int32)
    return _impl()[1](np.ascontiguousarray(a), np.ascontiguousarray(b))
