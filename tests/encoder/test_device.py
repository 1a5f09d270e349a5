"""Device selection: auto is CPU here; asking for a device that is not there is a UsageError."""

from __future__ import annotations

import pytest
import torch

from supergrep.backends import available_backends, load_backend
from supergrep.backends.torch_backend import pick_device, pick_dtype
from supergrep.encoder import Encoder
from supergrep.errors import UsageError

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
no_mps = pytest.mark.skipif(bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()),
                            reason="this machine has MPS")


@no_cuda
@no_mps
def test_auto_is_cpu_without_accelerators():
    assert pick_device("auto") == "cpu"
    assert pick_device("cpu") == "cpu"
    assert pick_dtype("cpu") == torch.float32


@no_cuda
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_cuda_is_a_usage_error(device):
    with pytest.raises(UsageError, match="CUDA is not available; use --device cpu"):
        pick_device(device)


@no_mps
def test_mps_without_mps_is_a_usage_error():
    with pytest.raises(UsageError, match="MPS is not available"):
        pick_device("mps")


@pytest.mark.parametrize("device", ["tpu", "gpu", "cuda:x"])
def test_unknown_device(device):
    with pytest.raises(UsageError, match="unknown device"):
        pick_device(device)


@no_cuda
def test_encoder_with_cuda_device_is_a_usage_error(zoo):
    from supergrep.encoder import resolve_model

    with pytest.raises(UsageError, match="--device cuda"):
        Encoder(resolve_model(zoo.path("bert")), device="cuda")


def test_unknown_backend(zoo):
    from supergrep.encoder import resolve_model

    assert available_backends() == ["mlx", "onnx", "torch"]
    with pytest.raises(UsageError, match="unknown backend 'jax'; choose one of: mlx, onnx, torch"):
        load_backend("jax", resolve_model(zoo.path("bert")))


def test_backend_whose_framework_is_missing_names_the_install(zoo, monkeypatch):
    import importlib.util

    from supergrep.encoder import resolve_model

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlx" else real(name, *a))
    with pytest.raises(UsageError, match=r"--backend mlx needs mlx, which is not installed: pip install 'supergrep\[mlx\]'"):
        load_backend("mlx", resolve_model(zoo.path("bert")))


def test_backend_forward_contract(zoo):
    """The backend takes and returns NumPy: (B, L) int64 in, (B, L, dim) float32 unit rows out."""
    import numpy as np

    from supergrep.encoder import resolve_model

    backend = load_backend("torch", resolve_model(zoo.path("st")), device="cpu")
    ids = np.array([[2, 40, 41, 3], [2, 40, 3, 0]], dtype=np.int64)
    mask = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=np.int64)
    out = backend.forward(ids, mask)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (2, 4, 24)
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), 1.0, atol=1e-5)
    # padding does not change the real tokens' vectors
    alone = backend.forward(ids[1:, :3], mask[1:, :3])
    np.testing.assert_allclose(out[1, :3], alone[0], atol=1e-5)
