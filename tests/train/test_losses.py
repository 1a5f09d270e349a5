"""Losses: every backend's ops against the NumPy reference on a 2x3x4 example."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from supergrep.backends.torch_ops import TorchOps
from supergrep.train.losses import contrastive_loss, maxsim_scores
from supergrep.train.ops import NumpyOps


def example(seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, 3, 4))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    d = rng.standard_normal((3, 5, 4))  # 2 positives + 1 hard negative
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    qm = np.array([[True, True, False], [True, True, True]])
    dm = np.array([[True] * 5, [True, True, True, False, False], [True, False, False, False, False]])
    return q, qm, d, dm


def brute_scores(q, qm, d, dm):
    out = np.zeros((len(q), len(d)))
    for i in range(len(q)):
        for j in range(len(d)):
            sims = q[i][qm[i]] @ d[j][dm[j]].T
            out[i, j] = sims.max(axis=1).mean()
    return out


def test_numpy_maxsim_matches_brute_force():
    q, qm, d, dm = example()
    np.testing.assert_allclose(maxsim_scores(NumpyOps(), q, qm, d, dm, doc_chunk=2), brute_scores(q, qm, d, dm))


@pytest.mark.parametrize("margin_weight", [0.0, 0.1])
def test_torch_matches_numpy_reference_values_and_gradients(margin_weight):
    q, qm, d, dm = example()
    fn = contrastive_loss(0.07, 0.2, margin_weight)
    ref_loss, ref_acc = fn(NumpyOps(), q, qm, d, dm)
    tq = torch.tensor(q, requires_grad=True)
    td = torch.tensor(d, requires_grad=True)
    loss, acc = fn(TorchOps(), tq, torch.tensor(qm), td, torch.tensor(dm))
    assert float(loss.detach()) == pytest.approx(float(ref_loss), rel=1e-9)
    assert float(acc) == float(ref_acc)
    loss.backward()
    # finite-difference check of one coordinate of d against the NumPy reference
    eps = 1e-6
    d2 = d.copy()
    d2[1, 0, 2] += eps
    num = (float(fn(NumpyOps(), q, qm, d2, dm)[0]) - float(ref_loss)) / eps
    assert float(td.grad[1, 0, 2]) == pytest.approx(num, rel=1e-3, abs=1e-6)
    assert torch.isfinite(tq.grad).all() and tq.grad[0, 2].abs().sum() == 0  # masked token: no gradient
