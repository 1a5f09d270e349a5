"""arrays.cast: the store's float32 -> float16 and the encoder's host copies, through torch's
vectorised kernels when torch is loaded: the same bits as NumPy, always a fresh array."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from supergrep import arrays


def _values(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    edge = np.array([np.inf, -np.inf, np.nan, 65504, 65519.99, 65520, 1e-8, -0.0, 6e-5, 6.1e-5, 1e5], np.float32)
    return np.concatenate([(rng.standard_normal(n) * 300).astype(np.float32), edge]).reshape(-1, 1)


@pytest.mark.parametrize("with_torch", [True, False])
def test_cast_gives_numpys_bits_and_a_fresh_array(with_torch, monkeypatch):
    pytest.importorskip("torch")
    if not with_torch:
        monkeypatch.delitem(sys.modules, "torch")
    x = _values(arrays.TORCH_FROM * 2)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    got = arrays.cast(x, np.float16)
    assert got.dtype == np.float16 and got.flags.c_contiguous
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    back = arrays.cast(got, np.float32)
    np.testing.assert_array_equal(back, got.astype(np.float32))
    same = arrays.cast(x, np.float32)  # a copy, not a view: the encoder's pinned buffer is reused
    assert not np.shares_memory(same, x)
    np.testing.assert_array_equal(same, x)


def test_small_and_other_dtypes_stay_in_numpy():
    x = np.arange(10, dtype=np.int64)
    assert arrays.cast(x, np.float16).tolist() == list(range(10))
    y = np.arange(arrays.TORCH_FROM * 2, dtype=np.float64)
    assert arrays.cast(y, np.float16).dtype == np.float16


def test_read_only_arrays_cast_without_a_warning(tmp_path):
    """Memory-mapped segments are read-only: torch.from_numpy would warn, so NumPy casts them."""
    import warnings

    x = _values(arrays.TORCH_FROM * 2)
    path = tmp_path / "v.npy"
    np.save(path, x)
    ro = np.load(path, mmap_mode="r")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with np.errstate(over="ignore"):
            got = arrays.cast(ro, np.float16)
            want = x.astype(np.float16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # NumPy's copies in other threads
@pytest.mark.parametrize("threads", [True, False])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_pack_is_concatenate_then_cast(threads, dtype, monkeypatch):
    """The store packs a batch's per-chunk vectors in one pass: the same bits as stacking them
    and casting after, in one thread or spread over threads."""
    monkeypatch.setattr(arrays, "THREADS_FROM", 1 if threads else 1 << 40)
    x = _values(arrays.TORCH_FROM * 3)[:180000].reshape(-1, 3)  # (rows, 3)
    x.reshape(-1)[-11:] = _values(0).ravel()  # the edge values (inf, nan, overflow, subnormal)
    cuts = np.random.default_rng(1).integers(0, len(x), 40)
    parts = [p for p in np.split(x, np.sort(cuts)) if len(p)] + [x[:0]]
    with np.errstate(over="ignore"):
        want = np.concatenate(parts).astype(dtype)
        got = arrays.pack(parts, dtype, 3)
    assert got.dtype == dtype and got.flags.c_contiguous and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    assert not any(np.shares_memory(got, p) for p in parts)


def test_pack_checks_shapes_and_handles_nothing():
    assert arrays.pack([], np.float16, 4).shape == (0, 4)
    with pytest.raises(ValueError):
        arrays.pack([np.zeros((2, 3), np.float32)], np.float16, 4)
