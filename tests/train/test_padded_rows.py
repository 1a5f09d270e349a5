"""padded_rows: the padded layout as a scatter (backward: a gather) equals the gather form it
replaced, forward and backward, eager and compiled with dynamic shapes, with padding (index N)
and filler rows nothing gathers."""

import numpy as np
import pytest
import torch

from supergrep.backends import torch_train
from supergrep.backends.packing import flatten_queries_and_documents
from supergrep.backends.torch_compile import compile_dynamic


def _case(seed: int):
    rng = np.random.default_rng(seed)
    q_len, d_len = rng.integers(3, 9, size=5), rng.integers(1, 30, size=5)
    qm = np.arange(8)[None, :] < q_len[:, None]
    dm = np.arange(29)[None, :] < d_len[:, None]
    f = flatten_queries_and_documents(np.ones(qm.shape, np.int64), qm, np.ones(dm.shape, np.int64), dm,
                                      pad_multiple=16, fixed_fillers=2)  # fillers: rows nothing gathers
    assert f.ids.shape[0] > (q_len.sum() + d_len.sum())
    flat = torch.randn(f.ids.shape[0], 6, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return flat, torch.from_numpy(f.gather)


def _both(fn, flat, gather, weight):
    x = flat.clone().requires_grad_()
    out = fn(x, gather)
    (out * weight).sum().backward()
    return out.detach(), x.grad


@pytest.mark.parametrize("compiled", [False, True])
def test_scatter_form_equals_the_gather_form(monkeypatch, compiled):
    fn = compile_dynamic(torch_train.padded_rows, None) if compiled else torch_train.padded_rows
    for seed in range(3):  # new shapes each time: the compiled form is dynamic
        flat, gather = _case(seed)
        weight = torch.randn(*gather.shape, 6, dtype=torch.float64)
        monkeypatch.setattr(torch_train, "SCATTER_ROWS", False)
        ref = _both(torch_train.padded_rows, flat, gather, weight)
        monkeypatch.setattr(torch_train, "SCATTER_ROWS", True)
        got = _both(fn, flat, gather, weight)
        assert got[0].shape == ref[0].shape == (*gather.shape, 6)
        torch.testing.assert_close(got[0], ref[0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got[1], ref[1], rtol=1e-12, atol=1e-12)
        pad = gather == flat.shape[0]
        assert pad.any() and got[0][pad].abs().max() == 0  # padding: zero vectors
        assert torch.allclose(got[0][~pad].norm(dim=-1), torch.ones((), dtype=torch.float64), atol=1e-12)  # real rows: unit
        unused = torch.ones(flat.shape[0], dtype=torch.bool)
        unused[gather[~pad]] = False  # the fillers: no gradient reaches them
        assert unused.any() and got[1][unused].abs().max() == 0
