"""HostStager: a step's host arrays through one staging buffer and one copy."""

import numpy as np
import torch

from supergrep.backends.torch_stage import ALIGN, HostStager


def _arrays(rng, n):
    return [
        rng.integers(0, 32000, (n, 37)).astype(np.int64),  # ids
        rng.random((n, 37)) > 0.3,  # a bool mask
        np.arange(n + 1, dtype=np.int32) * 5,  # cu_seqlens
        rng.standard_normal((n, 3)).astype(np.float32),  # teacher scores
        np.zeros((0, 37), np.int64),  # an empty array keeps its shape
        rng.integers(0, 9, (n, 4, 6)).astype(np.int64)[:, ::2, 1:5],  # not contiguous
    ]


def test_round_trip_keeps_every_dtype_shape_and_value():
    rng = np.random.default_rng(0)
    st = HostStager("cpu", pin=False, slots=2)
    arrays = _arrays(rng, 5)
    out = st.move(arrays)
    assert len(out) == len(arrays)
    for a, t in zip(arrays, out):
        assert t.dtype == torch.from_numpy(np.ascontiguousarray(a)).dtype
        assert tuple(t.shape) == a.shape
        np.testing.assert_array_equal(t.numpy(), a)


def test_one_buffer_with_aligned_starts():
    st = HostStager("cpu", pin=False)
    out = st.move([np.ones(3, np.int8), np.ones(2, np.float64), np.ones((2, 2), np.int32)])
    base = out[0].untyped_storage().data_ptr()
    starts = [t.data_ptr() - base for t in out]
    assert all(t.untyped_storage().data_ptr() == base for t in out)  # one copy, views into it
    assert starts == [0, ALIGN, 2 * ALIGN]


def test_reused_slots_do_not_change_earlier_results():
    """Later calls rewrite the ring's buffers (and grow them): tensors handed out before keep
    their values."""
    rng = np.random.default_rng(1)
    st = HostStager("cpu", pin=False, slots=2)
    kept = []
    for i in range(6):
        arrays = _arrays(rng, 3 + 40 * i)  # growing: a slot's buffer is replaced
        kept.append((arrays, st.move(arrays)))
    for arrays, out in kept:
        for a, t in zip(arrays, out):
            np.testing.assert_array_equal(t.numpy(), a)

